"""Leadership: one scheduler ticks a cluster at a time.

The database lock is always taken (a PostgreSQL session advisory lock on its
own connection, or an exclusive file lock beside the SQLite file): it is what
makes two ticks at once impossible. With `REDIS_URL`, a Redis lease is held as
well, so schedulers on several machines see who leads; when Redis is out of
reach the leader carries on under the database lock alone and says so.

Every lock is held while its holder lives: a killed leader's connection or
file descriptor closes and a standby takes over on its next attempt.
"""

import fcntl
import hashlib
import logging
import os
import socket
import uuid
from pathlib import Path

from django.conf import settings
from django.db import connection

log = logging.getLogger(__name__)


def holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _lock_key(name: str) -> int:
    """A stable signed 64-bit key for pg advisory locks."""
    return int.from_bytes(hashlib.sha256(f"allot:{name}".encode()).digest()[:8], "big", signed=True)


class PostgresLock:
    def __init__(self, name: str):
        self.key = _lock_key(name)
        self.conn = None

    def acquire(self) -> bool:
        import psycopg

        if self.conn is not None and not self.conn.closed:
            return self.still_held()
        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        try:
            self.conn = psycopg.connect(**params, autocommit=True, connect_timeout=5)
            got = self.conn.execute("SELECT pg_try_advisory_lock(%s)", [self.key]).fetchone()[0]
        except psycopg.Error as error:
            log.warning("leader lock: PostgreSQL unreachable (%s)", error)
            self.release()
            return False
        if not got:
            self.release()
        return bool(got)

    def still_held(self) -> bool:
        import psycopg

        if self.conn is None or self.conn.closed:
            return False
        try:
            self.conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            self.release()
            return False

    def release(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()  # closing the session releases the advisory lock
            finally:
                self.conn = None


class FileLock:
    def __init__(self, name: str):
        database = Path(settings.DATABASES["default"]["NAME"])
        self.path = database.with_name(f"{database.name}.{name}.lock")
        self.handle = None

    def acquire(self) -> bool:
        if self.handle is not None:
            return True
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(holder_name())
        handle.flush()
        self.handle = handle
        return True

    def still_held(self) -> bool:
        return self.handle is not None

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None


class RedisLease:
    """A Redis key with a time to live, renewed by its holder every tick."""

    RENEW = """
    if redis.call('get', KEYS[1]) == ARGV[1] then
        return redis.call('pexpire', KEYS[1], ARGV[2])
    end
    return 0
    """

    def __init__(self, name: str, url: str, ttl_seconds: float):
        import redis

        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self.key = f"allot:leader:{name}"
        self.token = f"{holder_name()}:{uuid.uuid4().hex[:8]}"
        self.ttl_ms = int(ttl_seconds * 1000)

    def acquire(self) -> bool:
        if self.client.set(self.key, self.token, nx=True, px=self.ttl_ms):
            return True
        return bool(self.client.eval(self.RENEW, 1, self.key, self.token, self.ttl_ms))

    def holder(self) -> str | None:
        value = self.client.get(self.key)
        return value.decode() if value else None

    def release(self) -> None:
        self.client.eval(
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
            1, self.key, self.token,
        )


class Leadership:
    """The scheduler's claim to lead: `acquire()` before every tick; True means go ahead."""

    def __init__(self, name: str = "scheduler", *, lease_seconds: float = 30):
        self.name = name
        self.database_lock = PostgresLock(name) if connection.vendor == "postgresql" else FileLock(name)
        url = getattr(settings, "REDIS_URL", None)
        self.lease = RedisLease(name, url, lease_seconds) if url else None
        self.status = "not leading"

    def acquire(self) -> bool:
        if not self.database_lock.acquire():
            self.status = "standby: another scheduler holds the database lock"
            return False
        if self.lease is not None:
            import redis

            try:
                if not self.lease.acquire():
                    self.status = f"standby: {self.lease.holder()} holds the Redis lease"
                    self.database_lock.release()
                    return False
            except redis.RedisError as error:
                self.status = f"leading on the database lock alone: Redis unreachable ({error.__class__.__name__})"
                log.warning("leader: %s", self.status)
                return True
        self.status = "leading"
        return True

    def release(self) -> None:
        if self.lease is not None:
            import redis

            try:
                self.lease.release()
            except redis.RedisError:
                pass
        self.database_lock.release()

"""Leadership: one scheduler ticks a cluster at a time.

The database lock is always taken (a PostgreSQL session advisory lock on its
own connection, or an exclusive file lock beside the SQLite file): it is what
makes two ticks at once impossible. With `REDIS_URL`, a Redis lease is held as
well, so schedulers on several machines see who leads; when Redis is out of
reach the leader carries on under the database lock alone and says so.

Every lock is held while its holder lives: a killed leader's connection or
file descriptor closes and a standby takes over on its next attempt. The
database lock decides: whoever holds it takes the Redis lease over from a
holder that died with its lease still running, instead of waiting it out.

`status` says where this scheduler stands in words an operator can act on;
it is logged when it changes and written on every tick record.
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
    """A session advisory lock on a connection of its own. A standby keeps its connection between attempts
    (one cheap query a poll, not a new session); any error closes it, and the next attempt connects again."""

    def __init__(self, name: str):
        self.key = _lock_key(name)
        self.conn = None
        self.held = False
        self.error = None  # why the last attempt could not even ask (the server is unreachable)

    def acquire(self) -> bool:
        import psycopg

        self.error = None
        if self.still_held():
            return True
        # Never held, or its session died with the server (a restart): ask again, on the session a standby
        # keeps, or on a new one when that one is gone too.
        for fresh in (False, True):
            try:
                if fresh or self.conn is None or self.conn.closed:
                    fresh = True
                    self.release()
                    params = connection.get_connection_params()
                    params.pop("cursor_factory", None)
                    params.pop("context", None)
                    self.conn = psycopg.connect(**params, autocommit=True, connect_timeout=5)
                self.held = bool(self.conn.execute("SELECT pg_try_advisory_lock(%s)", [self.key]).fetchone()[0])
                return self.held
            except psycopg.Error as error:
                self.release()
                if fresh:
                    self.error = f"PostgreSQL unreachable ({error.__class__.__name__})"
                    return False
        return False

    def still_held(self) -> bool:
        import psycopg

        if not self.held or self.conn is None or self.conn.closed:
            return False
        try:
            self.conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            self.release()
            return False

    def release(self) -> None:
        self.held = False
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
        self.error = None

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

    def take_over(self) -> str | None:
        """Hold the lease whoever held it; returns the previous holder (for the log)."""
        previous = self.client.set(self.key, self.token, px=self.ttl_ms, get=True)
        return previous.decode() if previous else None

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
            if self.database_lock.error:
                self._set_status(f"paused: {self.database_lock.error}; retrying every tick")
            else:
                self._set_status(f"standby: another {self.name} holds the database lock")
            return False
        if self.lease is not None:
            import redis

            try:
                if not self.lease.acquire():
                    # We hold the database lock, so the lease's holder cannot be ticking: it died (or
                    # lost its database) with its lease still running. Take it over rather than wait.
                    previous = self.lease.take_over()
                    log.warning("leader: took the Redis lease over from %s, whose database lock is gone",
                                previous)
            except redis.RedisError as error:
                self._set_status(
                    f"leading on the database lock alone: Redis unreachable ({error.__class__.__name__})"
                )
                return True
        self._set_status("leading")
        return True

    def _set_status(self, status: str) -> None:
        if status != self.status:
            (log.info if status == "leading" or status.startswith("standby") else log.warning)(
                "%s %s: %s", self.name, holder_name(), status)
        self.status = status

    def release(self) -> None:
        if self.lease is not None:
            import redis

            try:
                self.lease.release()
            except redis.RedisError:
                pass
        self.database_lock.release()

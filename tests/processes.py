"""Real processes against the test database: what a test needs to start them."""

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from celery import Celery
from django.conf import settings
from django.db import connection


def database_url() -> str:
    """The test database, as a child process must reach it."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@contextmanager
def celery_worker(redis_url: str, tmp_path: Path):
    """A `celery worker` process on Redis (its database flushed before and after) against the test database;
    yields a producer of our own to send it tasks (the in-process app runs tasks eagerly, as the embedded
    default does)."""
    client = redis.Redis.from_url(redis_url)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.fail(f"Redis is not running at {redis_url}: start it (see .ci/run)")
    client.flushdb()
    env = {
        **os.environ, "REDIS_URL": redis_url, "DATABASE_URL": database_url(), "SECRET_KEY": "allot-tests-only",
        "ALLOT_VAR_DIR": str(tmp_path),
    }
    worker = subprocess.Popen(
        [str(Path(sys.executable).with_name("celery")), "-A", "config", "worker", "--pool", "solo",
         "--concurrency", "1", "--loglevel", "WARNING", "--without-heartbeat", "--without-gossip"],
        env=env, cwd=settings.BASE_DIR, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "worker.log", "wb"),
    )
    producer = Celery("allot-test-producer", broker=redis_url, backend=redis_url)
    try:
        yield producer
    finally:
        producer.close()
        worker.terminate()
        worker.wait(timeout=20)
        client.flushdb()

"""The production path once for real: Celery beat's schedule names the tick; a worker on Redis runs it."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from celery import Celery
from django.conf import settings
from django.db import connection

from config.celery import app
from scheduler.models import Tick

pytestmark = pytest.mark.django_db(transaction=True)

REDIS_URL = os.environ.get("REDIS_URL_FOR_TESTS", "redis://127.0.0.1:6379/15")


def database_url() -> str:
    """The test database, as the worker process must reach it."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def test_beat_schedules_the_tick_every_interval():
    entry = settings.CELERY_BEAT_SCHEDULE["scheduler-tick"]
    assert entry["task"] == "scheduler.tick"
    assert entry["schedule"] == settings.ALLOT_TICK_SECONDS
    app.loader.import_default_modules()  # what a worker does at start: autodiscover the apps' tasks
    assert "scheduler.tick" in app.tasks


def test_a_worker_on_redis_runs_the_tick(demo, tmp_path):
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.fail(f"Redis is not running at {REDIS_URL}: start it (see .ci/run)")
    client.flushdb()
    env = {
        **os.environ, "REDIS_URL": REDIS_URL, "DATABASE_URL": database_url(), "SECRET_KEY": "allot-tests-only",
        "ALLOT_VAR_DIR": str(tmp_path),
    }
    worker = subprocess.Popen(
        [str(Path(sys.executable).with_name("celery")), "-A", "config", "worker", "--pool", "solo",
         "--concurrency", "1", "--loglevel", "WARNING", "--without-heartbeat", "--without-gossip"],
        env=env, cwd=settings.BASE_DIR, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "worker.log", "wb"),
    )
    # A producer of our own: the in-process app runs tasks eagerly, as the embedded default does.
    producer = Celery("allot-test-producer", broker=REDIS_URL, backend=REDIS_URL)
    try:
        outcome = producer.send_task("scheduler.tick").get(timeout=60)
        assert outcome["status"] == "leading"
        assert [tick["cluster"] for tick in outcome["ticks"]] == ["gb200-east"]
        deadline = time.monotonic() + 10
        while not Tick.objects.filter(cluster=demo).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert Tick.objects.filter(cluster=demo).count() == 1
    finally:
        producer.close()
        worker.terminate()
        worker.wait(timeout=20)
        client.flushdb()

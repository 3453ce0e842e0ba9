"""The production path once for real: Celery beat's schedule names the tick; a worker on Redis runs it."""

import os
import time

import pytest
from django.conf import settings

from config.celery import app
from scheduler.models import Tick
from tests.processes import celery_worker

pytestmark = pytest.mark.django_db(transaction=True)

REDIS_URL = os.environ.get("REDIS_URL_FOR_TESTS", "redis://127.0.0.1:6379/15")


def test_beat_schedules_the_tick_every_interval():
    entry = settings.CELERY_BEAT_SCHEDULE["scheduler-tick"]
    assert entry["task"] == "scheduler.tick"
    assert entry["schedule"] == settings.ALLOT_TICK_SECONDS
    app.loader.import_default_modules()  # what a worker does at start: autodiscover the apps' tasks
    assert "scheduler.tick" in app.tasks


def test_a_worker_on_redis_runs_the_tick(demo, tmp_path):
    with celery_worker(REDIS_URL, tmp_path) as producer:
        outcome = producer.send_task("scheduler.tick").get(timeout=60)
        assert outcome["status"] == "leading"
        assert [tick["cluster"] for tick in outcome["ticks"]] == ["gb200-east"]
        deadline = time.monotonic() + 10
        while not Tick.objects.filter(cluster=demo).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert Tick.objects.filter(cluster=demo).count() == 1

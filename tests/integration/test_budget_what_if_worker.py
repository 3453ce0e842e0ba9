"""The what-if's production path once for real: a Celery worker on Redis runs `budgets.tasks.run_what_if`."""

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from celery import Celery
from django.conf import settings
from django.db import connection

from budgets.models import Unit, WhatIf
from budgets.services import budget_request_create
from budgets.whatif import what_if_request
from tests.conftest import get_user
from tests.factories import make_job
from topology.models import Cluster

pytestmark = pytest.mark.django_db(transaction=True)

# The tick's worker test flushes its database; this one keeps to another.
_tick_redis = urlsplit(os.environ.get("REDIS_URL_FOR_TESTS", "redis://127.0.0.1:6379/15"))
REDIS_URL = urlunsplit(_tick_redis._replace(path="/13"))


def database_url() -> str:
    """The test database, as the worker process must reach it (as in test_celery_tick)."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def test_a_worker_on_redis_runs_the_what_if(demo, tmp_path):
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.fail(f"Redis is not running at {REDIS_URL}: start it (see .ci/run)")
    client.flushdb()
    make_job(project="olmo", gpus=16)
    budget_request = budget_request_create(user=get_user("alice"), unit=Unit.objects.get(name="olmo"),
                                           cluster=Cluster.objects.get(), share=60, justification="long context")
    queued, _ = what_if_request(budget_request=budget_request, user=get_user("pat"))
    env = {
        **os.environ, "REDIS_URL": REDIS_URL, "DATABASE_URL": database_url(), "SECRET_KEY": "allot-tests-only",
        "ALLOT_VAR_DIR": str(tmp_path),
    }
    worker = subprocess.Popen(
        [str(Path(sys.executable).with_name("celery")), "-A", "config", "worker", "--pool", "solo",
         "--concurrency", "1", "--loglevel", "WARNING", "--without-heartbeat", "--without-gossip"],
        env=env, cwd=settings.BASE_DIR, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "worker.log", "wb"),
    )
    producer = Celery("allot-test-producer", broker=REDIS_URL, backend=REDIS_URL)
    try:
        assert producer.send_task("budgets.tasks.run_what_if", args=[queued.pk]).get(timeout=90) == "done"
        done = WhatIf.objects.get(pk=queued.pk)
        assert done.status == "done" and [entry["status"] for entry in done.log] == ["queued", "running", "done"]
        assert done.results["units"][0]["unit"] == "olmo" and done.assumptions["pending_jobs"] == 1
    finally:
        producer.close()
        worker.terminate()
        worker.wait(timeout=20)
        client.flushdb()

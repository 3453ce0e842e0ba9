"""The what-if's production path once for real: a Celery worker on Redis runs `budgets.tasks.run_what_if`."""

import os
from urllib.parse import urlsplit, urlunsplit

import pytest

from budgets.models import Unit, WhatIf
from budgets.services import budget_request_create
from operations.whatif import what_if_request
from tests.conftest import get_user
from tests.factories import make_job
from tests.processes import celery_worker
from topology.models import Cluster

pytestmark = pytest.mark.django_db(transaction=True)

# The tick's worker test flushes its database; this one keeps to another.
_tick_redis = urlsplit(os.environ.get("REDIS_URL_FOR_TESTS", "redis://127.0.0.1:6379/15"))
REDIS_URL = urlunsplit(_tick_redis._replace(path="/13"))


def test_a_worker_on_redis_runs_the_what_if(demo, tmp_path):
    make_job(project="olmo", gpus=16)
    budget_request = budget_request_create(user=get_user("alice"), unit=Unit.objects.get(name="olmo"),
                                           cluster=Cluster.objects.get(), share=60, justification="long context")
    queued, _ = what_if_request(budget_request=budget_request, user=get_user("pat"))
    with celery_worker(REDIS_URL, tmp_path) as producer:
        assert producer.send_task("budgets.tasks.run_what_if", args=[queued.pk]).get(timeout=90) == "done"
        done = WhatIf.objects.get(pk=queued.pk)
        assert done.status == "done" and [entry["status"] for entry in done.log] == ["queued", "running", "done"]
        assert done.results["units"][0]["unit"] == "olmo" and done.assumptions["pending_jobs"] == 1

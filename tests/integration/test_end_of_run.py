"""The end of a live run (`job_end_run`): what the job becomes, what its timeline and the API say.

What becomes of it is `core.lifecycle.end_of_run`'s table (tests/unit/core/test_lifecycle.py has every
row); here each kind of end as a user meets it on a real job.
"""

import importlib
from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps

from scheduler.core.lifecycle import Cause, Outcome, StopCause
from scheduler.models import Job
from scheduler.services import job_end_run
from tests.factories import make_job

pytestmark = pytest.mark.django_db

HOST = "hgx-02-h01"
T0 = datetime(2031, 3, 3, 9, 0, tzinfo=UTC)
AT = T0 + timedelta(hours=2)


def running(demo, *, resumable=True, stop_cause="", stop_detail=""):
    job = make_job(gpus=8, on_hosts=[HOST], started=T0, resumable=resumable)
    Job.objects.filter(pk=job.pk).update(stop_cause=stop_cause, stop_detail=stop_detail)
    job.refresh_from_db()
    return job


# (stop cause being carried out, its detail, outcome, cause given, exit code, resumable) ->
# (state, event kind, event cause, failure reason, requeued with a back-off).
ROWS = [
    ("", "", Outcome.EXITED, None, 0, True, ("completed", "finish", "", "", False)),
    ("", "", Outcome.EXITED, None, 1, True, ("failed", "fail", "", "exited", False)),
    ("cancel", "", Outcome.STOPPED, None, None, True, ("cancelled", "stop", "cancel", "", False)),
    ("max_runtime", "", Outcome.EXITED, None, 143, True, ("failed", "stop", "max_runtime", "max_runtime", False)),
    ("failed", "rank 1 exited with 3", Outcome.EXITED, None, 3, True,
     ("failed", "fail", "failed: rank 1 exited with 3", "rank 1 exited with 3", False)),
    ("job:7", "", Outcome.EXITED, None, 143, True, ("pending", "requeue", "job:7", "", True)),
    ("job:7", "", Outcome.EXITED, None, 143, False, ("preempted", "stop", "job:7", "", False)),
    (f"drain:{HOST}", "", Outcome.STOPPED, None, None, False, ("preempted", "stop", f"drain:{HOST}", "", False)),
    ("", "", Outcome.LOST, StopCause(Cause.DOWN, HOST), None, True, ("pending", "requeue", f"down:{HOST}", "", True)),
    ("", "", Outcome.LOST, StopCause(Cause.DOWN, HOST), None, False,
     ("failed", "fail", f"down:{HOST}", f"down:{HOST}", False)),
    # A run lost with nothing stopping it (reconciliation): requeued, but with no back-off.
    ("", "", Outcome.LOST, None, None, True, ("pending", "requeue", "", "", False)),
    ("", "", Outcome.LOST, None, None, False, ("failed", "fail", "", "lost", False)),
]


@pytest.mark.parametrize(("stop_cause", "detail", "outcome", "cause", "exit_code", "resumable", "expected"), ROWS)
def test_each_end_as_the_job_shows_it(demo, stop_cause, detail, outcome, cause, exit_code, resumable, expected):
    job = running(demo, resumable=resumable, stop_cause=stop_cause, stop_detail=detail)
    ended = job_end_run(job=job, outcome=outcome, at=AT, actor="test", cause=cause, exit_code=exit_code)
    state, kind, event_cause, failure_reason, backs_off = expected
    event = ended.events.order_by("-id").first()
    assert (ended.state, event.kind, event.cause, ended.failure_reason) == (state, kind, event_cause, failure_reason)
    assert (ended.requeued_at == AT) == backs_off
    assert (ended.stop_cause, ended.stop_detail, ended.shown_stop_cause) == ("", "", "")
    assert not ended.assignments.filter(released_at__isnull=True).exists()
    if state == "pending":
        assert ended.restarts == 1 and ended.ended_at is None
    else:
        assert ended.restarts == 0 and ended.ended_at == AT
    # Another writer that comes second changes nothing.
    assert job_end_run(job=job, outcome=outcome, at=AT, actor="test", cause=cause, exit_code=exit_code) is None


def test_a_failing_job_shows_what_failed_until_it_ends(demo):
    job = running(demo, stop_cause="failed", stop_detail="no such user on hgx-02-h01: asmith")
    assert job.stop == StopCause(Cause.FAILED, "no such user on hgx-02-h01: asmith")
    assert job.shown_stop_cause == "failed: no such user on hgx-02-h01: asmith"
    assert job.shown_state == "stopping"


def test_the_migration_keeps_what_failed_apart_and_back(demo):
    migration = importlib.import_module("scheduler.migrations.0012_job_stop_detail")
    failing = running(demo)
    Job.objects.filter(pk=failing.pk).update(stop_cause="failed: rank 0 exited with 3")
    preempted = running(demo)
    Job.objects.filter(pk=preempted.pk).update(stop_cause="job:7")
    migration.split_failed(apps, None)
    rows = dict(Job.objects.filter(pk__in=[failing.pk, preempted.pk]).values_list("pk", "stop_cause"))
    assert rows == {failing.pk: "failed", preempted.pk: "job:7"}
    assert Job.objects.get(pk=failing.pk).shown_stop_cause == "failed: rank 0 exited with 3"
    migration.join_failed(apps, None)
    assert Job.objects.get(pk=failing.pk).stop_cause == "failed: rank 0 exited with 3"

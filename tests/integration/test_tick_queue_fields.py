"""What the tick stores on waiting jobs — position, reason, estimate — is what the core decided, for every job,
after a tick that changed some of them and not others; the queue and job pages show it. The tick reads stored
moments as the core's seconds from the database (`Epoch`) and rewrites only the rows that changed."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.core import schedule
from scheduler.models import Job
from scheduler.services import job_cancel
from scheduler.snapshot import Epoch, build_snapshot, moment, seconds
from scheduler.tick import run_tick
from tests.conftest import get_user
from tests.factories import make_job
from topology.choices import HostState
from topology.models import Host

pytestmark = pytest.mark.django_db

HOSTS = ["hgx-02-h01", "hgx-03-h01", "hgx-04-h01"]
MONTH = 30 * 86400
# After the org is loaded; microseconds, so that the estimates have them too.
T0 = datetime(2031, 3, 3, 9, 0, 0, 123457, tzinfo=UTC)


@pytest.fixture
def queue(demo):
    """Three 8-GPU servers in service, each held by a protected job ending at another time; six jobs wait, the
    first too large for the cluster."""
    Host.objects.exclude(name__in=HOSTS).update(state=HostState.DOWN, state_reason="test: out of service")
    for host, project, minutes in zip(HOSTS, ("tulu", "safety", "molmo"), (10, 30, 50), strict=True):
        make_job(project=project, user="carol", gpus=8, min_runtime=3600, on_hosts=[host],
                 started=T0 - timedelta(minutes=minutes), simulated_duration=MONTH)
    shapes = [("olmo", 400), ("olmo", 8), ("olmo", 4), ("olmo", 2), ("tulu", 2), ("safety", 1)]
    return [make_job(project=project, gpus=gpus, state="pending", submitted_at=T0 - timedelta(minutes=10 - n))
            for n, (project, gpus) in enumerate(shapes)]


def stored(jobs) -> dict[int, tuple]:
    return {job.pk: (job.queue_position, job.pending_reason, job.estimated_start)
            for job in Job.objects.filter(pk__in=[job.pk for job in jobs], state="pending")}


def tick(cluster, now):
    """The tick at `now`, and what the core decided for the waiting jobs on the tick's own snapshot."""
    with time_machine.travel(now, tick=False):
        decisions = schedule(build_snapshot(cluster, now=now).snapshot, now=now.timestamp(),
                             policy=cluster.scheduling_policy())
        run_tick(cluster, now=now)
    return {int(job_id): (status.position, status.reason, moment(status.estimated_start))
            for job_id, status in decisions.pending.items()}


def test_after_a_tick_that_changed_some_waiting_jobs_every_one_shows_what_the_core_decided(demo, queue, client):
    decided = tick(demo, T0)
    before = stored(queue)
    assert before == decided
    job_cancel(job=queue[2], actor="alice")  # the olmo 4-GPU job: those behind it move up
    now = T0 + timedelta(seconds=5)
    decided = tick(demo, now)
    after = stored(queue)
    assert after == decided

    # The tick rewrote some rows and some fields, and left others as they were.
    fields = ("position", "reason", "estimate")
    changed = {pk: {field for field, old, new in zip(fields, before[pk], row, strict=True) if old != new}
               for pk, row in after.items()}
    too_large, big, _, olmo, tulu, safety = (job.pk for job in queue)
    assert changed == {too_large: set(), big: {"reason"}, olmo: {"position"}, tulu: {"position", "reason"},
                       safety: {"position", "estimate"}}

    with time_machine.travel(now, tick=False):
        client.force_login(get_user("alice"))
        page = client.get(f"/clusters/{demo.name}/queue/")
        rows = {job.pk: (job.queue_position, job.pending_reason, job.estimated_start)
                for job in page.context["pending"]}
        assert rows == decided
        html = page.content.decode()
        for pk, (position, reason, estimate) in decided.items():
            body = client.get(f"/jobs/{pk}/").content.decode()
            assert f'data-testid="queue-position"><strong>{position}</strong> of 5 in' in body
            assert f'data-testid="pending-reason">{reason}</dd>' in body
            if estimate is not None:
                assert f"{timezone.localtime(estimate):%Y-%m-%d %H:%M}" in body
            assert reason in html


def test_a_tick_that_changes_no_waiting_job_writes_no_queue_field(demo, queue):
    tick(demo, T0)
    with CaptureQueriesContext(connection) as queries:
        tick(demo, T0)
    assert not [query["sql"] for query in queries if "pending_reason =" in query["sql"]]


@pytest.mark.parametrize("at", [
    T0, T0.replace(microsecond=0), T0.replace(microsecond=999999), T0.replace(microsecond=1),
    datetime(1999, 12, 31, 23, 59, 59, 500000, tzinfo=UTC), datetime(2026, 12, 5, 7, 30, 28, 654321, tzinfo=UTC),
])
def test_the_database_reads_a_stored_moment_as_the_cores_seconds_to_the_bit(demo, at):
    job = make_job(state="pending", submitted_at=at)
    # The tick writes estimates with SQL of its own (on SQLite: the text has '+00:00' after it).
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {Job._meta.db_table} SET estimated_start = %s WHERE id = %s", [at, job.pk])
    row = Job.objects.filter(pk=job.pk).annotate(
        submit=Epoch("submitted_at"), estimate=Epoch("estimated_start"), requeue=Epoch("requeued_at"),
    ).values_list("submitted_at", "estimated_start", "submit", "estimate", "requeue").get()
    assert row == (at, at, seconds(at), seconds(at), None)
    assert type(row[2]) is type(row[3]) is float

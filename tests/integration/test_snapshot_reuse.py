"""The snapshot reuses a pending job the last snapshot built when all it was built from is unchanged, and only
then: after changes to every input of a waiting job, it equals a snapshot built afresh."""

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model

from budgets.models import Unit
from scheduler import snapshot
from scheduler.models import Job
from tests.factories import make_job

pytestmark = pytest.mark.django_db

NOW = datetime(2031, 3, 3, 9, 0, 0, 123457, tzinfo=UTC)


def test_a_snapshot_that_reuses_the_last_ones_jobs_equals_one_built_afresh(demo):
    jobs = [make_job(project=project, user=user, gpus=gpus, state="pending",
                     submitted_at=NOW - timedelta(minutes=n), gpu_type="H100" if n == 1 else "")
            for n, (project, user, gpus) in enumerate([
                ("olmo", "alice", 8), ("olmo", "alice", 4), ("tulu", "carol", 2), ("safety", "bob", 1),
                ("olmo", "bob", 1), ("molmo", "dan", 16), ("tulu", "alice", 1), ("olmo", "carol", 2),
            ])]
    first = {job.id: job for job in snapshot.build_snapshot(demo, now=NOW).snapshot.pending}
    again = {job.id: job for job in snapshot.build_snapshot(demo, now=NOW).snapshot.pending}
    assert all(again[job_id] is job for job_id, job in first.items())  # nothing changed: every job reused

    # Every input of a waiting job changes for one of them: its row, its project's and its user's names, its claim.
    Job.objects.filter(pk=jobs[0].pk).update(gpus=6, min_runtime=7200)
    Job.objects.filter(pk=jobs[1].pk).update(requeued_at=NOW - timedelta(seconds=30), preemptions=1)
    Job.objects.filter(pk=jobs[2].pk).update(earmarked_gpus=["hgx-02-h01:0", "hgx-02-h01:1"])
    Job.objects.filter(pk=jobs[3].pk).update(priority="high", submitted_at=NOW - timedelta(microseconds=1))
    Unit.objects.filter(name="molmo").update(name="molmo-2")
    get_user_model().objects.filter(username="dan").update(username="daniel")
    Job.objects.filter(pk=jobs[6].pk).update(state="cancelled")
    Job.objects.filter(pk=jobs[7].pk).update(queue_position=3, pending_reason="waits", estimated_start=NOW)
    added = make_job(project="tulu", user="carol", gpus=2, state="pending", submitted_at=NOW)

    reused = snapshot.build_snapshot(demo, now=NOW)
    snapshot._BUILT.clear()
    afresh = snapshot.build_snapshot(demo, now=NOW)
    assert reused.snapshot == afresh.snapshot
    assert (reused.pending_fields, reused.earmarks) == (afresh.pending_fields, afresh.earmarks)

    kept = {job.id: job for job in reused.snapshot.pending}
    changed = {str(job.pk) for job in jobs[:6]}
    assert {job_id for job_id in kept if job_id in first and kept[job_id] is first[job_id]} == {
        str(jobs[4].pk), str(jobs[7].pk)}  # the queue fields are not the core's input
    assert str(jobs[6].pk) not in kept and str(added.pk) in kept
    assert {kept[job_id].project for job_id in changed} >= {"molmo-2"} and kept[str(jobs[5].pk)].user == "daniel"
    assert (kept[str(jobs[0].pk)].gpus, kept[str(jobs[2].pk)].earmarked_gpus) == (6, ("hgx-02-h01:0", "hgx-02-h01:1"))

"""The demo's simulated executor counts a run as the simulator does: a job that declared how often it checkpoints
reports each checkpoint (the scheduler times fair-share preemptions by them, as it does for what an agent's job
writes to $ALLOT_CHECKPOINT_FILE) and keeps its work up to the last one when preempted; a restart spends its
restart overhead before making progress; the job page says when the last checkpoint fell."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.choices import JobState
from scheduler.executors import advance_simulated
from scheduler.models import Job
from tests.conftest import get_user
from tests.factories import make_job
from topology.models import Cluster

pytestmark = pytest.mark.django_db


def _cluster():
    return Cluster.objects.get(name="gb200-east")


def test_a_running_job_reports_its_checkpoints_and_keeps_its_work_up_to_the_last_one_when_preempted(demo, client):
    now = timezone.now()
    start = now - timedelta(minutes=25)
    job = make_job(gpus=8, on_hosts=["hgx-01-h01"], started=start, checkpoint_every=600, simulated_duration=3600)
    advance_simulated(_cluster(), now=now)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert job.last_checkpoint_at == start + timedelta(minutes=20)

    client.force_login(get_user("alice"))
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-testid="last-checkpoint">' in html
    assert "it declared one every 10m, and is preempted for fair share early in an interval" in html

    # Preempted 4 minutes later: the 24 minutes since the start keep only the 20 up to the checkpoint.
    preemptor = make_job(project="tulu", user="carol", gpus=8, state=JobState.PENDING)
    Job.objects.filter(pk=job.pk).update(state=JobState.PREEMPTING, stop_cause=f"job:{preemptor.pk}")
    advance_simulated(_cluster(), now=start + timedelta(minutes=24))
    job.refresh_from_db()
    assert job.state == JobState.PENDING  # requeued
    assert job.work_done == 1200


def test_a_job_that_declared_no_interval_resumes_exactly_and_a_restart_spends_its_overhead_first(demo):
    now = timezone.now()
    start = now - timedelta(minutes=25)
    exact = make_job(gpus=8, on_hosts=["hgx-01-h01"], started=start, simulated_duration=3600)
    preemptor = make_job(project="tulu", user="carol", gpus=8, state=JobState.PENDING)
    Job.objects.filter(pk=exact.pk).update(state=JobState.PREEMPTING, stop_cause=f"job:{preemptor.pk}")
    advance_simulated(_cluster(), now=now)
    exact.refresh_from_db()
    assert exact.work_done == 1500 and exact.last_checkpoint_at is None

    # A restarted run (its second) of 3,600 s of work with 3,000 done: 300 s of overhead, then 600 s of work.
    restarted = make_job(gpus=8, on_hosts=["hgx-02-h01"], started=now - timedelta(seconds=899), restarts=1,
                         work_done=3000, simulated_duration=3600)
    advance_simulated(_cluster(), now=now)
    restarted.refresh_from_db()
    assert restarted.state == JobState.RUNNING
    advance_simulated(_cluster(), now=now + timedelta(seconds=1))
    restarted.refresh_from_db()
    assert restarted.state == JobState.COMPLETED and restarted.work_done == 3600

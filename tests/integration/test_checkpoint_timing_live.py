"""Rule 4's checkpoint timing in the live tick: a job that declared `checkpoint_every` and reported its last
checkpoint is preempted for fair share only when it would lose no more than the wait for its next one.

olmo (no usage) needs the 8-GPU server tulu's job holds past its minimum runtime. The job checkpoints every
30 min and reported one 20 min ago: taking it now would lose 20 min of work, against 9 min to wait for the
grace period before its next checkpoint. The first tick holds the server for olmo and preempts nothing; the
tick 9 min later preempts it, and its grace period ends just after the checkpoint.
"""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from scheduler.models import Job
from scheduler.snapshot import build_snapshot, seconds
from scheduler.tick import run_tick
from tests.factories import make_job, serve_from_one_host
from topology.models import Host

pytestmark = pytest.mark.django_db

HOST = "hgx-02-h01"
T0 = datetime(2031, 3, 3, 9, 0, tzinfo=UTC)


@pytest.fixture
def server(demo):
    """The demo cluster run by agents, with one 8-GPU server in service."""
    return serve_from_one_host(demo, HOST, T0)


def test_a_job_is_preempted_in_the_grace_period_before_its_next_checkpoint(server):
    with time_machine.travel(T0, tick=False):
        victim = make_job(project="tulu", user="carol", gpus=8, min_runtime=3600, on_hosts=[HOST],
                          started=T0 - timedelta(hours=3), checkpoint_every=1800,
                          last_checkpoint_at=T0 - timedelta(minutes=20), name="tulu-train")
        big = make_job(project="olmo", user="alice", gpus=8, min_runtime=3600, name="olmo-big")
        running = {job.id: job for job in build_snapshot(server).snapshot.running}
        assert running[str(victim.pk)].checkpoint_every == 1800
        run_tick(server)
        victim.refresh_from_db()
        big.refresh_from_db()
        assert (victim.state, big.state) == ("running", "pending")
        assert "reserved for it and frees in 10m" in big.pending_reason
    with time_machine.travel(T0 + timedelta(minutes=9), tick=False):
        Host.objects.filter(name=HOST).update(last_heartbeat_at=T0 + timedelta(minutes=9))
        run_tick(server)
        victim.refresh_from_db()
        assert victim.state == "preempting"
        # SIGKILL falls a minute later: at its checkpoint, T0 + 10 min.
        assert seconds(victim.stop_deadline) == seconds(T0 + timedelta(minutes=10))


def test_a_job_that_declared_no_interval_is_preempted_at_once(server):
    with time_machine.travel(T0, tick=False):
        victim = make_job(project="tulu", user="carol", gpus=8, min_runtime=3600, on_hosts=[HOST],
                          started=T0 - timedelta(hours=3), last_checkpoint_at=T0 - timedelta(minutes=20))
        make_job(project="olmo", user="alice", gpus=8, min_runtime=3600)
        run_tick(server)
        assert Job.objects.get(pk=victim.pk).state == "preempting"

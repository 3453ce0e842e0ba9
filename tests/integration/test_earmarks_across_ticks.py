"""Rule 4 in the live tick: the GPUs a preemption was decided for stay the preemptor's across real ticks.

olmo (no usage) needs a whole 8-GPU server that two of tulu's jobs hold past their minimum runtime. The
first tick preempts both and stores the claim on olmo's job. One victim's agent reports its exit early:
its GPUs are free, tulu has work waiting (the victim itself, requeued, and an older job) — and nothing of
tulu's starts there. When the second victim is gone, olmo's job starts on exactly the claimed GPUs.
"""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from scheduler.choices import EventKind
from scheduler.models import Job
from scheduler.services import job_cancel, job_end_run
from scheduler.tick import run_tick
from tests.factories import make_job, serve_from_one_host
from topology.choices import HostState
from topology.models import Host

pytestmark = pytest.mark.django_db

HOST = "hgx-02-h01"
# After the org is loaded (shares apply from the moment they are loaded).
T0 = datetime(2031, 3, 3, 9, 0, tzinfo=UTC)


@pytest.fixture
def server(demo):
    """The demo cluster run by agents, with one 8-GPU server in service."""
    assert not Host.objects.get(name=HOST).fast_lane  # hgx-01 is the demo's fast lane
    return serve_from_one_host(demo, HOST, T0)


def state(job):
    job.refresh_from_db()
    return job.state


def test_the_claim_survives_ticks_and_the_preemptor_starts_on_it(server):
    with time_machine.travel(T0, tick=False):
        victims = [make_job(project="tulu", user="carol", gpus=4, min_runtime=3600, on_hosts=[HOST],
                            started=T0 - timedelta(hours=3), name=f"tulu-{i}") for i in range(2)]
        waiting = make_job(project="tulu", user="carol", gpus=4, min_runtime=3600, name="tulu-wait",
                           submitted_at=T0 - timedelta(hours=2))
        big = make_job(project="olmo", user="alice", gpus=8, min_runtime=3600, name="olmo-big")
        run_tick(server)
        assert [state(v) for v in victims] == ["preempting", "preempting"]
        big.refresh_from_db()
        claim = sorted(big.earmarked_gpus)
        assert claim == sorted(f"{HOST}:{i}" for i in range(8))
        held = big.events.get(kind=EventKind.EARMARK)
        assert "8 GPUs held for it until it starts (hgx-02-h01)" in held.detail

    # The first victim's agent reports its exit 20 s in; the second is still in its grace period.
    with time_machine.travel(T0 + timedelta(seconds=20), tick=False):
        victims[0].refresh_from_db()
        job_end_run(job=victims[0], outcome="exited", exit_code=143, at=T0 + timedelta(seconds=20),
                    actor=f"agent:{HOST}")
        assert state(victims[0]) == "pending"  # requeued with its original submit time
        run_tick(server)
        assert state(waiting) == state(victims[0]) == state(big) == "pending"
        big.refresh_from_db()
        assert sorted(big.earmarked_gpus) == claim
        assert "waiting for the jobs it preempted" in big.pending_reason

    with time_machine.travel(T0 + timedelta(seconds=45), tick=False):
        victims[1].refresh_from_db()
        job_end_run(job=victims[1], outcome="exited", exit_code=143, at=T0 + timedelta(seconds=45),
                    actor=f"agent:{HOST}")
        run_tick(server)
        assert state(big) == "starting"
        assert sorted(big.assignments.values_list("gpu__host__name", "gpu__index")) == [(HOST, i) for i in range(8)]
        big.refresh_from_db()
        assert big.earmarked_gpus == []
        assert state(waiting) == "pending"


def test_a_claim_is_dropped_with_its_reason_when_the_host_goes_down_and_on_cancel(server):
    with time_machine.travel(T0, tick=False):
        victim = make_job(project="tulu", user="carol", gpus=8, min_runtime=3600, on_hosts=[HOST],
                          started=T0 - timedelta(hours=3))
        big = make_job(project="olmo", user="alice", gpus=8, min_runtime=3600)
        run_tick(server)
        big.refresh_from_db()
        assert len(big.earmarked_gpus) == 8
    with time_machine.travel(T0 + timedelta(seconds=10), tick=False):
        Host.objects.get(name=HOST).set_state(HostState.DOWN, actor="olga", reason="PSU failure",
                                              at=T0 + timedelta(seconds=10))
        run_tick(server)
        big.refresh_from_db()
        assert big.earmarked_gpus == []
        dropped = big.events.filter(kind=EventKind.EARMARK).last()
        assert dropped.detail == f"the GPUs held for it are free for others again: host {HOST} is down"
        assert state(victim) in ("pending", "failed")

    # Back in service, the job claims the server again (from tulu's next job there); cancelled, it lets go.
    Host.objects.filter(name=HOST).update(state=HostState.UP, state_reason="", last_heartbeat_at=T0)
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        other = make_job(project="tulu", user="carol", gpus=8, min_runtime=3600, on_hosts=[HOST],
                         started=T0 - timedelta(hours=3))
        run_tick(server)
        big.refresh_from_db()
        assert len(big.earmarked_gpus) == 8
        assert state(other) == "preempting"
        job_cancel(job=big, actor=big.user, reason="not needed")
        assert Job.objects.get(pk=big.pk).earmarked_gpus == []

"""Rule 4 times a fair-share preemption around the victim's checkpoints: a job that declared how often it
checkpoints (`checkpoint_every`) is taken only while it would lose no more work than the wait for its next
checkpoint's grace period: early in an interval, or in the grace period before a checkpoint, where the
checkpoint falls while it runs on through its grace and the work is kept (`model.checkpoint_window`)."""

from __future__ import annotations

import math
from dataclasses import replace

from scheduler.core import Policy, schedule
from scheduler.core.engine import decide
from scheduler.core.model import checkpoint_due, checkpoint_window, checkpoint_window_closes
from scheduler.core.quiet import CHECKPOINT_WINDOW, quiet_until
from scheduler.core.state import ClusterState

from .builders import DAY, HOUR, gpus_of, hgx, nvl72, pending, running, snapshot, topology, units

POLICY = Policy(tick=5, grace_period=60, unallocated_grace=10, restart_overhead=300)
# p has used far more than its share; q nothing: q may take from p (rule 4b).
ORG = units(("p", None, 50, 2000), ("q", None, 50, 0))
START = DAY - 2 * HOUR  # checkpoints at START + k × 30 min: DAY is one, the next DAY + 30 min


def _victim(**changes):
    job = running("v", "p", gpus_of("hgx-00-h01", 8), start_time=START, min_runtime=HOUR, checkpoint_every=1800)
    return replace(job, **changes)


def _snap(victim):
    return snapshot(topology(hgx("hgx-00")), ORG, running_jobs=[victim],
                    pending_jobs=[pending("g", "q", 8, min_runtime=HOUR, submit_time=DAY - 600)])


def test_checkpoints_come_every_interval_of_progress_and_a_restart_makes_progress_after_its_overhead() -> None:
    job = _victim()
    assert checkpoint_due(job, DAY + 100, POLICY) == DAY + 1800
    assert checkpoint_due(job, DAY, POLICY) == DAY
    restarted = replace(job, preemptions=1)
    assert checkpoint_due(restarted, DAY + 100, POLICY) == DAY + 300
    assert checkpoint_due(replace(job, checkpoint_every=None), DAY, POLICY) is None
    assert checkpoint_due(replace(job, resumable=False), DAY, POLICY) is None
    # A checkpoint the job reported off the declared grid (it took longer to start, say) counts from itself.
    assert checkpoint_due(replace(job, last_checkpoint=DAY - 1000), DAY + 100, POLICY) == DAY + 800
    assert checkpoint_due(replace(job, last_checkpoint=DAY + 100), DAY + 100, POLICY) == DAY + 100
    # One reported before this run's progress began (an earlier run's) does not.
    assert checkpoint_due(replace(restarted, last_checkpoint=START + 100), DAY + 100, POLICY) == DAY + 300
    # Taken while what it would lose (time since its checkpoint) is no more than the wait for the grace period
    # before the next one: until halfway to that, then again from the grace period before the checkpoint.
    assert checkpoint_window(job, DAY + 100, 60, POLICY) == DAY + 100
    assert checkpoint_window(job, DAY + 870, 60, POLICY) == DAY + 870
    assert checkpoint_window(job, DAY + 871, 60, POLICY) == DAY + 1740
    assert checkpoint_window(job, DAY + 1750, 60, POLICY) == DAY + 1750
    assert checkpoint_window(job, DAY + 1800, 60, POLICY) == DAY + 1800
    assert checkpoint_window_closes(job, DAY + 100, 60, POLICY) == (DAY + 870, DAY + 1740)
    assert checkpoint_window_closes(job, DAY + 1750, 60, POLICY) == (DAY + 1800 + 870, DAY + 3540)
    # However long the declared interval, nobody waits for it more than the policy's max_checkpoint_wait (30 min
    # by default): the job's owner declares it. Every 16 h: taken until 30 min before the grace period before
    # its checkpoint.
    long = replace(job, checkpoint_every=16 * HOUR)
    opens = START + 16 * HOUR - 60
    assert checkpoint_window(long, DAY + 10 * HOUR, 60, POLICY) == DAY + 10 * HOUR
    assert checkpoint_window(long, opens - POLICY.max_checkpoint_wait, 60, POLICY) == opens - POLICY.max_checkpoint_wait
    assert checkpoint_window(long, opens - POLICY.max_checkpoint_wait + 1, 60, POLICY) == opens
    assert checkpoint_window_closes(long, START + 2 * HOUR, 60, POLICY) == (opens - POLICY.max_checkpoint_wait, opens)
    # Checkpoints no further apart than the grace period: always.
    assert checkpoint_window(replace(job, checkpoint_every=50), DAY + 7, 60, POLICY) == DAY + 7


def test_a_less_served_job_preempts_late_in_an_interval_only_in_the_grace_period_before_the_checkpoint() -> None:
    snap = _snap(_victim())
    # 1000 s since its checkpoint, 740 s before the next one's grace period: it waits.
    late = schedule(snap, now=DAY + 1000, policy=POLICY)
    assert late.preemptions == ()
    # It knows when the GPUs come (taken at DAY + 1740, gone a grace period later).
    assert [(r.job_id, r.expected_start) for r in late.reservations] == [("g", DAY + 1800)]
    assert late.pending["g"].estimated_start == DAY + 1800
    state = ClusterState.from_snapshot(snap)
    decided = decide(state, now=DAY + 1000, policy=POLICY)
    named: list[str] = []
    assert quiet_until(state, now=DAY + 1000, policy=POLICY, last=decided, named=named) == DAY + 1740
    assert named == [CHECKPOINT_WINDOW]
    taken = schedule(snap, now=DAY + 1740, policy=POLICY)
    assert [(p.job_id, p.preemptor) for p in taken.preemptions] == [("v", "g")]
    assert taken.preemptions[0].grace == 60  # it leaves at DAY + 1800, right after its checkpoint
    # Early in the interval it is taken at once: it loses less than the wait would cost.
    early = schedule(snap, now=DAY + 100, policy=POLICY)
    assert [(p.job_id, p.preemptor) for p in early.preemptions] == [("v", "g")]


def test_the_simulator_is_woken_when_the_grace_period_before_the_checkpoint_opens() -> None:
    """Only after a tick that passed a job over for its checkpoints: otherwise a window opening changes
    nothing a tick would decide (here the waiting job is p's own, which can't take from p)."""
    own = ClusterState.from_snapshot(snapshot(
        topology(hgx("hgx-00")), ORG, running_jobs=[_victim()],
        pending_jobs=[pending("g", "p", 8, min_runtime=HOUR, submit_time=DAY - 600)]))
    decided = decide(own, now=DAY + 1000, policy=POLICY)
    assert quiet_until(own, now=DAY + 1000, policy=POLICY, last=decided) > DAY + 1740


def test_a_job_that_declared_no_interval_or_keeps_nothing_is_taken_at_once() -> None:
    for victim in (_victim(checkpoint_every=None), _victim(resumable=False)):
        decided = schedule(_snap(victim), now=DAY + 100, policy=POLICY)
        assert [(p.job_id, p.preemptor) for p in decided.preemptions] == [("v", "g")], victim


def test_a_cluster_whose_max_checkpoint_wait_is_zero_waits_for_no_checkpoint() -> None:
    """The operator's switch (cluster policy `max_checkpoint_wait: 0`): late in its interval the job is taken
    at once, as if it had declared none."""
    off = replace(POLICY, max_checkpoint_wait=0)
    decided = schedule(_snap(_victim()), now=DAY + 1000, policy=off)
    assert [(p.job_id, p.preemptor) for p in decided.preemptions] == [("v", "g")]
    assert checkpoint_window(_victim(), DAY + 1000, 60, off) == DAY + 1000
    assert checkpoint_window_closes(_victim(), DAY + 1000, 60, off) == (math.inf, math.inf)


def test_a_job_that_needs_a_whole_nvlink_domain_does_not_wait_for_checkpoints() -> None:
    """Rule 5's bound on large jobs' waits (cap + grace + tick) holds: they take victims once protection ends."""
    rack = nvl72("nvl72-00")
    victim = running("v", "p", tuple(g for host in rack[1] for g in host.gpus), start_time=START,
                     min_runtime=HOUR, checkpoint_every=1800)
    snap = snapshot(topology(rack), ORG, running_jobs=[victim],
                    pending_jobs=[pending("g", "q", 72, min_runtime=HOUR, topology="domain", submit_time=DAY - 600)])
    decided = schedule(snap, now=DAY + 100, policy=POLICY)
    assert [(p.job_id, p.preemptor) for p in decided.preemptions] == [("v", "g")]


def _rack_with(victims):
    """nvl72-00 with `victims` (p's) on its first hosts and q's own jobs, which q can't take, on the rest."""
    used = {g.rsplit(":", 1)[0] for v in victims for g in v.gpu_ids}
    own = [running(f"o{h}", "q", gpus_of(f"nvl72-00-h{h:02d}", 4), start_time=0, min_runtime=HOUR, seq=100 + h)
           for h in range(1, 19) if f"nvl72-00-h{h:02d}" not in used]
    return topology(nvl72("nvl72-00")), [*victims, *own]


def test_a_job_on_several_hosts_waits_for_victims_holding_whole_hosts() -> None:
    """Two hosts of a rack, each held whole by one of p's jobs late in its interval: an 8-GPU job on two
    hosts waits for their checkpoints, as a job on one host would."""
    topo, jobs = _rack_with([running(f"v{h}", "p", gpus_of(f"nvl72-00-h{h:02d}", 4), start_time=START,
                                     min_runtime=HOUR, checkpoint_every=1800) for h in (1, 2)])
    snap = snapshot(topo, ORG, running_jobs=jobs,
                    pending_jobs=[pending("g", "q", 8, min_runtime=HOUR, gpus_per_host=4, topology="domain",
                                          submit_time=DAY - 600)])
    assert schedule(snap, now=DAY + 1000, policy=POLICY).preemptions == ()
    taken = schedule(snap, now=DAY + 1740, policy=POLICY)
    assert sorted(p.job_id for p in taken.preemptions) == ["v1", "v2"]


def test_a_job_on_several_hosts_takes_small_jobs_sharing_a_host_between_their_checkpoints() -> None:
    """A host that small jobs share frees only when all of them go: waiting for each one's checkpoint would
    keep the others' GPUs idle, so a job needing whole hosts takes them as before."""
    topo, jobs = _rack_with([running(f"s{n}", "p", (f"nvl72-00-h{1 + n // 4:02d}:{n % 4}",), start_time=START,
                                     min_runtime=HOUR, checkpoint_every=1800) for n in range(8)])
    snap = snapshot(topo, ORG, running_jobs=jobs,
                    pending_jobs=[pending("g", "q", 8, min_runtime=HOUR, gpus_per_host=4, topology="domain",
                                          submit_time=DAY - 600)])
    decided = schedule(snap, now=DAY + 1000, policy=POLICY)
    assert sorted(p.job_id for p in decided.preemptions) == [f"s{n}" for n in range(8)]
    # A job on one host waits for the same small jobs' checkpoints.
    one_host = replace(snap, pending=(pending("g", "q", 4, min_runtime=HOUR, submit_time=DAY - 600),))
    assert schedule(one_host, now=DAY + 1000, policy=POLICY).preemptions == ()


def test_a_job_waiting_for_checkpoints_is_told_so() -> None:
    decided = schedule(_snap(_victim()), now=DAY + 1000, policy=replace(POLICY, max_reservations=0))
    assert "the jobs it may preempt are between their checkpoints" in decided.pending["g"].reason
    # A job that no rule lets take anything is told what it was before.
    own = replace(_snap(_victim()), pending=(pending("g", "p", 8, min_runtime=HOUR, submit_time=DAY - 600),))
    reason = schedule(own, now=DAY + 1000, policy=replace(POLICY, max_reservations=0)).pending["g"].reason
    assert "between their checkpoints" not in reason and "no running job may be preempted for it" in reason


def test_every_job_passed_over_for_checkpoints_says_so_though_an_earlier_search_alike_found_nothing() -> None:
    """g takes w (no interval declared); g2 and g3 would take v, which is late in its interval. g2 reserves v's
    host for when its checkpoint window opens; g3's search ends where g2's did, and its reason still names
    the checkpoints, not "no running job may be preempted"."""
    other = running("w", "p", gpus_of("hgx-01-h01", 8), start_time=START, min_runtime=HOUR)
    snap = snapshot(topology(hgx("hgx-00"), hgx("hgx-01")), ORG, running_jobs=[_victim(), other], pending_jobs=[
        pending(name, "q", 8, min_runtime=HOUR, submit_time=DAY - 600 + i) for i, name in enumerate(("g", "g2", "g3"))])
    decided = schedule(snap, now=DAY + 1000, policy=POLICY)
    assert [(p.job_id, p.preemptor) for p in decided.preemptions] == [("w", "g")]
    assert [(r.job_id, r.hosts, r.expected_start) for r in decided.reservations] == [
        ("g2", ("hgx-00-h01",), DAY + 1800)]
    assert "between their checkpoints" in decided.pending["g3"].reason

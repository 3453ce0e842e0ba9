"""What bounds how often one job is preempted: protection that doubles for allocated jobs, a back-off that
doubles for unallocated ones (which have no protection)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core import Policy, schedule
from scheduler.core.engine import decide
from scheduler.core.model import backoff, protection, shield, shielded_until
from scheduler.core.quiet import BACKOFF, quiet_until, waits_on_arrival
from scheduler.core.state import ClusterState

from .builders import DAY, HOUR, gpus_of, hgx, nvl72, pending, running, snapshot, topology, units
from .minisim import MiniCluster

POLICY = Policy(tick=5, grace_period=60, unallocated_grace=10, unallocated_backoff=300,
                max_unallocated_backoff=3600)
ORG = units(("p", None, 50, 0), ("q", None, 50, 0))


def test_the_back_off_doubles_with_each_preemption_up_to_the_cap() -> None:
    assert [backoff(n, POLICY) for n in range(7)] == [0, 300, 600, 1200, 2400, 3600, 3600]


def test_a_preempted_unallocated_job_waits_out_its_back_off_though_gpus_are_free() -> None:
    job = pending("u", "p", 4, min_runtime=0, preemptions=2, requeued_at=DAY - 100)
    snap = snapshot(topology(hgx("hgx-00")), ORG, pending_jobs=[job])
    waiting = schedule(snap, now=DAY, policy=POLICY)
    assert waiting.starts == ()
    status = waiting.pending["u"]
    assert status.estimated_start == DAY - 100 + 600
    assert "preempted 2 times, it backs off: may start again in 8m20s" in status.reason, status.reason
    assert [s.job_id for s in schedule(snap, now=DAY + 500, policy=POLICY).starts] == ["u"]


def test_an_allocated_job_is_not_held_back_by_its_preemptions() -> None:
    job = pending("a", "p", 4, min_runtime=HOUR, preemptions=3, requeued_at=DAY - 10)
    snap = snapshot(topology(hgx("hgx-00")), ORG, pending_jobs=[job])
    assert [s.job_id for s in schedule(snap, now=DAY, policy=POLICY).starts] == ["a"]


def test_the_simulator_is_woken_when_a_back_off_ends() -> None:
    """A caller that ticks only when something can change (the simulator) learns the moment from the core."""
    job = pending("u", "p", 4, min_runtime=0, preemptions=1, requeued_at=DAY - 100)
    state = ClusterState.from_snapshot(snapshot(topology(hgx("hgx-00")), ORG, pending_jobs=[job]))
    named: list[str] = []
    assert quiet_until(state, now=DAY, policy=POLICY, named=named) == DAY + 200
    assert named == [BACKOFF]  # which of its moments it is (bench/core_calls.py sorts calls by it)


def test_a_back_off_that_ends_where_the_job_cannot_fit_wakes_nobody() -> None:
    """Only a run leaving (an event, which ticks anyway) could make room: the end of a back-off counts only
    for a job whose place is free now. Here 2 of 8 GPUs are free: the 4-GPU job's end is skipped, the 2-GPU
    job's counts; with the host full, neither does."""
    filler = running("f", "q", gpus_of("hgx-00-h01", 6), min_runtime=0, start_time=DAY - HOUR)
    big = pending("big", "p", 4, min_runtime=0, preemptions=1, requeued_at=DAY - 100)
    small = pending("small", "p", 2, min_runtime=0, preemptions=2, requeued_at=DAY - 100)
    state = ClusterState.from_snapshot(snapshot(topology(hgx("hgx-00")), ORG, running_jobs=[filler],
                                                pending_jobs=[big, small]))
    assert quiet_until(state, now=DAY, policy=POLICY) == DAY + 500
    full = ClusterState.from_snapshot(snapshot(
        topology(hgx("hgx-00")), ORG, running_jobs=[replace(filler, gpu_ids=gpus_of("hgx-00-h01", 8))],
        pending_jobs=[big, small]))
    assert quiet_until(full, now=DAY, policy=POLICY) == float("inf")
    # A fraction may find room on a shared GPU however few GPUs are free: its back-off's end counts as it is.
    shared = pending("frac", "p", 1, min_runtime=0, gpu_milli=500, preemptions=1, requeued_at=DAY - 100)
    full.submit(shared)
    assert quiet_until(full, now=DAY, policy=POLICY) == DAY + 200


def test_an_unallocated_job_submitted_where_nothing_it_could_use_is_free_calls_no_tick() -> None:
    """It may neither preempt nor reserve: a tick would leave it waiting and decide nothing else anew, so the
    simulator need not call one for its arrival. Where free GPUs could hold it, or for an allocated job
    (which may preempt), or a fraction (which may share a GPU), the arrival calls its tick."""
    filler = running("f", "q", gpus_of("hgx-00-h01", 6), min_runtime=0, start_time=DAY - HOUR)
    state = ClusterState.from_snapshot(snapshot(topology(hgx("hgx-00")), ORG, running_jobs=[filler]))
    four = pending("u4", "p", 4, min_runtime=0, submit_time=DAY)
    state.submit(four)
    assert waits_on_arrival(state, four, policy=POLICY)
    assert decide(state, now=DAY, policy=POLICY, commit=False).starts == ()
    two = pending("u2", "p", 2, min_runtime=0, submit_time=DAY)
    state.submit(two)
    assert not waits_on_arrival(state, two, policy=POLICY)
    assert [s.job_id for s in decide(state, now=DAY, policy=POLICY).starts] == ["u2"]
    # The host is full now: only what may preempt, or share a GPU, calls a tick.
    later = pending("u1", "p", 1, min_runtime=0, submit_time=DAY + 60)
    allocated = pending("a4", "p", 4, min_runtime=HOUR, submit_time=DAY + 60)
    fraction = pending("f1", "p", 1, min_runtime=0, gpu_milli=500, submit_time=DAY + 60)
    for job, waits in ((later, True), (allocated, False), (fraction, False)):
        state.submit(job)
        assert waits_on_arrival(state, job, policy=POLICY) is waits, job.id


def test_an_unallocated_start_alone_calls_no_tick() -> None:
    """The 2 GPUs left free beside q's protected job are too few for p's waiting 4-GPU job, with or without
    the unallocated job that takes them: the next moment anything can change is when q's protection ends
    (the tick after the start decides nothing new)."""
    held = running("q-run", "q", gpus_of("hgx-00-h01", 6), start_time=DAY - HOUR, min_runtime=2 * HOUR)
    waiting = pending("p-big", "p", 4, min_runtime=HOUR, submit_time=DAY - 60)
    filler = pending("p-fill", "p", 2, min_runtime=0, submit_time=DAY - 30)
    state = ClusterState.from_snapshot(snapshot(topology(hgx("hgx-00")), ORG, running_jobs=[held],
                                                pending_jobs=[waiting, filler]))
    first = decide(state, now=DAY, policy=POLICY)
    assert [s.job_id for s in first.starts] == ["p-fill"]
    assert quiet_until(state, now=DAY, policy=POLICY, last=first) == DAY + HOUR
    after = decide(state, now=DAY + 5, policy=POLICY)
    assert after.starts == () and after.preemptions == ()


def test_a_start_that_made_the_loser_more_served_calls_no_tick_at_once() -> None:
    """p may take from q, but no victim of q's makes room for p's 16-GPU job (p's own protected job holds the
    other host). The tick starts q's small job: its charge made q more served while the walk compared, and it
    is gone at the next tick, where q is less served, so p may take no more than it could. Nothing calls a
    tick before the protections end (a claim's charge, made again at every tick's start, would)."""
    org = units(("p", None, 50, 0), ("q", None, 50, 500))
    old = running("q-old", "q", gpus_of("hgx-00-h01", 8), start_time=DAY - 10 * HOUR, min_runtime=HOUR)
    own = running("p-run", "p", gpus_of("hgx-01-h01", 6), start_time=DAY - HOUR, min_runtime=2 * HOUR)
    wide = pending("p-wide", "p", 16, min_runtime=HOUR, submit_time=DAY - 60)
    small = pending("q-small", "q", 2, min_runtime=HOUR, submit_time=DAY - 30)
    state = ClusterState.from_snapshot(snapshot(topology(hgx("hgx-00"), hgx("hgx-01")), org,
                                                running_jobs=[old, own], pending_jobs=[wide, small]))
    first = decide(state, now=DAY, policy=POLICY)
    assert [s.job_id for s in first.starts] == ["q-small"] and first.preemptions == ()
    assert quiet_until(state, now=DAY, policy=POLICY, last=first) == DAY + HOUR
    after = decide(state, now=DAY + POLICY.tick, policy=POLICY)
    assert after.starts == () and after.preemptions == ()


def _protected_q(p_usage: float, q_usage: float = 0, *, topology_of_waiting: str = "any"):
    """q's job holds one host, protected for another 30 minutes; p's own job holds the other; p waits for 8 GPUs.
    Usage in GPU-hours."""
    org = units(("p", None, 50, p_usage), ("q", None, 50, q_usage))
    q_job = running("q-run", "q", gpus_of("hgx-00-h01", 8), start_time=DAY - 30 * 60, min_runtime=HOUR)
    p_job = running("p-run", "p", gpus_of("hgx-01-h01", 8), start_time=DAY - 10 * HOUR, min_runtime=HOUR)
    waiting = pending("p-next", "p", 8, min_runtime=HOUR, submit_time=DAY - 60, topology=topology_of_waiting)
    return ClusterState.from_snapshot(snapshot(topology(hgx("hgx-00"), hgx("hgx-01")), org,
                                               running_jobs=[q_job, p_job], pending_jobs=[waiting]))


def test_a_protection_no_waiting_job_may_take_past_calls_no_tick() -> None:
    """p is far more served than q and its usage grows as fast: no job of p may take q's job once its
    protection ends, so that moment decides nothing (the tick there preempts nothing) and calls no tick."""
    state = _protected_q(5000)
    first = decide(state, now=DAY, policy=POLICY)
    assert first.starts == () and first.preemptions == ()
    woken = quiet_until(state, now=DAY, policy=POLICY, last=first)
    assert woken > DAY + 30 * 60 + POLICY.tick
    at_the_end = decide(state, now=DAY + 30 * 60 + POLICY.tick, policy=POLICY)
    assert at_the_end.starts == () and at_the_end.preemptions == ()


def test_a_protection_a_waiting_job_may_take_past_calls_the_tick_that_preempts() -> None:
    """p is less served than q: q's job is p's to take the moment its protection ends, and the tick called
    then preempts it for p's job."""
    state = _protected_q(0, 5000)
    first = decide(state, now=DAY, policy=POLICY)
    assert first.starts == () and first.preemptions == ()
    assert quiet_until(state, now=DAY, policy=POLICY, last=first) == DAY + 30 * 60
    then = decide(state, now=DAY + 30 * 60, policy=POLICY)
    assert [(p.job_id, p.preemptor) for p in then.preemptions] == [("q-run", "p-next")]


def test_a_protection_calls_its_tick_while_a_waiting_job_could_defragment() -> None:
    """A waiting multi-GPU job of topology `domain` may move any job past its protection to make room (rule 5's
    defragmentation), whoever may take from whom: with as many GPUs free in total as it asks (4 + 4 here, on
    two hosts), the protection's end is counted, and the tick then moves q's job out of its host for p's."""
    org = units(("p", None, 50, 5000), ("q", None, 50, 0))
    q_job = running("q-run", "q", gpus_of("hgx-00-h01", 4), start_time=DAY - 30 * 60, min_runtime=HOUR,
                    last_checkpoint=DAY + 25 * 60)
    p_jobs = [running("p-1", "p", gpus_of("hgx-01-h01", 4), start_time=DAY - 30 * 60, min_runtime=3 * HOUR),
              running("p-2", "p", gpus_of("hgx-02-h01", 8), start_time=DAY - 30 * 60, min_runtime=3 * HOUR)]
    waiting = pending("p-next", "p", 8, min_runtime=HOUR, submit_time=DAY - 60, topology="domain")
    state = ClusterState.from_snapshot(snapshot(topology(hgx("hgx-00"), hgx("hgx-01"), hgx("hgx-02")), org,
                                                running_jobs=[q_job, *p_jobs], pending_jobs=[waiting]))
    first = decide(state, now=DAY, policy=POLICY)
    assert first.starts == () and first.preemptions == ()
    assert quiet_until(state, now=DAY, policy=POLICY, last=first) == DAY + 30 * 60
    then = decide(state, now=DAY + 30 * 60, policy=POLICY)
    assert [(p.job_id, p.preemptor) for p in then.preemptions] == [("q-run", "p-next")]


def test_a_protection_calls_no_tick_for_a_job_that_could_not_defragment() -> None:
    """Defragmentation is tried only while as many GPUs are free in total as the waiting job asks: with both
    hosts full, only events free GPUs, so q's protection end (which p may not take past) calls no tick."""
    state = _protected_q(5000, topology_of_waiting="domain")
    first = decide(state, now=DAY, policy=POLICY)
    assert quiet_until(state, now=DAY, policy=POLICY, last=first) > DAY + 30 * 60 + POLICY.tick
    at_the_end = decide(state, now=DAY + 30 * 60 + POLICY.tick, policy=POLICY)
    assert at_the_end.starts == () and at_the_end.preemptions == ()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bursts=st.lists(st.tuples(st.integers(1, 8), st.integers(60, 4 * 3600)), min_size=3, max_size=12),
       seed=st.integers(0, 3))
def test_no_unallocated_job_is_preempted_more_often_than_its_back_off_allows(bursts, seed) -> None:
    """Allocated work arrives in bursts onto a host full of unallocated fillers: between two preemptions of
    one filler lies at least the back-off its earlier preemptions earned (and its run after the second)."""
    sim = MiniCluster(topology(hgx("hgx-00")), ORG, POLICY, now=DAY)
    for i in range(4):
        sim.submit(pending(f"u{i}", "p", 2, min_runtime=0, submit_time=0, seq=i), duration=30 * DAY)
    seq = 100
    for gpus, lasts in bursts:
        sim.submit(pending(f"a{seq}", "q", gpus, min_runtime=60, submit_time=sim.now, seq=seq), duration=lasts)
        seq += 1
        for _ in range(seed + 2):
            sim.tick()
            sim.advance(POLICY.tick)
        sim.advance(lasts)
        sim.tick()
    preempted: dict[str, list[float]] = {}
    for at, decisions in sim.decisions:
        for preemption in decisions.preemptions:
            preempted.setdefault(preemption.job_id, []).append(at)
    for job_id, times in preempted.items():
        if not job_id.startswith("u"):
            continue
        for n, (before, after) in enumerate(zip(times, times[1:], strict=False), start=1):
            assert after - before >= backoff(n, POLICY), (job_id, times)


# ---------------------------------------------------------------- allocated jobs: the shield

SHIELD_ORG = units(("p", None, 50, 2000), ("q", None, 50, 0))


def test_each_preemption_doubles_the_shield_past_the_cap_on_minimum_runtime_up_to_twice_it() -> None:
    policy = Policy()  # cap on minimum runtime 8 h
    assert [shield(2 * HOUR, n, policy) / HOUR for n in range(6)] == [2, 4, 8, 16, 16, 16]
    # The contract itself (rule 5's bound counts it) still stops at the cap.
    assert [protection(2 * HOUR, n, policy) / HOUR for n in range(6)] == [2, 4, 8, 8, 8, 8]
    assert shield(0, 3, policy) == 0
    assert shield(2 * HOUR, 4, Policy(max_preempted_protection=36 * HOUR)) == 32 * HOUR


def _shielded_rack(started: float):
    """p's resumable job holding a whole rack, preempted twice before: protected 8 h, shielded 16 h."""
    return running("p-rack", "p", tuple(f"nvl72-01-h{n:02d}:{i}" for n in range(1, 19) for i in range(4)),
                   start_time=started, min_runtime=4 * HOUR, preemptions=2)


def test_a_shielded_job_is_not_preempted_for_a_job_that_does_not_need_a_whole_domain() -> None:
    started = DAY
    rack = topology(nvl72("nvl72-01"))
    small = pending("q-small", "q", 8, min_runtime=HOUR)
    during = snapshot(rack, SHIELD_ORG, running_jobs=[_shielded_rack(started)], pending_jobs=[small])
    assert schedule(during, now=started + 10 * HOUR, policy=POLICY).preemptions == ()
    # A restart's shield counts from when it makes progress again: its start plus its restart overhead.
    overhead = POLICY.restart_overhead
    assert schedule(during, now=started + 16 * HOUR + overhead - 1, policy=POLICY).preemptions == ()
    after = schedule(during, now=started + 16 * HOUR + overhead + 1, policy=POLICY)
    assert [(p.job_id, p.preemptor) for p in after.preemptions] == [("p-rack", "q-small")]


def test_a_job_that_needs_the_whole_domain_takes_a_shielded_job_once_its_protection_is_over() -> None:
    """Rule 5's bound for large jobs (cap + grace + tick at the head) counts protection, not the shield."""
    started = DAY
    rack = topology(nvl72("nvl72-01"))
    whole = pending("q-rack", "q", 72, min_runtime=HOUR, topology="domain", gpus_per_host=4)
    snap = snapshot(rack, SHIELD_ORG, running_jobs=[_shielded_rack(started)], pending_jobs=[whole])
    assert schedule(snap, now=started + 7 * HOUR, policy=POLICY).preemptions == ()
    decisions = schedule(snap, now=started + 8 * HOUR + 1, policy=POLICY)
    assert [(p.job_id, p.preemptor) for p in decisions.preemptions] == [("p-rack", "q-rack")]


def test_the_simulator_is_woken_when_a_shield_ends() -> None:
    started = DAY
    small = pending("q-small", "q", 8, min_runtime=HOUR)
    state = ClusterState.from_snapshot(snapshot(topology(nvl72("nvl72-01")), SHIELD_ORG,
                                                running_jobs=[_shielded_rack(started)], pending_jobs=[small]))
    assert quiet_until(state, now=started + 10 * HOUR, policy=POLICY) <= started + 16 * HOUR + POLICY.restart_overhead


def test_a_restarts_shield_counts_from_when_it_makes_progress_again() -> None:
    """A restart holds its GPUs for its restart overhead before it makes progress: its shield starts then, so
    a job checkpointing every hour of progress with a 2 h shield is preempted just after a checkpoint, not
    `restart_overhead` seconds before one with an hour of work lost."""
    policy = Policy(tick=5, grace_period=60, restart_overhead=600)
    started = DAY
    victim = running("p-job", "p", gpus_of("hgx-00-h01", 8), start_time=started,
                     min_runtime=HOUR, preemptions=1, last_checkpoint=started + 600 + HOUR)
    small = pending("q-small", "q", 8, min_runtime=HOUR)
    snap = snapshot(topology(hgx("hgx-00")), SHIELD_ORG, running_jobs=[victim], pending_jobs=[small])
    # Shielded 2 h of progress: from started + 600 s to started + 2 h 10 min (not started + 2 h).
    assert schedule(snap, now=started + 2 * HOUR + 1, policy=policy).preemptions == ()
    after = schedule(snap, now=started + 2 * HOUR + 600 + 1, policy=policy)
    assert [(p.job_id, p.preemptor) for p in after.preemptions] == [("p-job", "q-small")]
    # A job's own restart overhead counts, and a first run (no restart) is shielded from its start.
    own = replace(victim, restart_overhead=60)
    assert [p.job_id for p in schedule(snapshot(topology(hgx("hgx-00")), SHIELD_ORG, running_jobs=[own],
                                                pending_jobs=[small]), now=started + 2 * HOUR + 61,
                                       policy=policy).preemptions] == ["p-job"]
    first = replace(victim, preemptions=0)
    assert [p.job_id for p in schedule(snapshot(topology(hgx("hgx-00")), SHIELD_ORG, running_jobs=[first],
                                                pending_jobs=[small]), now=started + HOUR + 1,
                                       policy=policy).preemptions] == ["p-job"]
    assert shielded_until(victim, policy) == started + 2 * HOUR + 600

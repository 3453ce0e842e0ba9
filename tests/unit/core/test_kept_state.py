"""A kept state decides exactly as a state built afresh from the equivalent snapshot (issue: incremental core).

Random event sequences — submissions of every kind of job (some declaring checkpoints or their own restart
overhead), ticks whose decisions the state commits, runs that finish, victims that leave after their grace
period and requeue, checkpoints, hosts that go down, drain and come back, usage that moves — are played on
one `ClusterState`. Before every tick the state's `snapshot()` is decided by `schedule()` (which builds
everything from scratch); the kept state's decision must be the same, whole: starts, preemptions,
reservations, claims, every pending job's reason, position and estimate, the ratios.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from scheduler.core import DOMAIN, DOWN, DRAINED, DRAINING, PREEMPTING, PREFERRED, UP, Policy, schedule
from scheduler.core.engine import decide
from scheduler.core.model import alike
from scheduler.core.quiet import _large_charges
from scheduler.core.state import ClusterState

from .builders import DAY, HOUR, domain, hgx, pending, topology, units

PROJECTS = ("p", "q", "r", "s")


def _cluster(rng: random.Random):
    return topology(domain("rack", 4, 4, gpu_type="GB200", cpus=64, memory_gib=512),
                    hgx("hgx-00"), hgx("hgx-01"),
                    domain("lane", 1, 4, gpu_type="H100", fast_lane=True))


def _job(rng: random.Random, serial: int, now: float):
    project = rng.choice(PROJECTS)
    kind = rng.random()
    allocated = rng.random() < 0.75
    fields = {}
    if kind < 0.15:
        gpus, fields["gpu_milli"] = 1, rng.choice((250, 500, 700))
    elif kind < 0.3:
        gpus, fields["topology"] = rng.choice((8, 12, 16)), rng.choice((DOMAIN, PREFERRED))
    elif kind < 0.4:
        gpus, fields["gpus_per_host"] = 8, 4
    else:
        gpus = rng.choice((1, 2, 4, 8))
    if rng.random() < 0.2:
        fields["cpus"], fields["memory_gib"] = rng.choice((8, 32)), rng.choice((64, 128))
    if rng.random() < 0.1:
        fields["gpu_types"] = frozenset({rng.choice(("GB200", "H100"))})
    if rng.random() < 0.1:
        fields["max_runtime"] = rng.choice((1800.0, 3 * HOUR))
    if rng.random() < 0.3:
        fields["checkpoint_every"] = rng.choice((600.0, 1800.0, HOUR))
    if rng.random() < 0.2:
        fields["restart_overhead"] = rng.choice((0.0, 120.0, 900.0))
    min_runtime = rng.choice((300.0, 600.0, HOUR, 2 * HOUR)) if allocated else 0.0
    if "max_runtime" in fields:
        fields["max_runtime"] = max(fields["max_runtime"], min_runtime)
    return pending(f"j{serial:04d}", project, gpus, min_runtime=min_runtime, resumable=rng.random() < 0.8,
                   submit_time=now, seq=serial, priority=rng.choice((0, 1, 1, 2)), **fields)


@settings(max_examples=30, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), explain=st.booleans())
def test_a_kept_state_decides_as_a_state_built_afresh(seed: int, explain: bool) -> None:
    rng = random.Random(seed)
    policy = Policy(tick=5, grace_period=60, unallocated_grace=10, max_min_runtime=4 * HOUR, fast_lane_gpus=4,
                    explain=explain)
    shares = {"p": 40.0, "q": 30.0, "r": 20.0, "s": None}
    usage = {name: rng.uniform(0, 200) * HOUR for name in PROJECTS}
    org = units(*((name, None, share) for name, share in shares.items()))
    state = ClusterState(_cluster(rng), tuple(replace(u, allocated_usage=usage[u.name]) for u in org))
    now = 10 * DAY
    serial = 0
    work: dict[str, float] = {}  # job id -> seconds of work left
    requeue: dict[str, bool] = {}
    ticks = 0
    for _ in range(rng.randint(40, 120)):
        # Events since the last tick.
        for _ in range(rng.choice((0, 0, 1, 2, 5))):
            serial += 1
            job = _job(rng, serial, now)
            state.submit(job)
            work[job.id] = rng.uniform(60, 4 * HOUR)
        for job in sorted(state.running.values(), key=lambda j: j.id):
            if job.state == PREEMPTING and job.grace_ends is not None and job.grace_ends <= now:
                state.end_run(job.id)
                if requeue.pop(job.id, False):
                    state.submit(_as_pending(job, now))
            elif now - job.start_time >= work[job.id]:
                state.end_run(job.id)
            elif rng.random() < 0.05:
                state.update_running(replace(job, last_checkpoint=now))
        if rng.random() < 0.05:
            host = rng.choice(state.topology.hosts)
            new_state = rng.choice((DOWN, DRAINING, UP, UP))
            if host.state == DRAINING and new_state == DRAINING:
                new_state = DRAINED
            for job in [j for j in state.running.values() if any(g.startswith(host.name + ":") for g in j.gpu_ids)]:
                if new_state == DOWN:
                    state.end_run(job.id)
            state.set_host_state(host.name, new_state)
        if rng.random() < 0.1:
            name = rng.choice(PROJECTS)
            usage[name] += rng.uniform(0, 50) * HOUR
            state.set_units(tuple(replace(u, allocated_usage=usage[u.name]) for u in state.units))

        fresh = schedule(state.snapshot(), now=now, policy=policy)
        kept = decide(state, now=now, policy=policy)
        assert kept == fresh, f"tick {ticks} at {now}: the kept state decided otherwise"
        ticks += 1
        for preemption in kept.preemptions:
            requeue[preemption.job_id] = preemption.requeue and not preemption.cause.startswith("down:")
            if preemption.cause.startswith("down:"):
                state.end_run(preemption.job_id)
        for change in kept.host_changes:
            if change.state == DRAINED:
                state.set_host_state(change.host, DRAINED)
        # The state after the tick is the one the next snapshot is taken of.
        rebuilt = ClusterState.from_snapshot(state.snapshot())
        fresh_parts = rebuilt.capacity.signature()
        for fresh_part, kept_part in zip(fresh_parts, state.capacity.signature(), strict=True):
            assert list(fresh_part) == list(kept_part)
        # What the state keeps besides its capacity: each run's protection and shield ends, the jobs that may
        # be backing off.
        assert state.run_ends(policy) == rebuilt.run_ends(policy)
        assert state.backing_off == rebuilt.backing_off
        assert state.backoff_ends(policy) == rebuilt.backoff_ends(policy)
        assert _counted(state.pending_asks()) == _counted(rebuilt.pending_asks())
        # What `quiet_until` keeps of the asks while they stand (`asks_version`) is what a fresh state works out.
        assert _large_charges(state, policy) == _large_charges(rebuilt, policy)
        assert state.smallest_unallocated_ask() == rebuilt.smallest_unallocated_ask()
        assert _classes(state) == _classes(rebuilt)
        assert {ask: n for ask, (n, _) in state.defrag_asks().items()} == \
            {ask: n for ask, (n, _) in rebuilt.defrag_asks().items()}
        now += rng.choice((5, 5, 10, 60, 600))


def _as_pending(job, now: float):
    """A preempted resumable job back in the queue with its original submit time (an unallocated one backs off)."""
    return pending(job.id, job.project, len(job.gpu_ids) if len(job.gpu_ids) != 1 else 1,
                   min_runtime=job.min_runtime, resumable=job.resumable, submit_time=job.submit_time, seq=job.seq,
                   gpu_milli=job.gpu_milli, topology=job.topology, max_runtime=job.max_runtime, cpus=job.cpus,
                   memory_gib=job.memory_gib, preemptions=job.preemptions + 1,
                   requeued_at=None if job.allocated else now, restart_overhead=job.restart_overhead,
                   checkpoint_every=job.checkpoint_every)


def _classes(state: ClusterState) -> set[frozenset[str]]:
    """The pending jobs grouped by the state's class numbers; jobs of one class are alike (`model.alike`)."""
    groups: dict[int, set[str]] = {}
    for job_id, number in state.classes.items():
        groups.setdefault(number, set()).add(job_id)
    assert state.classes.keys() == state.pending.keys()
    for group in groups.values():
        assert len({alike(state.pending[job_id]) for job_id in group}) == 1
    return {frozenset(group) for group in groups.values()}


def _counted(asks: dict) -> dict:
    """Project -> ask -> how many (which job stands for an ask is any of them)."""
    return {project: {ask: count for ask, (count, _) in by_ask.items()} for project, by_ask in asks.items()}


def test_the_smallest_unallocated_ask_follows_the_queue() -> None:
    """The fewest whole GPUs a waiting unallocated job asks: once fewer are free, the tick's unallocated walk
    ends (the rest only waits). A fraction counts as 0 (it may share a GPU); allocated jobs do not count."""
    state = ClusterState(topology(hgx("hgx-00")), units(("p", None, 50.0), ("free", None, None)))
    assert state.smallest_unallocated_ask() == float("inf")
    state.submit(pending("four", "free", 4, min_runtime=0))
    state.submit(pending("two", "free", 2, min_runtime=0))
    state.submit(pending("one-allocated", "p", 1))
    assert state.smallest_unallocated_ask() == 2
    state.submit(pending("half", "free", 1, min_runtime=0, gpu_milli=500))
    assert state.smallest_unallocated_ask() == 0
    state.cancel("half")
    decisions = decide(state, now=DAY, policy=Policy(tick=5))
    assert sorted(s.job_id for s in decisions.starts) == ["four", "one-allocated", "two"]
    assert state.smallest_unallocated_ask() == float("inf")

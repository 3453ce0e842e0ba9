"""`defrag.next_order_turn`: until the moment it names, the jobs a move took first stay first, in their order.

Defragmentation takes a domain's jobs least work lost first until the waiting job fits (`defrag._moves_in`),
and each job's lost work grows with time from its last checkpoint, faster for more GPUs; so which jobs a move
takes can change with time alone, and the simulator must call the core then (`quiet.quiet_until`). Checked
here on random domains of whole-GPU jobs and fractions, some with a checkpoint still to come, with random jobs
taken by the last plan, at moments before the one it names.
"""

from __future__ import annotations

import math
from itertools import combinations, pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core import Policy
from scheduler.core.defrag import _move_order, movable, next_order_turn
from scheduler.core.fairshare import gpu_amount
from scheduler.core.state import ClusterState

from .builders import domain, gpus_of, running, snapshot, topology, units

NOW = 100_000.0
JUST_AFTER = NOW + 1e-6
POLICY = Policy()

# (GPUs, milli-GPU of a one-GPU job, started this long ago, last checkpoint this long ago: negative is still to
# come, None: none reported)
job_shape = st.tuples(st.integers(1, 4), st.sampled_from([1000, 1000, 250, 500, 750]), st.integers(0, 20_000),
                      st.one_of(st.none(), st.integers(-3_000, 20_000)))


def _order(group, at: float) -> list[str]:
    """The jobs of the domain a move may take, in the order it takes them."""
    jobs = {job.id: job for host in group.hosts for job in host.jobs if movable(job, at, POLICY)}
    return [job.id for job in sorted(jobs.values(), key=lambda j: _move_order(j, at))]


def _moments(jobs, after: float, before: float) -> list[float]:
    """Every moment in (after, before) at which two jobs' lost-work lines may cross or one leaves zero: the order
    of the jobs is the same all through each stretch between two of them."""
    lines = [(gpu_amount(len(job.gpu_ids), job.gpu_milli),
              job.start_time if job.last_checkpoint is None else max(job.start_time, job.last_checkpoint))
             for job in jobs]
    found = {since for _, since in lines}
    for (slope_a, since_a), (slope_b, since_b) in combinations(lines, 2):
        if slope_a != slope_b:
            found.add((slope_a * since_a - slope_b * since_b) / (slope_a - slope_b))
    return sorted(m for m in found if after < m < before)


@settings(max_examples=400, deadline=None)
@given(shapes=st.lists(job_shape, min_size=2, max_size=18), taken=st.sets(st.integers(1, 18), min_size=1))
def test_what_a_move_took_holds_until_the_moment_named(shapes, taken) -> None:
    jobs = []
    for n, (gpus, milli, age, checkpoint_age) in enumerate(shapes, start=1):
        whole = milli == 1000
        jobs.append(running(
            f"j{n}", "p", gpus_of(f"rack-h{n:02d}", gpus if whole else 1), start_time=NOW - age, min_runtime=0,
            gpu_milli=milli, last_checkpoint=None if checkpoint_age is None else NOW - checkpoint_age))
    state = ClusterState.from_snapshot(snapshot(topology(domain("rack", 18, 4)), units(("p", None, 100)),
                                                running_jobs=jobs))
    (group,) = [group for pool in state.capacity.pools.values() for group in pool.groups.values()]
    read = {f"j{n}" for n in taken if n <= len(jobs)}
    turn = next_order_turn([(group, read)], NOW, POLICY, math.inf, JUST_AFTER)
    assert turn > NOW
    if turn == JUST_AFTER or not read:
        return  # it changes at once, or no plan took anything: nothing to hold
    order = _order(group, NOW)
    first = order[:max(order.index(job_id) for job_id in read) + 1]  # up to the last job taken
    # The order is the same all through each stretch between two moments at which it may change: one look in
    # the middle of each stretch before the moment named covers every moment before it.
    horizon = turn if turn < math.inf else NOW + 1e7
    moments = [NOW, *_moments(jobs, NOW, horizon), horizon]
    for start, end in pairwise(moments):
        assert _order(group, (start + end) / 2)[:len(first)] == first


def test_a_job_started_since_before_those_a_move_took_changes_it_at_once() -> None:
    """A job that started after the plan read the domain is taken first by the next one (no work to lose)."""
    jobs = [running("old", "p", gpus_of("rack-h01", 4), start_time=NOW - 600, min_runtime=0),
            running("new", "p", gpus_of("rack-h02", 4), start_time=NOW, min_runtime=0)]
    state = ClusterState.from_snapshot(snapshot(topology(domain("rack", 18, 4)), units(("p", None, 100)),
                                                running_jobs=jobs))
    (group,) = [group for pool in state.capacity.pools.values() for group in pool.groups.values()]
    assert _order(group, NOW + 5) == ["new", "old"]
    assert next_order_turn([(group, {"old"})], NOW, POLICY, math.inf, JUST_AFTER) == JUST_AFTER
    assert next_order_turn([(group, {"new", "old"})], NOW, POLICY, math.inf, JUST_AFTER) == math.inf


def test_fractions_tied_now_part_at_once() -> None:
    """Two fractions started now have lost nothing yet: the earlier comes first, but the smaller fraction loses
    less from now on and comes first at once (lines grow by the fraction of a GPU each holds)."""
    jobs = [running("half", "p", gpus_of("rack-h01", 1), start_time=NOW, min_runtime=0, gpu_milli=500, seq=1),
            running("quarter", "p", gpus_of("rack-h02", 1), start_time=NOW, min_runtime=0, gpu_milli=250, seq=2)]
    state = ClusterState.from_snapshot(snapshot(topology(domain("rack", 18, 4)), units(("p", None, 100)),
                                                running_jobs=jobs))
    (group,) = [group for pool in state.capacity.pools.values() for group in pool.groups.values()]
    assert _order(group, NOW) == ["half", "quarter"]
    assert _order(group, NOW + 1) == ["quarter", "half"]
    assert next_order_turn([(group, {"half", "quarter"})], NOW, POLICY, math.inf, JUST_AFTER) == JUST_AFTER

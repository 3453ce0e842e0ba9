"""Rules the pages read from the core, never restated: the GPUs entitlements are shares of, drain progress, and
why the queue stands in the order it does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core import CORDONED, DOWN, DRAINED, DRAINING, PREEMPTING, UP, MigGpu, Policy, schedule
from scheduler.core.capacity import Capacity
from scheduler.core.drains import if_drained
from scheduler.core.fairshare import UnitTree
from scheduler.core.model import (
    QUEUE_AFTER_ALLOCATED,
    QUEUE_BOTH_UNALLOCATED,
    QUEUE_CHARGED,
    QUEUE_EQUAL_RATIOS,
    QUEUE_FIRST,
    QUEUE_LESS_SERVED,
    QUEUE_NEITHER_ALLOCATED,
    QUEUE_NEW,
    QUEUE_NO_ALLOCATION,
    QUEUE_SAME_UNITS,
    SCHEDULABLE_STATES,
    Host,
    JobLeave,
    QueueStep,
    schedulable_gpus,
)
from scheduler.core.reasons import queue_step

from .builders import HOUR, domain, gpus_of, hgx, pending, running, snapshot, topology, units

NOW = 10 * HOUR
POLICY = Policy(tick=60)


@pytest.mark.parametrize("state", [UP, CORDONED, DRAINING, DRAINED, DOWN])
def test_only_hosts_that_take_new_jobs_count_towards_entitlement(state) -> None:
    topo = topology(domain("rack", 3, 4, states={2: state}, missing={3: 1}), hgx("hgx-01"))
    counted = state in SCHEDULABLE_STATES
    assert schedulable_gpus(topo.hosts) == 4 + (4 if counted else 0) + 3 + 8
    # The scheduler's own count (the one its ratios are computed with) is the same number.
    assert Capacity(topo, (), (), NOW).healthy_gpus == schedulable_gpus(topo.hosts)
    assert SCHEDULABLE_STATES == {UP}


@pytest.mark.parametrize("state", [UP, DRAINING])
def test_mig_gpus_count_as_any_other_when_their_host_takes_jobs(state) -> None:
    host = Host("mig-h01", "mig", "H100", gpus_of("mig-h01", 4), state=state,
                mig=(MigGpu("mig-h01:2"), MigGpu("mig-h01:3")))
    domains, hosts = domain("rack", 1, 4)
    topo = topology((domains, hosts), (domain("mig", 1, 4)[0], (host,)))
    assert Capacity(topo, (), (), NOW).healthy_gpus == schedulable_gpus(topo.hosts) == (8 if state == UP else 4)


def test_a_draining_host_running_a_job_does_not_raise_anyones_entitlement() -> None:
    """The ratios `schedule` orders by are usage over a share of the schedulable GPUs only."""
    topo = topology(hgx("hgx-01"), hgx("hgx-02", states={1: DRAINING}))
    org = units(("p", None, 50), ("q", None, 50))
    job = running("j", "p", gpus_of("hgx-02-h01", 8), start_time=NOW - HOUR, min_runtime=4 * HOUR)
    decisions = schedule(snapshot(topo, org, running_jobs=[job]), now=NOW, policy=POLICY)
    tree = UnitTree(org, set(), healthy_gpus=schedulable_gpus(topo.hosts), window=POLICY.window)
    tree.add_window_usage(org, (job,), now=NOW, window=POLICY.window)
    assert schedulable_gpus(topo.hosts) == 8
    assert decisions.unit_ratios["p"] == pytest.approx(8 * HOUR / (0.5 * 8 * POLICY.window))
    assert decisions.unit_ratios == tree.ratios()


def jobs_on_one_host() -> list:
    return [
        running("free", "p", gpus_of("hgx-h01", 2), min_runtime=0, start_time=NOW - HOUR),
        running("young", "p", gpus_of("hgx-h01", 2, 2), start_time=NOW - 600, min_runtime=HOUR),
        running("old", "p", gpus_of("hgx-h01", 2, 4), start_time=NOW - 2 * HOUR, min_runtime=HOUR),
        running("capped", "p", gpus_of("hgx-h01", 1, 6), start_time=NOW - 600, min_runtime=HOUR,
                max_runtime=1200),
        running("stopping", "p", gpus_of("hgx-h01", 1, 7), start_time=NOW - HOUR, state=PREEMPTING,
                grace_ends=NOW + 30, preempted_for="x"),
    ]


def test_the_drain_says_when_each_job_leaves_and_why() -> None:
    """D1: the core's decision carries each job's leave time; the host's is that of the last."""
    topo = topology(domain("hgx", 1, 8, states={1: DRAINING}, gpu_type="H100"))
    org = units(("p", None, 100))
    jobs = jobs_on_one_host()
    decisions = schedule(snapshot(topo, org, running_jobs=jobs), now=NOW, policy=POLICY)
    (change,) = decisions.host_changes
    assert change.state == DRAINING and change.reason == "5 jobs left; leaves in 51m"
    assert change.leaves == (
        JobLeave("young", NOW + 3000 + 60, "at its minimum runtime"),
        JobLeave("capped", NOW + 600 + 60, "at its maximum runtime"),
        JobLeave("old", NOW + 60, "at once (past its minimum runtime)"),
        JobLeave("stopping", NOW + 30, "as it is being stopped (SIGKILL at the latest)"),
        JobLeave("free", NOW + 10, "at once (unallocated)"),
    )
    assert change.empty_at == NOW + 3060


def test_a_drained_host_and_hosts_in_service_carry_no_leave_times() -> None:
    topo = topology(domain("hgx", 2, 8, states={1: DRAINING}, gpu_type="H100"))
    job = running("j", "p", gpus_of("hgx-h02", 8), start_time=NOW - 600)
    decisions = schedule(snapshot(topo, units(("p", None, 100)), running_jobs=[job]), now=NOW, policy=POLICY)
    assert [(c.host, c.state, c.leaves, c.empty_at) for c in decisions.host_changes] == [
        ("hgx-h01", DRAINED, (), None)]


def test_the_preview_of_a_drain_is_what_the_tick_decides_once_the_host_drains() -> None:
    jobs = jobs_on_one_host()
    org = units(("p", None, 100))
    draining = schedule(snapshot(topology(domain("hgx", 1, 8, states={1: DRAINING}, gpu_type="H100")), org,
                                 running_jobs=jobs), now=NOW, policy=POLICY)
    assert if_drained(jobs, now=NOW, policy=POLICY) == draining.host_changes[0].leaves
    assert if_drained((), now=NOW, policy=POLICY) == ()


# ---------------------------------------------------------------- the queue's order, explained by the core


def test_the_core_explains_the_order_it_made_project_by_project() -> None:
    """Rule 2's order, as the queue page shows it: each project where its first waiting job stands, and why there."""
    topo = topology(hgx("hgx-01"))
    # 8 GPUs over a week: a and b are entitled to 672 GPU-hours each, p and q to 336, r to 672; s, t, w to none.
    org = units(("a", None, 50), ("p", "a", 50, 33.6), ("q", "a", 50, 67.2), ("b", None, 50), ("r", "b", 100, 336),
                ("v", "b", None), ("s", None, None), ("t", None, None), ("w", None, None))
    jobs = [
        pending("p1", "p", 8, min_runtime=8 * HOUR, submit_time=1),  # starts, and its 64 GPU-hours charge p
        pending("p2", "p", 8, submit_time=2),
        pending("q1", "q", 4, submit_time=3), pending("r1", "r", 2, submit_time=4),
        pending("s1", "s", 1, submit_time=5), pending("t1", "t", 1, submit_time=6),
        pending("v1", "v", 1, min_runtime=0, submit_time=7), pending("w1", "w", 1, min_runtime=0, submit_time=8),
    ]
    decisions = schedule(snapshot(topo, org, pending_jobs=jobs), now=NOW, policy=POLICY)
    assert [start.job_id for start in decisions.starts] == ["p1"]
    assert tuple(replace(step, path=()) for step in decisions.queue_order) == (
        QueueStep("q", 1, QUEUE_FIRST),
        QueueStep("p", 2, QUEUE_CHARGED, "q", "p", pytest.approx(0.2), pytest.approx(0.1)),
        QueueStep("r", 3, QUEUE_LESS_SERVED, "a", "b", pytest.approx(0.15), pytest.approx(0.5)),
        QueueStep("s", 4, QUEUE_NO_ALLOCATION, "b", "s", pytest.approx(0.5), None),
        QueueStep("t", 5, QUEUE_NEITHER_ALLOCATED, "s", "t"),
        QueueStep("v", 6, QUEUE_AFTER_ALLOCATED),
        QueueStep("w", 7, QUEUE_BOTH_UNALLOCATED),
    )
    # Each project's sort metric, level by level: its units from the top of the tree, as the walk took them.
    assert [step.path for step in decisions.queue_order] == [
        ("a", "q"), ("a", "p"), ("b", "r"), ("s",), ("t",), ("b", "v"), ("w",)]
    # Each step stands where the project's first waiting job does.
    for step in decisions.queue_order:
        assert step.position == min(decisions.pending[job.id].position for job in jobs
                                    if job.project == step.project and job.id in decisions.pending)
    assert [queue_step(step) for step in decisions.queue_order] == [
        "first: its units are the least served of those with allocated jobs waiting",
        "p started jobs in the last tick (each start charges its units for its minimum runtime), so q (20 % at "
        "the start of the tick) now comes first",
        "a has used 15 % of its budget, b 50 %: the less-served sibling goes first",
        "s has no allocation on this cluster: its jobs come after allocated units'",
        "neither s nor t has an allocation here; ties go by name",
        "only unallocated jobs (minimum runtime 0) wait here: they come after all allocated work",
        "both wait unallocated: the project that used less free GPU time goes first",
    ]
    # Explaining costs no decision: without it (the simulator), the same starts, preemptions and reservations.
    quiet = schedule(snapshot(topo, org, pending_jobs=jobs), now=NOW, policy=replace(POLICY, explain=False))
    assert quiet.queue_order == () and quiet.pending == {}
    assert (quiet.starts, quiet.preemptions, quiet.reservations) == (
        decisions.starts, decisions.preemptions, decisions.reservations)


def test_equal_ratios_and_one_project_under_another_are_explained_too() -> None:
    topo = topology(hgx("hgx-01"))
    org = units(("a", None, 50), ("b", None, 50), ("c", "b", 100))
    jobs = [pending("a1", "a", 16), pending("b1", "b", 16), pending("c1", "c", 16)]
    order = schedule(snapshot(topo, org, pending_jobs=jobs), now=NOW, policy=POLICY).queue_order
    # b's subtree is walked down to c before b's own jobs; a and b (c's side) are both unused.
    assert [(step.project, step.kind) for step in order] == [
        ("a", QUEUE_FIRST), ("c", QUEUE_EQUAL_RATIOS), ("b", QUEUE_SAME_UNITS)]
    assert queue_step(order[1]) == "a and b have both used 0 %: the larger share goes first, then the name"
    assert queue_step(order[2]) == "same units: by project priority, then submit time"
    assert queue_step(QueueStep("x", 0, QUEUE_NEW)) == "submitted since the last tick: placed at the next one"

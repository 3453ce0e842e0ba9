"""Rules the pages read from the core, never restated: the GPUs entitlements are shares of, and drain progress."""

from __future__ import annotations

import pytest

from scheduler.core import CORDONED, DOWN, DRAINED, DRAINING, PREEMPTING, UP, MigGpu, Policy, schedule
from scheduler.core.capacity import Capacity
from scheduler.core.drains import if_drained
from scheduler.core.fairshare import UnitTree
from scheduler.core.model import SCHEDULABLE_STATES, Host, JobLeave, schedulable_gpus

from .builders import HOUR, domain, gpus_of, hgx, running, snapshot, topology, units

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

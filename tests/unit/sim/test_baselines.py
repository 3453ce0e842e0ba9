"""The baseline policies behave as the evaluation defines them (scheduler/core/baselines.py)."""

import pytest

from scheduler.core import PREEMPTING, Policy
from scheduler.core.baselines import fifo_first_fit, node_level, priority_levels
from scheduler.sim.checks import check_result
from tests.unit.core.builders import pending, running, snapshot, topology, units

from .helpers import HOUR, cluster, domain, job, nvl72, one_host, org, run
from .test_engine import UNITS, random_jobs, small_cluster


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fifo_never_preempts(seed):
    result = run(small_cluster(), UNITS, random_jobs(seed, 80), policy="fifo")
    assert [e for e in result.events if e[2] == "preempt"] == []
    assert check_result(result) == []


def test_fifo_starts_in_submission_order_first_fit():
    result = run(one_host(4, tick=10), org(("p", 50), ("q", 50)), [
        job("a", 0, "p", 3, 100), job("b", 1, "q", 2, 100), job("c", 2, "q", 1, 100),
    ], policy="fifo")
    starts = [(t, j, d) for t, j, e, d in result.events if e == "start"]
    # c (1 GPU) fits beside a at once; b waits for a: no head-of-line blocking, first fit by host and GPU.
    assert starts == [(0, "a", "box-h01:0 box-h01:1 box-h01:2"), (10, "c", "box-h01:3"),
                      (100, "b", "box-h01:0 box-h01:1")]


def test_node_level_spreads_small_jobs_and_keeps_domain_jobs_in_one_domain():
    """Least-allocated hosts first: 1-GPU jobs land one per host; an 8-GPU domain job then needs 2 whole
    hosts of one domain, which spreading has left nowhere."""
    topo = topology(domain("ra", 2, 4), domain("rb", 2, 4))
    jobs = [pending(f"s{i}", "p", 1, submit_time=i) for i in range(4)] + [
        pending("big", "p", 8, topology="domain", gpus_per_host=4, submit_time=10)]
    decisions = node_level(snapshot(topo, units(("p", None, 100)), pending_jobs=jobs), now=100, policy=Policy())
    placed = {s.job_id: s.gpu_ids for s in decisions.starts}
    assert sorted(g.split(":")[0] for i in range(4) for g in placed[f"s{i}"]) == [
        "ra-h01", "ra-h02", "rb-h01", "rb-h02"]
    assert "big" not in placed
    fifo = fifo_first_fit(snapshot(topo, units(("p", None, 100)), pending_jobs=jobs), now=100, policy=Policy())
    assert {s.job_id for s in fifo.starts} >= {"big"}


@pytest.mark.parametrize("seed", [4, 5])
def test_node_level_never_splits_a_domain_job(seed):
    result = run(cluster(nvl72("ra"), nvl72("rb"), nvl72("rc"), policy=Policy(tick=5)), UNITS,
                 random_jobs(seed, 80), policy="node-level")
    domain_jobs = {j.id for j in random_jobs(seed, 80) if j.topology == "domain"}
    for _, job_id, event, detail in result.events:
        if event == "start" and job_id in domain_jobs:
            assert len({gpu.split("-h")[0] for gpu in detail.split()}) == 1, detail
    assert check_result(result) == []


def test_priority_preempts_only_preemptible_jobs():
    """p and q have 50 % each of 8 GPUs: a cap of 4 protected GPUs each.

    q runs 4 GPUs protected and 4 more over its cap (preemptible). p's job (under its cap) preempts the
    preemptible one, never the protected one; an unallocated job is preempted first.
    """
    topo = topology(domain("box", 1, 8, gpu_type="H100"))
    org_units = units(("p", None, 50), ("q", None, 50))
    protected = running("q-first", "q", tuple(f"box-h01:{i}" for i in range(4)), start_time=0)
    over_cap = running("q-second", "q", tuple(f"box-h01:{i}" for i in range(4, 8)), start_time=10)
    gainer = pending("p-job", "p", 4, submit_time=20)
    decisions = priority_levels(snapshot(topo, org_units, running_jobs=[protected, over_cap],
                                         pending_jobs=[gainer]), now=30, policy=Policy())
    assert [(p.job_id, p.preemptor) for p in decisions.preemptions] == [("q-second", "p-job")]
    assert decisions.starts == ()


def test_priority_honours_the_cap_on_protected_gpus():
    """A job over its project's cap never preempts: it waits for idle GPUs."""
    topo = topology(domain("box", 1, 8, gpu_type="H100"))
    org_units = units(("p", None, 25), ("q", None, 75))
    others = running("q-job", "q", tuple(f"box-h01:{i}" for i in range(6)), start_time=0, min_runtime=0)
    # p's cap is 2 GPUs; it asks 4: it may run, preemptible, but may not preempt even an unallocated job.
    big = pending("p-big", "p", 4, submit_time=1)
    decisions = priority_levels(snapshot(topo, org_units, running_jobs=[others], pending_jobs=[big]), now=10,
                                policy=Policy())
    assert decisions.preemptions == () and decisions.starts == ()
    small = pending("p-small", "p", 2, submit_time=1)
    decisions = priority_levels(snapshot(topo, org_units, running_jobs=[others], pending_jobs=[small]), now=10,
                                policy=Policy())
    assert [s.job_id for s in decisions.starts] == ["p-small"]


def test_priority_lets_protected_jobs_run_to_the_end():
    """Opted-out jobs are never preempted, however long they run and whoever waits.

    8 GPUs, p and q 50 % each (cap 4). p runs a protected 4-GPU job and an unallocated one. q's first
    4-GPU job is under its cap: it preempts the unallocated job. q's second is over the cap: it waits
    for idle GPUs, which come only when p's protected job ends after 10 h.
    """
    result = run(one_host(8, tick=10), org(("p", 50), ("q", 50)), [
        job("long", 0, "p", 4, 10 * HOUR), job("free", 0, "p", 4, 10 * HOUR, min_runtime=0),
        job("first", 60, "q", 4, 20 * HOUR), job("second", 70, "q", 4, HOUR),
    ], policy="priority")
    assert [(j, d) for _, j, e, d in result.events if e == "preempt"] == [("free", "job:first")]
    starts = {j: t for t, j, e, _ in result.events if e == "start"}
    assert starts["first"] == 70  # after the unallocated job's 10 s grace
    assert starts["second"] == 10 * HOUR
    assert check_result(result) == []


def test_priority_waits_for_victims_instead_of_preempting_again():
    topo = topology(domain("box", 1, 8, gpu_type="H100"))
    org_units = units(("p", None, 50), ("q", None, 50))
    leaving = running("q-over", "q", tuple(f"box-h01:{i}" for i in range(8)), start_time=0, min_runtime=0,
                      state=PREEMPTING, preempted_for="p-job", grace_ends=100)
    gainer = pending("p-job", "p", 4, submit_time=20, earmarked_gpus=leaving.gpu_ids)
    decisions = priority_levels(snapshot(topo, org_units, running_jobs=[leaving], pending_jobs=[gainer]), now=30,
                                policy=Policy())
    assert decisions.preemptions == () and decisions.starts == ()

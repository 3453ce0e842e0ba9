"""Each DESIGN §5 measure of the simulator on a case small enough to compute by hand."""

import pytest

from scheduler.core import Policy
from scheduler.core.measures import fragmentation, free_gpus_by_host
from scheduler.sim.checks import check_result
from scheduler.sim.measures import job_class, percentile

from .helpers import HOUR, cluster, domain, job, one_host, org, run


def test_it_computes_occupancy_waits_and_delivery_of_a_two_job_day():
    """One 4-GPU host, project p with 100 %, tick 10 s.

    a: submitted at 0, 2 GPUs, minimum runtime 10 min (debug), 1 h of work: runs [0, 3600).
    b: submitted at 5, 4 GPUs, 30 min of work: can't fit beside a and may not preempt its own
       project, so starts at the tick after a ends, 3600, and runs [3600, 5400).

    GPU-seconds held: 2 × 3600 + 4 × 1800 = 14,400 of 4 × 5400 = 21,600 healthy: occupancy 2/3.
    Waits: a 0 s (debug), b 3595 s (other); over both, p50 = 0 and p90 = 3595 (nearest rank).
    Owed (entitled 4 GPUs): hour 1 demand = 2 + 4 × 3595/3600 GPUs > 4, so owed 4 × 3600 = 14,400,
    used 2 × 3600 = 7200; [3600, 5400] demand = entitled = 4 × 1800 = 7200, used 7200.
    Delivered = 14,400 / 21,600 = 2/3, overall and worst.
    """
    result = run(one_host(4, tick=10), org(("p", 100)), [
        job("a", 0, "p", 2, HOUR, min_runtime=600, resumable=False),
        job("b", 5, "p", 4, 1800),
    ])
    summary = result.summary
    assert summary["sim_seconds"] == 5400
    assert summary["availability"] == 1.0
    assert summary["occupancy"] == pytest.approx(2 / 3, abs=1e-6)
    assert summary["allocated_occupancy"] == pytest.approx(2 / 3, abs=1e-6)
    assert summary["unallocated_occupancy"] == 0
    assert summary["wait_seconds"]["debug"]["p50"] == 0
    assert summary["wait_seconds"]["other"]["p90"] == 3595
    assert summary["wait_seconds"]["all"]["p50"] == 0
    assert summary["wait_seconds"]["all"]["p90"] == 3595
    assert summary["owed_delivered"]["overall"] == pytest.approx(2 / 3, abs=1e-6)
    assert summary["owed_delivered"]["worst"] == pytest.approx(2 / 3, abs=1e-6)
    assert summary["owed_delivered"]["gpu_hours"]["p"] == {"owed_gpu_hours": 6.0, "used_gpu_hours": 4.0}
    assert summary["completed"] == 2 and summary["preemptions"] == 0 and summary["lost_gpu_hours"] == 0
    assert check_result(result) == []


def test_it_counts_a_preemption_and_the_work_lost_since_the_checkpoint():
    """One 4-GPU host; p and q have 50 % each; tick 10 s, unallocated grace 10 s, no restart overhead.

    u (q, unallocated, 4 GPUs, checkpoint every 600 s, 10,000 s of work) starts at 0.
    a (p, allocated, 4 GPUs, 1000 s of work) arrives at 1000 and preempts u at once; u leaves
    at 1010 having run 1010 s, keeps 600 (its last checkpoint) and loses 410 s × 4 GPUs =
    1640 GPU-seconds = 0.456 GPU-hours; it requeues. a runs [1010, 2010) (wait 10 s); u runs
    again [2010, 11410) for its 9400 s left.

    Occupancy is 1: some job holds all 4 GPUs at every moment; allocated 4000 of 45,640.
    p is entitled to 2 GPUs; its demand in hour 1 is 4 GPUs over [1000, 2010): owed
    min(7200, 4040) = 4040, used 4000: delivered 4000/4040. q asks nothing allocated: no figure.
    """
    result = run(one_host(4, tick=10, unallocated_grace=10, restart_overhead=0), org(("p", 50), ("q", 50)), [
        job("u", 0, "q", 4, 10_000, min_runtime=0, checkpoint_every=600),
        job("a", 1000, "p", 4, 1000),
    ])
    summary = result.summary
    assert [(t, j, e) for t, j, e, _ in result.events] == [
        (0, "u", "submit"), (0, "u", "start"), (1000, "a", "submit"), (1000, "u", "preempt"),
        (1010, "u", "requeue"), (1010, "a", "start"), (2010, "a", "finish"), (2010, "u", "start"),
        (11410, "u", "finish"),
    ]
    assert result.events[3][3] == "job:a"
    assert summary["preemptions"] == 1
    assert summary["lost_gpu_hours"] == round(1640 / 3600, 3)
    assert summary["occupancy"] == pytest.approx(1.0)
    assert summary["allocated_occupancy"] == pytest.approx(4000 / 45_640, abs=1e-6)
    assert summary["wait_seconds"]["other"]["p50"] == 0  # u (unallocated) and a: waits 0 and 10
    assert summary["wait_seconds"]["other"]["p90"] == 10
    assert summary["owed_delivered"]["per_project"] == {"p": pytest.approx(4000 / 4040, abs=1e-6)}
    assert summary["owed_delivered"]["no_demand"] == ["q"]
    assert summary["owed_delivered"]["overall"] == pytest.approx(4000 / 4040, abs=1e-6)
    assert check_result(result) == []


def test_it_averages_stranded_gpus_over_time_as_the_dashboards_define_them():
    """Two domains of 2 hosts × 4 GPUs. One 4-GPU job runs [0, 1000).

    Best fit puts it in one domain: 4 free there, 8 in the other. For k = 8 only the 4 are
    stranded: 4/12 = 1/3; for k ≥ 16 all 12 are: 1. The same numbers as core.measures.
    """
    result = run(cluster(domain("ra", 2, 4), domain("rb", 2, 4), policy=Policy(tick=10)), org(("p", 100)),
                 [job("x", 0, "p", 4, 1000)])
    assert result.summary["stranded"] == {"8": pytest.approx(1 / 3, abs=1e-6), "16": 1.0, "32": 1.0, "72": 1.0}
    held = {"ra-h01:0", "ra-h01:1", "ra-h01:2", "ra-h01:3"}
    start = next(detail for _, job_id, event, detail in result.events if event == "start")
    topology = result.cluster.topology
    core_view = fragmentation(topology, free_gpus_by_host(topology, set(start.split())))
    assert core_view.stranded[8] == pytest.approx(1 / 3)
    assert len(held) == 4


def test_it_counts_failed_hosts_as_unavailable():
    """8 GPUs of which one 4-GPU host is down all along: availability 1/2; occupancy counts healthy GPUs only."""
    from scheduler.core import DOWN

    result = run(cluster(domain("ra", 2, 4, states={2: DOWN}), policy=Policy(tick=10)), org(("p", 100)),
                 [job("x", 0, "p", 4, 1000)])
    assert result.summary["availability"] == pytest.approx(0.5)
    assert result.summary["occupancy"] == pytest.approx(1.0)


@pytest.mark.parametrize(("gpus", "min_runtime", "expected"), [
    (1, 600, "debug"), (8, 900, "debug"), (9, 900, "other"), (8, 901, "other"), (4, 0, "other"),
    (72, 600, "large"), (144, 3600, "large"), (71, 3600, "other"),
])
def test_it_classes_jobs(gpus, min_runtime, expected):
    assert job_class(gpus, min_runtime) == expected


def test_it_takes_nearest_rank_percentiles():
    values = [5, 1, 4, 2, 3, 6, 7, 8, 9, 10]
    assert percentile(values, 50) == 5
    assert percentile(values, 90) == 9
    assert percentile(values, 99) == 10
    assert percentile([], 50) is None


def test_it_counts_jobs_that_never_started_with_their_wait_so_far():
    """A 16-GPU job on an 8-GPU cluster never starts: run until 100 s, its wait counts as 100 (a lower bound)."""
    result = run(one_host(8, tick=10), org(("p", 100)), [job("big", 0, "p", 16, 10)], until=100)
    waits = result.summary["wait_seconds"]["other"]
    assert waits["p50"] == 100 and waits["unstarted"] == 1
    assert result.summary["states"]["pending"] == 1

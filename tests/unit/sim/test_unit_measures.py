"""Per-unit measures of a run (the budget what-if's numbers): usage ratio and waits, pooled up the org tree."""

import pytest

from scheduler.core import Unit
from scheduler.sim.measures import unit_measures

from .helpers import HOUR, job, one_host, run


def test_it_rolls_usage_and_waits_up_the_tree_against_each_units_entitlement():
    """One 4-GPU host, tick 10 s; lab has the cluster, p 75 % of it, q 25 %.

    a (p) and b (q), 2 GPUs for 1 h each, start at 0; c (q, 4 GPUs, 30 min) arrives at 5 and starts when
    they end, at 3600. The run ends at 5400: 21,600 healthy GPU-seconds.
    p used 7200 of 0.75 × 21,600 = 16,200 (ratio 4/9); q used 7200 + 7200 of 5400 (8/3); lab 21,600 of
    21,600 (1). Waits: p [0]; q [0, 3595]; lab [0, 0, 3595]: p90 3595 by nearest rank, p50 0.
    """
    units = (Unit("lab", None, 100.0), Unit("p", "lab", 75.0), Unit("q", "lab", 25.0))
    result = run(one_host(4, tick=10), units, [
        job("a", 0, "p", 2, HOUR), job("b", 0, "q", 2, HOUR), job("c", 5, "q", 4, 1800),
    ])
    tracker = result.tracker
    waits = {"p": [0.0], "q": [0.0, 3595.0]}
    assert tracker.used_by_project() == {"p": 7200.0, "q": 14400.0}
    measures = unit_measures(units, used=tracker.used_by_project(), waits=waits,
                             healthy_gpu_seconds=tracker.gpu_seconds()["up"])
    p, q, lab = measures["p"], measures["q"], measures["lab"]
    assert (p["share_of_cluster"], p["entitled_gpu_hours"], p["used_gpu_hours"]) == (0.75, 4.5, 2.0)
    assert p["usage_ratio"] == pytest.approx(4 / 9)
    assert q["usage_ratio"] == pytest.approx(8 / 3) and lab["usage_ratio"] == pytest.approx(1.0)
    assert (q["wait_p90"], q["jobs"]) == (3595.0, 2)
    assert (lab["wait_p50"], lab["wait_p90"], lab["jobs"]) == (0.0, 3595.0, 3)


def test_a_unit_with_no_share_or_no_jobs_has_no_ratio_or_wait():
    units = (Unit("lab", None, 100.0), Unit("p", "lab", 100.0), Unit("free", None, None))
    measures = unit_measures(units, used={"p": 3600.0}, waits={}, healthy_gpu_seconds=0.0)
    assert measures["free"]["usage_ratio"] is None and measures["free"]["entitled_gpu_hours"] == 0
    assert measures["p"]["usage_ratio"] is None  # nothing healthy: entitled to nothing
    assert measures["p"]["wait_p90"] is None and measures["p"]["jobs"] == 0
    assert measures["lab"]["used_gpu_hours"] == 1.0

"""Simulations side by side (`scheduler.sim.parallel`, the budget what-if's three weeks): the same results as one
after another, a child's failure reported, and none of the caller's environment in a child."""

import pytest

from scheduler.core import schedule
from scheduler.sim.output import job_rows
from scheduler.sim.parallel import simulate_all

from .probe import PROBE, schedule_unless_the_parents_environment_shows
from .test_engine import UNITS, random_jobs, small_cluster


def calls(decide=schedule):
    return [{"cluster": small_cluster(fast_lane_gpus=8), "units": UNITS, "jobs": random_jobs(seed, 80),
             "decide": decide, "until": 6 * 3600.0} for seed in (11, 12, 13)]


def facts(result):
    summary = dict(result.summary)
    summary.pop("wall_seconds")
    return result.events, job_rows(result), summary


def test_side_by_side_gives_what_one_after_another_gives_in_order():
    together = simulate_all(calls(), side_by_side=True)
    apart = simulate_all(calls(), side_by_side=False)
    assert [facts(result) for result in together] == [facts(result) for result in apart]
    assert len({len(result.events) for result in apart}) == 3  # three different runs: their order is checked too


def test_a_failing_child_is_reported_with_what_it_printed():
    bad = calls()
    bad[2]["cluster"] = None
    with pytest.raises(RuntimeError, match="child process failed .*AttributeError: 'NoneType'"):
        simulate_all(bad, side_by_side=True)


def test_a_child_sees_none_of_the_callers_environment(monkeypatch):
    monkeypatch.setenv(PROBE, "a database password")
    probed = calls(schedule_unless_the_parents_environment_shows)
    with pytest.raises(RuntimeError, match="reached the child process"):
        simulate_all(probed[:1], side_by_side=True)  # one call runs in this process, which sees it
    # The first call runs here with the plain decision function, the probing ones in children.
    assert len(simulate_all(calls()[:1] + probed[1:], side_by_side=True)) == 3

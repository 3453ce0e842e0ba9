"""bench/owed_gaps.py: where the worst project's owed GPU-hours go, by the reason its first waiting job gave."""

from __future__ import annotations

import pytest

from bench.owed_gaps import Observed, kind_of, main
from bench.sim_table import workload
from scheduler.core import schedule
from scheduler.sim.engine import simulate
from scheduler.sim.output import summarise


def test_each_reason_of_an_allocated_job_that_waits_has_its_kind() -> None:
    assert kind_of("needs 16 GPUs; no GPUs free; every host that could hold it is held by project p itself or by "
                   "units less served than it, which are entitled to keep their GPUs: it waits for jobs to end"
                   ).startswith("every domain")
    assert kind_of("needs 8 GPUs; 2 free; no running job may be preempted for it (each is protected by its "
                   "minimum runtime)").startswith("no running job")
    assert kind_of("needs 8 GPUs; hosts hgx-01-h01 are reserved for it and free in 1h") == "a place is reserved for it"
    assert kind_of("something new; else").startswith("other: something new")


def test_the_hours_read_decide_as_the_simulator_does_and_the_gaps_are_the_worst_project_s_own() -> None:
    """Reasons asked for change no decision: the observed run gives the summary the plain one does."""
    cluster, units, jobs, faults, until, _ = workload("family-few-large-2", quick=True, traces=None)
    observed = Observed(cluster, units, jobs, decide=schedule, faults=faults, until=until)
    summary = summarise(observed.run())
    plain = simulate(cluster, units, jobs, decide=schedule, faults=faults, until=until).summary
    assert summary["owed_delivered"] == plain["owed_delivered"]
    assert summary["core_calls"] == plain["core_calls"]
    worst = summary["owed_delivered"]["worst_project"]
    assert observed.owed[worst] > 0
    assert 0 <= sum(observed.short[worst].values()) <= observed.owed[worst]


@pytest.mark.parametrize("name", ["nosuch", "family-huge-1", "family-few-large-x"])
def test_an_unknown_workload_is_refused_with_the_names_it_could_be(name, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([name])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert f"unknown workload {name!r}" in error and "family-<shape>-<seed>" in error and "ai2-month" in error

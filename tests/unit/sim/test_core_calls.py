"""bench/core_calls.py: every core call of a simulation, by what asked for it and what it decided."""

from __future__ import annotations

import pytest

from bench.core_calls import ARRIVED, ENDED, OUTCOMES, QUIET, Counted, main, table
from bench.sim_table import workload
from scheduler.core import schedule
from scheduler.core.quiet import TERMS
from scheduler.sim.engine import simulate


@pytest.fixture(scope="module")
def counted_and_plain():
    cluster, units, jobs, faults, _, _ = workload("family-few-large-2", quick=True, traces=None)
    until = 86400.0
    counted = Counted(cluster, units, jobs, decide=schedule, faults=faults, until=until)
    result = counted.run()
    plain = simulate(cluster, units, jobs, decide=schedule, faults=faults, until=until)
    return counted, result, plain


def test_counting_decides_as_the_simulator_does_and_counts_every_call(counted_and_plain) -> None:
    counted, result, plain = counted_and_plain
    assert result.events == plain.events
    assert sum(counted.calls.values()) == plain.core_calls == result.core_calls
    assert sum(counted.seconds.values()) == pytest.approx(result.core_seconds)


def test_each_call_is_sorted_by_what_asked_and_what_it_decided(counted_and_plain) -> None:
    counted, result, _ = counted_and_plain
    asked = {key[0] for key in counted.calls}
    decided = {key[1] for key in counted.calls}
    assert decided <= set(OUTCOMES)
    # The busy day has jobs arriving, runs ending and the core's own moments, each named by what it was.
    assert {ARRIVED, ENDED} <= {part for label in asked for part in label.split(" + ")}
    quiet = {label.removeprefix(f"{QUIET}: ") for label in asked if label.startswith(QUIET)}
    assert quiet and quiet <= set(TERMS)
    # Calls that started or preempted are no more than the starts and preemptions made (one may make several).
    acted = sum(n for key, n in counted.calls.items() if key[1] in OUTCOMES[:2])
    assert 0 < acted <= result.decisions
    assert any(key[1] == OUTCOMES[3] for key in counted.calls)
    lines = table(counted)
    assert lines[-1].split()[:2] == ["all", f"{result.core_calls:,}"]


def test_days_must_be_more_than_zero(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["family-few-large-2", "--days", "0"])
    assert exit_.value.code == 2
    assert "--days must be more than 0" in capsys.readouterr().err


def test_an_unknown_workload_is_refused(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["nosuch"])
    assert exit_.value.code == 2
    assert "unknown workload 'nosuch'" in capsys.readouterr().err

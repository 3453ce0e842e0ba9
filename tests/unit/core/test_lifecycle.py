"""The end-of-run table (`core.lifecycle.end_of_run`), row by row, and the typed stop causes.

What a user's job becomes when its run ends, live (`job_end_run`) and in the simulator alike.
"""

from __future__ import annotations

import itertools

import pytest

from scheduler.core import DOWN, Policy, schedule
from scheduler.core.lifecycle import Cause, EndEvent, EndState, Outcome, StopCause, end_of_run
from scheduler.core.model import gpu_host

from .builders import HOUR, gpus_of, hgx, running, snapshot, topology, units

# The outcomes: (outcome, exit code).
EXIT_0 = (Outcome.EXITED, 0)
EXIT_1 = (Outcome.EXITED, 1)
EXIT_NONE = (Outcome.EXITED, None)
STOPPED = (Outcome.STOPPED, None)
LOST = (Outcome.LOST, None)
FINISHED = (Outcome.FINISHED, None)

CAUSES = {
    "none": None,
    "cancel": StopCause(Cause.CANCEL),
    "max_runtime": StopCause(Cause.MAX_RUNTIME),
    "job": StopCause(Cause.JOB, "812"),
    "drain": StopCause(Cause.DRAIN, "node-01-h02"),
    "down": StopCause(Cause.DOWN, "node-01-h02"),
    "defrag": StopCause(Cause.DEFRAG),
    "failed": StopCause(Cause.FAILED, "rank 0 exited with 3"),
}

C = (EndState.COMPLETED, EndEvent.FINISH)
X = (EndState.CANCELLED, EndEvent.STOP)
F = (EndState.FAILED, EndEvent.FAIL)
LIMIT = (EndState.FAILED, EndEvent.STOP)
R = (EndState.PENDING, EndEvent.REQUEUE)
P = (EndState.PREEMPTED, EndEvent.STOP)

# (outcome, cause) -> (resumable job, job that is not resumable): state and event.
TABLE = {
    (FINISHED, "none"): (C, C),
    (FINISHED, "cancel"): (C, C),
    (FINISHED, "max_runtime"): (C, C),
    (FINISHED, "job"): (C, C),
    (FINISHED, "drain"): (C, C),
    (FINISHED, "down"): (C, C),
    (FINISHED, "defrag"): (C, C),
    (FINISHED, "failed"): (C, C),
    (EXIT_0, "none"): (C, C),
    (EXIT_0, "cancel"): (X, X),
    (EXIT_0, "max_runtime"): (LIMIT, LIMIT),
    (EXIT_0, "job"): (R, P),
    (EXIT_0, "drain"): (R, P),
    (EXIT_0, "down"): (R, P),
    (EXIT_0, "defrag"): (R, P),
    (EXIT_0, "failed"): (F, F),
    (EXIT_1, "none"): (F, F),
    (EXIT_1, "cancel"): (X, X),
    (EXIT_1, "max_runtime"): (LIMIT, LIMIT),
    (EXIT_1, "job"): (R, P),
    (EXIT_1, "drain"): (R, P),
    (EXIT_1, "down"): (R, P),
    (EXIT_1, "defrag"): (R, P),
    (EXIT_1, "failed"): (F, F),
    (EXIT_NONE, "none"): (F, F),
    (EXIT_NONE, "cancel"): (X, X),
    (EXIT_NONE, "max_runtime"): (LIMIT, LIMIT),
    (EXIT_NONE, "job"): (R, P),
    (EXIT_NONE, "drain"): (R, P),
    (EXIT_NONE, "down"): (R, P),
    (EXIT_NONE, "defrag"): (R, P),
    (EXIT_NONE, "failed"): (F, F),
    (STOPPED, "none"): (F, F),
    (STOPPED, "cancel"): (X, X),
    (STOPPED, "max_runtime"): (LIMIT, LIMIT),
    (STOPPED, "job"): (R, P),
    (STOPPED, "drain"): (R, P),
    (STOPPED, "down"): (R, P),
    (STOPPED, "defrag"): (R, P),
    (STOPPED, "failed"): (F, F),
    # Lost with its host: a job that is not resumable fails (it was not stopped, it is gone).
    (LOST, "none"): (R, F),
    (LOST, "cancel"): (X, X),
    (LOST, "max_runtime"): (LIMIT, LIMIT),
    (LOST, "job"): (R, F),
    (LOST, "drain"): (R, F),
    (LOST, "down"): (R, F),
    (LOST, "defrag"): (R, F),
    (LOST, "failed"): (F, F),
}


def test_the_table_has_every_outcome_and_cause() -> None:
    outcomes = {FINISHED, EXIT_0, EXIT_1, EXIT_NONE, STOPPED, LOST}
    assert {outcome for outcome, _ in TABLE} == outcomes and {o for o, _ in outcomes} == set(Outcome)
    assert set(TABLE) == set(itertools.product(outcomes, CAUSES))
    assert {cause.kind for cause in CAUSES.values() if cause} == set(Cause)


@pytest.mark.parametrize(("row", "expected"), TABLE.items(),
                         ids=[f"{o.value}{'' if e is None else e}-{c}" for (o, e), c in TABLE])
def test_every_row(row, expected) -> None:
    (outcome, exit_code), cause = row
    for resumable, (state, event) in zip((True, False), expected, strict=True):
        end = end_of_run(outcome, CAUSES[cause], resumable, exit_code)
        assert (end.state, end.event) == (state, event), f"resumable={resumable}"
        assert end.requeue == (state is EndState.PENDING)
        # A requeue backs off from now when something stopped the job; a run lost with no cause does not.
        assert end.backs_off == (end.requeue and CAUSES[cause] is not None)
        assert bool(end.failure_reason) == (state is EndState.FAILED)


@pytest.mark.parametrize(("outcome", "cause", "reason"), [
    (Outcome.EXITED, StopCause(Cause.FAILED, "no such user on node-01-h01: asmith"),
     "no such user on node-01-h01: asmith"),
    (Outcome.EXITED, StopCause(Cause.FAILED), "failed"),
    (Outcome.STOPPED, StopCause(Cause.MAX_RUNTIME), "max_runtime"),
    (Outcome.LOST, StopCause(Cause.DOWN, "node-01-h02"), "down:node-01-h02"),
    (Outcome.LOST, None, "lost"),
    (Outcome.EXITED, None, "exited"),
])
def test_a_failed_job_says_why_in_words(outcome, cause, reason) -> None:
    assert end_of_run(outcome, cause, False, 1).failure_reason == reason


@pytest.mark.parametrize(("cause", "written"), [
    (StopCause(Cause.CANCEL), "cancel"),
    (StopCause(Cause.MAX_RUNTIME), "max_runtime"),
    (StopCause(Cause.JOB, "812"), "job:812"),
    (StopCause(Cause.DRAIN, "node-01-h02"), "drain:node-01-h02"),
    (StopCause(Cause.DOWN, "node-01-h02"), "down:node-01-h02"),
    (StopCause(Cause.DEFRAG), "defrag"),
    (StopCause(Cause.FAILED), "failed"),
])
def test_a_cause_is_written_as_events_and_the_api_show_it_and_read_back(cause, written) -> None:
    assert str(cause) == written
    assert StopCause.parse(written) == cause


def test_what_failed_is_kept_apart_and_shown_after_the_cause() -> None:
    cause = StopCause(Cause.FAILED, "rank 0 exited with 3")
    assert str(cause) == "failed: rank 0 exited with 3" and cause.reason == "rank 0 exited with 3"
    # Never parsed back out of the words: the detail is stored on its own.
    assert StopCause.parse("failed") == StopCause(Cause.FAILED)


def test_no_cause_and_an_unknown_cause() -> None:
    assert StopCause.parse("") is None
    with pytest.raises(ValueError):
        StopCause.parse("vacation:node-01-h02")


def test_the_causes_the_core_writes_read_back_typed() -> None:
    topo = topology(hgx("hgx-00", states={1: DOWN}), hgx("hgx-01"))
    jobs = [running("lost", "p", gpus_of("hgx-00-h01", 8), start_time=0),
            running("long", "p", gpus_of("hgx-01-h01", 8), start_time=0, max_runtime=HOUR)]
    decisions = schedule(snapshot(topo, units(("p", None, 100)), running_jobs=jobs), now=2 * HOUR, policy=Policy())
    assert {p.job_id: StopCause.parse(p.cause) for p in decisions.preemptions} == {
        "lost": StopCause(Cause.DOWN, "hgx-00-h01"), "long": StopCause(Cause.MAX_RUNTIME)}


@pytest.mark.parametrize("resumable", [True, False])
def test_every_preemption_the_core_decides_requeues_as_the_table_says(resumable) -> None:
    # A lost host, a run at its own limit, a draining host: the decisions' `requeue` is the table's, so the
    # tick's "requeues / does not requeue" and the notification say what the run's end will do.
    topo = topology(hgx("hgx-00", states={1: DOWN}), hgx("hgx-01"), hgx("hgx-02", states={1: "draining"}))
    jobs = [running("lost", "p", gpus_of("hgx-00-h01", 8), resumable=resumable),
            running("long", "p", gpus_of("hgx-01-h01", 8), max_runtime=HOUR, resumable=resumable),
            running("drained", "p", gpus_of("hgx-02-h01", 8), resumable=resumable)]
    decisions = schedule(snapshot(topo, units(("p", None, 100)), running_jobs=jobs), now=2 * HOUR, policy=Policy())
    requeues = {p.job_id: p.requeue for p in decisions.preemptions}
    assert requeues == {"lost": resumable, "long": False, "drained": resumable}
    for preemption in decisions.preemptions:
        cause = StopCause.parse(preemption.cause)
        outcome = Outcome.LOST if cause.kind is Cause.DOWN else Outcome.STOPPED
        assert preemption.requeue == end_of_run(outcome, cause, resumable).requeue


@pytest.mark.parametrize(("gpu_id", "host"), [
    ("node-01-h02:3", "node-01-h02"),
    ("node-01-h02:3@500", "node-01-h02"),
    ("node-01-h02:3/1g.10gb@4", "node-01-h02"),
    ("nvl72-01-h18:0", "nvl72-01-h18"),
])
def test_a_gpu_id_names_its_host(gpu_id, host) -> None:
    assert gpu_host(gpu_id) == host

"""How a run ends: what stopped it, and what becomes of the job (the end-of-run table).

`end_of_run` is the one home of the rule. The live service
(`scheduler.services.job_end_run`) and the simulator (`scheduler.sim.runs`)
both ask it; each keeps only what is its own: the database writes and the
words of events live, the lost-work accounting (kept, lost, overhead) in the
simulator.

A stop cause is typed (`Cause`, `StopCause`); its written form (`str()`) is
what `Job.stop_cause`, events (`JobEvent.cause`, events.csv's `preempt`
detail) and the API show: `cancel`, `max_runtime`, `job:<id>`,
`drain:<host>`, `down:<host>`, `defrag`, and `failed: <what failed>` (kept
apart as `Cause.FAILED` and its detail, never parsed back).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Cause(StrEnum):
    """Why a run is stopped. Values as written: `job`, `drain` and `down` are followed by `:<subject>`."""

    CANCEL = "cancel"  # its owner, a manager of its project or an admin cancelled it
    MAX_RUNTIME = "max_runtime"  # it reached its own maximum runtime
    JOB = "job"  # preempted for a waiting job (fair share, rule 4): `job:<id>`
    DRAIN = "drain"  # its host is draining: `drain:<host>`
    DOWN = "down"  # its host is down, the run is lost with it: `down:<host>`
    DEFRAG = "defrag"  # moved to make one whole NVLink domain for a waiting job
    FAILED = "failed"  # one of its ranks failed (or could not start); the detail says how


# Causes written with a subject after a colon.
_WITH_SUBJECT = frozenset({Cause.JOB, Cause.DRAIN, Cause.DOWN})


@dataclass(frozen=True)
class StopCause:
    """A stop cause and its subject: the job (`job`), the host (`drain`, `down`), what failed (`failed`)."""

    kind: Cause
    subject: str = ""

    def __str__(self) -> str:
        if self.kind is Cause.FAILED:
            return f"{self.kind}: {self.subject}" if self.subject else str(self.kind)
        return f"{self.kind}:{self.subject}" if self.kind in _WITH_SUBJECT else str(self.kind)

    @classmethod
    def parse(cls, text: str) -> StopCause | None:
        """A cause as the core writes it (`Preemption.cause`) and `Job.stop_cause` keeps it; None for none.

        `failed` comes back without its detail: the detail is kept apart (`Job.stop_detail`).
        A cause of no known kind is a ValueError.
        """
        if not text:
            return None
        kind, _, subject = text.partition(":")
        cause = Cause(kind)
        return cls(cause, subject if cause in _WITH_SUBJECT else "")

    @property
    def reason(self) -> str:
        """In words, as a failed job's reason: what failed, else the cause as written."""
        return self.subject if self.kind is Cause.FAILED and self.subject else str(self)


class Outcome(StrEnum):
    """What happened to a run's processes."""

    EXITED = "exited"  # they exited (live: with the worst rank's exit code)
    STOPPED = "stopped"  # they were stopped for the job's stop cause (SIGTERM, grace, SIGKILL)
    LOST = "lost"  # their host went down (or they can no longer be accounted for)
    # The run did all its work: the simulator's executor knows this, a live run only reports an exit code.
    # It completes whatever cause was stopping it, where a live exit 0 during a stop is decided by the cause.
    FINISHED = "finished"


class EndState(StrEnum):
    """What the job is after the run (job states, as `JobState` and the simulator's jobs.csv say them)."""

    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    PENDING = "pending"  # requeued: it waits again, with its original submit time
    PREEMPTED = "preempted"  # preempted and not resumable: stopped for good


class EndEvent(StrEnum):
    """The event that says so (event kinds, as `EventKind` and events.csv say them)."""

    FINISH = "finish"
    STOP = "stop"
    FAIL = "fail"
    REQUEUE = "requeue"


@dataclass(frozen=True)
class EndOfRun:
    state: EndState
    event: EndEvent
    # Requeued because something stopped it: the time is kept (`requeued_at`), and an unallocated job backs
    # off from it (`core.model.backed_off_until`). A run lost with no cause requeues without.
    backs_off: bool = False
    # Why a failed job failed, in words (empty unless `state` is failed).
    failure_reason: str = ""

    @property
    def requeue(self) -> bool:
        return self.state is EndState.PENDING


def end_of_stop(cause: StopCause, resumable: bool) -> EndOfRun:
    """What becomes of a run the scheduler stops for `cause`: stopped, or lost with its host for `down`."""
    return end_of_run(Outcome.LOST if cause.kind is Cause.DOWN else Outcome.STOPPED, cause, resumable)


def end_of_run(outcome: Outcome, cause: StopCause | None, resumable: bool,
               exit_code: int | None = None) -> EndOfRun:
    """What becomes of a job whose run ended with `outcome` while `cause` (if any) was stopping it.

    In order, the first that applies:

    | outcome, cause | resumable | not resumable |
    |---|---|---|
    | finished, any; exited 0 with no cause | completed, finish | completed, finish |
    | any, `cancel` | cancelled, stop | cancelled, stop |
    | any, `max_runtime` (its own limit) | failed, stop | failed, stop |
    | any, `failed` (a rank failed) | failed, fail | failed, fail |
    | lost, any other or none | pending, requeue | failed, fail |
    | exited or stopped, `job:` `drain:` `down:` `defrag` | pending, requeue | preempted, stop |
    | exited (not 0) or stopped, no cause | failed, fail | failed, fail |
    """
    kind = cause.kind if cause is not None else None
    if outcome is Outcome.FINISHED or (outcome is Outcome.EXITED and exit_code == 0 and kind is None):
        return EndOfRun(EndState.COMPLETED, EndEvent.FINISH)
    if kind is Cause.CANCEL:
        return EndOfRun(EndState.CANCELLED, EndEvent.STOP)
    if kind is Cause.MAX_RUNTIME:
        # Its own limit: never requeued.
        return EndOfRun(EndState.FAILED, EndEvent.STOP, failure_reason=cause.reason)
    if kind is Cause.FAILED:
        return EndOfRun(EndState.FAILED, EndEvent.FAIL, failure_reason=cause.reason)
    if kind is not None or outcome is Outcome.LOST:
        # Preempted (fair share, drain, defrag) or lost with its host: a resumable job requeues.
        if resumable:
            return EndOfRun(EndState.PENDING, EndEvent.REQUEUE, backs_off=kind is not None)
        if outcome is Outcome.LOST:
            return EndOfRun(EndState.FAILED, EndEvent.FAIL, failure_reason=cause.reason if cause else str(outcome))
        return EndOfRun(EndState.PREEMPTED, EndEvent.STOP)
    return EndOfRun(EndState.FAILED, EndEvent.FAIL, failure_reason=str(outcome))

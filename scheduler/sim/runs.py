"""A job's runs in the simulation: its life (`Run`), and what starting, preempting and ending a run does.

Between ticks the executor model runs jobs in virtual time: a job finishes
when it has done `duration` seconds of work; a preempted job leaves at the end
of its grace period (or finishes first if its work is done), keeping the work
up to its last checkpoint (every `checkpoint_every` seconds of its run's
progress, or all of it when it resumes exactly); resumable jobs requeue with
their original submit time, others stop (`preempted`, or `failed` when their
host went down or for their maximum runtime): what becomes of a job whose run
ends is `core.lifecycle.end_of_run`'s, as live. A restarted run (every run of
a job after its first) holds its GPUs for the job's restart overhead
(`restart_overhead`, else the cluster policy's) before it makes progress
again: a run that starts at s with an
overhead o and w seconds of work left finishes at s + o + w, checkpoints at
s + o + k × checkpoint_every. What a run held and did not keep is lost work:
its overhead and whatever it did since its last checkpoint (all of it for a
job that keeps nothing).

`JobLives` holds these steps for `engine.Simulation`, which decides when they
happen (its clock, its ticks): a run's start schedules its `LEAVE`, a
preemption its end of grace; every step tells the kept `ClusterState`, the
measures' `Tracker` and the event log (`events.csv`, `output.py`).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import replace

from scheduler.core import jobspec
from scheduler.core import model as core
from scheduler.core.fairshare import gpu_amount
from scheduler.core.lifecycle import Cause, EndEvent, EndState, Outcome, StopCause, end_of_run
from scheduler.core.state import ClusterState

from .measures import Tracker, job_class
from .workload import SimJob

# Event kinds, in the order the engine handles them at the same moment (all before that moment's tick); a run's
# start and preemption push its LEAVE.
FAULT, LEAVE, ARRIVAL = 0, 1, 2
# What a LEAVE event is.
FINISH, GRACE_END = "finish", "grace_end"
# The job table's fields (scheduler/core/jobspec.py) the core's jobs take from a SimJob by name, as they are.
PENDING_AS_IS = jobspec.as_is(core.PendingJob, SimJob)
RUNNING_AS_IS = jobspec.as_is(core.RunningJob, SimJob)

# Job states (FORMATS.md job states; `running` includes `preempting` in jobs.csv).
WAITING = "waiting"  # not yet submitted
PENDING = "pending"
RUNNING = "running"
PREEMPTING = "preempting"
COMPLETED = "completed"
PREEMPTED = "preempted"
FAILED = "failed"

# events.csv's detail of a run that ended the job, by what `end_of_run` decided.
_END_DETAIL = {
    (EndState.COMPLETED, EndEvent.FINISH): "",
    (EndState.FAILED, EndEvent.FAIL): "host down; not resumable",
    (EndState.FAILED, EndEvent.STOP): "reached its maximum runtime",
    (EndState.PREEMPTED, EndEvent.STOP): "preempted; not resumable",
}


class Run:
    """One job's life in the simulation (mutable; one per job)."""

    __slots__ = ("job", "index", "state", "done", "pending", "running", "start", "gpu_ids", "milli", "host",
                 "version", "first_start", "end", "preemptions", "preempted_for", "grace_ends",
                 "klass", "amount", "head", "tenure", "planned_end", "lost", "earmarks", "next_checkpoint",
                 "stop_cause", "requeued_at", "progress_from", "held", "overhead_lost", "starts")

    def __init__(self, job: SimJob, index: int):
        self.job = job
        self.index = index
        self.state = WAITING
        self.done = 0.0
        self.pending: core.PendingJob | None = None
        self.running: core.RunningJob | None = None
        self.start = 0.0
        self.gpu_ids: tuple[str, ...] = ()
        self.milli = core.WHOLE_GPU_MILLI
        self.host = ""
        self.version = 0
        self.first_start: float | None = None
        self.end: float | None = None
        self.preemptions = 0
        self.preempted_for: str | None = None
        self.grace_ends: float | None = None
        self.klass = job_class(job.gpus, job.min_runtime)
        self.amount = gpu_amount(job.gpus, job.gpu_milli) if job.gpus else 0.0
        # When it first reached the head of the queue (held rule 5's reservation, or preempted for itself),
        # and when its current uninterrupted stretch there began.
        self.head: float | None = None
        self.tenure: float | None = None
        self.planned_end = math.inf
        self.lost = 0.0
        # GPUs claimed for it since it preempted jobs (rule 4), as the core last decided.
        self.earmarks: set[str] = set()
        self.next_checkpoint: float | None = None
        # What is stopping its run (None: nothing).
        self.stop_cause: StopCause | None = None
        self.requeued_at: float | None = None
        # When the current run makes progress: its start, plus the restart overhead for a restart.
        self.progress_from = 0.0
        # GPU-seconds held by ended runs, and the part of `lost` that was restart overhead.
        self.held = 0.0
        self.overhead_lost = 0.0
        # Start of every run, in order.
        self.starts: list[float] = []



class JobLives:
    """A run's steps, for `engine.Simulation`: submitting a job, starting, preempting and ending its runs,
    keeping its checkpoints, and the event log they write."""

    # What the steps read and change, set by `Simulation.__init__`; and they call its clock's `_push` (an event
    # at a moment).
    policy: core.Policy
    state: ClusterState
    tracker: Tracker
    gpu_host: dict[str, str]
    events: list[tuple[float, str, str, str]]
    runs: list[Run]
    by_id: dict[str, Run]
    checkpoints: list[tuple[float, int, Run, int]]
    large_heads: dict[str, tuple[float, float]]
    preemptions_for: list[tuple[float, str, str, float]]
    finished_jobs: int

    def _add(self, job: SimJob, index: int) -> Run:
        if job.id in self.by_id:
            raise ValueError(f"job id {job.id!r} appears twice")
        run = Run(job, index)
        self.runs.append(run)
        self.by_id[job.id] = run
        return run

    def _log(self, when: float, job_id: str, event: str, detail: str = "") -> None:
        self.events.append((when, job_id, event, detail))

    def _pending_job(self, run: Run) -> core.PendingJob:
        job = run.job
        return core.PendingJob(
            **{name: getattr(job, name) for name in PENDING_AS_IS},
            id=job.id, project=job.project, submit_time=job.submit, seq=job.seq, user=job.user,
            gpu_types=job.gpu_types, priority=job.priority, preemptions=run.preemptions, requeued_at=run.requeued_at,
        )

    def _submit(self, run: Run, when: float) -> None:
        run.state = PENDING
        run.pending = self._pending_job(run)
        self.state.submit(run.pending)
        self._log(when, run.job.id, "submit")
        self.tracker.total_demand(run.amount)
        if run.job.allocated:
            self.tracker.project_level(run.job.project, demand=run.amount)

    def _start(self, run: Run, when: float, gpu_ids: tuple[str, ...], milli: int, host: str,
               log: bool = True) -> None:
        job = run.job
        decided = run.pending is not None and job.id in self.state.running
        run.pending = None
        run.state = RUNNING
        run.start = when
        run.gpu_ids = gpu_ids
        run.milli = milli
        run.host = host
        run.earmarks = set()
        run.starts.append(when)
        # A restart (not the job's first run) holds the GPUs for the overhead before making progress.
        restart = run.first_start is not None
        run.progress_from = when + (core.restart_overhead(job, self.policy) if restart else 0.0)
        if run.first_start is None:
            run.first_start = when
            if run.klass == "large":
                self.large_heads[job.id] = (when if run.head is None else run.head,
                                            when if run.tenure is None else run.tenure)
        left = max(0.0, job.duration - run.done)
        run.planned_end = run.progress_from + left
        exact = job.checkpoint_every is None
        run.running = core.RunningJob(
            **{**{name: getattr(job, name) for name in RUNNING_AS_IS}, "gpu_milli": milli},
            id=job.id, project=job.project, gpu_ids=gpu_ids, start_time=when, submit_time=job.submit, seq=job.seq,
            user=job.user, priority=job.priority,
            # A job that resumes exactly has lost nothing at any moment: checkpointed through its end.
            last_checkpoint=run.planned_end if exact else None, host=host, preemptions=run.preemptions,
        )
        if decided:
            self.state.update_running(run.running)
        else:
            self.state.start(run.running)
        if log:
            self._log(when, job.id, "start", _gpu_detail(gpu_ids, milli) if gpu_ids else f"host:{host}")
        if gpu_ids:
            self.tracker.hold(gpu_ids, milli, job.allocated, self.gpu_host)
        if job.allocated:
            self.tracker.project_level(job.project, used=run.amount)
        run.version += 1
        self._push(run.planned_end, LEAVE, run, FINISH, run.version)
        if not exact:
            run.next_checkpoint = run.progress_from + job.checkpoint_every
            heapq.heappush(self.checkpoints, (run.next_checkpoint, run.index, run, run.version))

    def _preempt(self, preemption: core.Preemption, when: float) -> None:
        run = self.by_id[preemption.job_id]
        cause = StopCause.parse(preemption.cause)
        down = cause.kind is Cause.DOWN
        if run.state != RUNNING and not (run.state == PREEMPTING and down):
            return
        self._log(when, run.job.id, "preempt", preemption.cause)
        run.stop_cause = cause
        if cause.kind is not Cause.MAX_RUNTIME:
            run.preemptions += 1
        if preemption.preemptor:
            self.preemptions_for.append((when, preemption.preemptor, run.job.id, preemption.grace))
        if down:
            # The host is gone and the run with it.
            self._end(run, when, Outcome.LOST)
            return
        run.state = PREEMPTING
        run.grace_ends = when + preemption.grace
        run.preempted_for = preemption.preemptor
        run.running = replace(run.running, state=core.PREEMPTING, preempted_for=preemption.preemptor,
                              grace_ends=run.grace_ends)
        self.state.update_running(run.running)
        if run.grace_ends < run.planned_end:
            self._push(run.grace_ends, LEAVE, run, GRACE_END, run.version)

    def _end(self, run: Run, when: float, outcome: Outcome) -> None:
        """End the current run (`finished`: its work is done; `stopped` at the end of its grace; `lost` with its
        host); what becomes of the job is `core.lifecycle.end_of_run`'s, the work it keeps is the simulator's."""
        job = run.job
        stop_cause, run.stop_cause = run.stop_cause, None
        end = end_of_run(outcome, stop_cause, job.resumable)
        run.version += 1
        elapsed = max(0.0, when - run.start)
        # Seconds of progress this run made (after its restart overhead).
        progress = max(0.0, when - max(run.start, run.progress_from))
        if end.state is EndState.COMPLETED or (stop_cause is not None and stop_cause.kind is Cause.MAX_RUNTIME):
            kept = progress
        elif not job.resumable or not end.requeue:
            kept = 0.0
        elif job.checkpoint_every is None:
            kept = progress
        else:
            kept = math.floor(progress / job.checkpoint_every) * job.checkpoint_every
        if job.gpus:
            # Held and not kept: the restart overhead spent and the work since the last checkpoint.
            run.lost += run.amount * (elapsed - kept)
            run.overhead_lost += run.amount * (elapsed - progress)
            run.held += run.amount * elapsed
        run.done = min(job.duration, run.done + kept)
        if run.gpu_ids:
            self.tracker.hold(run.gpu_ids, run.milli, job.allocated, self.gpu_host, sign=-1)
        if job.allocated:
            self.tracker.project_level(job.project, used=-run.amount)
        self.state.end_run(job.id)
        self.state.record_run(job.project, allocated=job.allocated, gpus=run.amount, start=run.start, end=when)
        run.running = None
        run.preempted_for = None
        run.grace_ends = None
        run.gpu_ids = ()
        run.state = end.state.value
        if end.requeue:
            if end.backs_off:
                run.requeued_at = when
            run.pending = self._pending_job(run)
            self.state.submit(run.pending)
            lost = f"lost {elapsed - kept:g} s of work" if kept < elapsed else "lost no work"
            self._log(when, job.id, end.event.value, lost)
            return
        run.end = when
        self._log(when, job.id, end.event.value, _END_DETAIL[end.state, end.event])
        self.finished_jobs += 1
        self.tracker.total_demand(-run.amount)
        if job.allocated:
            self.tracker.project_level(job.project, demand=-run.amount)

    def _update_checkpoints(self, when: float) -> None:
        """Running jobs' last checkpoint as the core sees it (lost work decides victims and defrag)."""
        heap = self.checkpoints
        while heap and heap[0][0] <= when:
            _, _, run, version = heapq.heappop(heap)
            if run.version != version or run.running is None:
                continue
            every = run.job.checkpoint_every
            last = run.progress_from + math.floor((when - run.progress_from) / every) * every
            run.running = replace(run.running, last_checkpoint=last)
            self.state.update_running(run.running)
            run.next_checkpoint = last + every
            heapq.heappush(heap, (last + every, run.index, run, version))


def _gpu_detail(gpu_ids: tuple[str, ...], milli: int) -> str:
    if milli >= core.WHOLE_GPU_MILLI:
        return " ".join(gpu_ids)
    return " ".join(f"{gpu}@{milli}" for gpu in gpu_ids)

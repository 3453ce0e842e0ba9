"""The discrete-event simulator: a virtual clock over the scheduler's pure core.

It drives a decision function (`scheduler/sim/policies.py`) exactly as the
live tick does (`scheduler/tick.py`, `scheduler/executors.py`), on a kept
`ClusterState` (`scheduler/core/state.py`) that it tells what happens: jobs
arrive and are submitted, runs end, hosts change state, checkpoints are
taken, runs that ended are recorded in the fair-share window. At tick
boundaries (multiples of the policy's tick) it calls the decision function and
applies the decisions: starts hold GPUs, preemptions put jobs in their grace
period (their GPUs claimed for the preemptor until it starts), `down:`
preemptions end runs at once, drained hosts become drained.

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

The clock jumps to the next moment anything can change: an arrival, a job
leaving, a fault, and the tick boundary after such a moment; and the moment
the core itself says a tick could next decide something new with nothing
happening (`core.quiet.quiet_until`: a protection or maximum runtime ending,
a fair-share comparison turning as usage moves with time). The core is never
called on a tick it says is quiet; it is called on every other tick the live
loop would decide something on. Deterministic: no wall clock in any
decision, no randomness, every order stable (events by time, kind, then job
order).
"""

from __future__ import annotations

import heapq
import math
import time as wallclock
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from scheduler.core import jobspec
from scheduler.core import model as core
from scheduler.core.engine import decide as decide_on_state
from scheduler.core.engine import schedule
from scheduler.core.fairshare import gpu_amount, share_of_cluster
from scheduler.core.lifecycle import Cause, EndEvent, EndState, Outcome, StopCause, end_of_run
from scheduler.core.quiet import quiet_until
from scheduler.core.state import ClusterState

from .faults import Fault
from .inputs import Cluster
from .measures import Tracker, job_class
from .workload import SimJob

Decide = Callable[..., core.Decisions]

# Event kinds, in the order they are handled at the same moment (all before that moment's tick).
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


@dataclass(frozen=True)
class UsageInterval:
    """GPU time a project used before the simulation started (for the fair-share window)."""

    project: str
    gpus: float
    start: float
    end: float
    allocated: bool


@dataclass(frozen=True)
class InitialRun:
    """A job already running when the simulation starts (the what-if from a live queue)."""

    job: SimJob
    start: float  # <= 0
    gpu_ids: tuple[str, ...]
    gpu_milli: int = core.WHOLE_GPU_MILLI
    # Work done in earlier runs.
    done: float = 0.0
    host: str = ""


@dataclass(frozen=True)
class InitialState:
    running: tuple[InitialRun, ...] = ()
    history: tuple[UsageInterval, ...] = ()
    # Host name -> state at the start (default: as in the topology).
    host_states: dict[str, str] = field(default_factory=dict)


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


@dataclass
class Result:
    """Everything a simulation produced; `output.py` writes it to files."""

    policy: str
    cluster: Cluster
    units: tuple[core.Unit, ...]
    runs: list[Run]
    events: list[tuple[float, str, str, str]]
    tracker: Tracker
    end: float
    wall_seconds: float
    core_calls: int
    core_seconds: float
    decisions: int
    # Large job id -> (first reached the head, began its last stretch at the head), for those started.
    large_heads: dict[str, tuple[float, float]]
    host_states: dict[str, str]
    # Every preemption on behalf of a job: (when, preemptor, victim, grace).
    preemptions_for: list[tuple[float, str, str, float]] = field(default_factory=list)
    summary: dict = field(default_factory=dict)


class Simulation:
    """One run of a workload on a cluster under a decision function."""

    def __init__(self, cluster: Cluster, units: tuple[core.Unit, ...], jobs: Iterable[SimJob], *,
                 decide: Decide, policy_name: str = "allot", faults: Iterable[Fault] = (),
                 until: float | None = None, initial: InitialState | None = None,
                 progress: Callable[[float, float | None, int, int], None] | None = None):
        self.cluster = cluster
        # The core without rule 8's reasons (the simulator reads none): the same decisions, less work.
        self.policy = replace(cluster.policy, explain=False)
        self.decide = decide
        # The product's scheduler decides on the kept state itself; another decision function is handed
        # the state's snapshot, as the live tick would build it, and its decisions are applied to the state.
        self.kept = decide is schedule
        self.policy_name = policy_name
        self.until = until
        self.progress = progress
        self.units = units
        self.shares = share_of_cluster(units)
        initial = initial or InitialState()
        host_states = {host.name: host.state for host in cluster.topology.hosts} | dict(initial.host_states)
        self.hosts = {host.name: replace(host, state=host_states[host.name]) for host in cluster.topology.hosts}
        self.topology = core.Topology(cluster.topology.domains, tuple(self.hosts.values()))
        self.gpu_host = {gpu: host.name for host in cluster.topology.hosts for gpu in host.gpus}
        projects = {unit.name for unit in units}
        allocated_projects = {p: s for p, s in self.shares.items() if s > 0 and p in projects
                              and p not in {u.parent for u in units}}
        self.tracker = Tracker(cluster.topology, total_gpus=cluster.total_gpus, shares=allocated_projects)
        for name, state in host_states.items():
            self.tracker.host_changed(name, state)
        # Hosts not up: the only ones the core may end or move jobs on when nothing is pending.
        self.attention = {name for name, state in host_states.items() if state != core.UP}
        self.state = ClusterState(self.topology, units, window=self.policy.window)
        for interval in initial.history:
            self.state.record_run(interval.project, allocated=interval.allocated, gpus=interval.gpus,
                                  start=interval.start, end=interval.end)
        self.events: list[tuple[float, str, str, str]] = []
        self.heap: list[tuple] = []
        self._seq = 0
        self.runs: list[Run] = []
        self.by_id: dict[str, Run] = {}
        self.checkpoints: list[tuple[float, int, Run, int]] = []
        self.large_heads: dict[str, tuple[float, float]] = {}
        self.at_head: set[str] = set()
        self.now = 0.0
        # The next tick is due: something happened (`dirty_at`), or the core said a tick could decide
        # something new then with nothing happening (`quiet_at`).
        self.dirty_at: float | None = None
        self.quiet_at: float = math.inf
        self.last_call: float | None = None
        self.last_active = 0.0
        # Claims the core dropped (rule 4).
        self.earmark_drops = 0
        self.preemptions_for: list[tuple[float, str, str, float]] = []
        self.core_calls = 0
        self.core_seconds = 0.0
        self.decisions = 0
        self.finished_jobs = 0
        index = 0
        for run_spec in sorted(initial.running, key=lambda r: (r.start, r.job.seq, r.job.id)):
            run = self._add(run_spec.job, index)
            index += 1
            self.tracker.total_demand(run.amount)
            if run.job.allocated:
                self.tracker.project_level(run.job.project, demand=run.amount)
            run.done = run_spec.done
            run.state = PENDING
            self._log(run_spec.job.submit, run.job.id, "submit")
            self._start(run, run_spec.start, run_spec.gpu_ids, run_spec.gpu_milli, run_spec.host)
        for job in sorted(jobs, key=lambda j: (j.submit, j.seq, j.id)):
            run = self._add(job, index)
            index += 1
            self._push(max(0.0, job.submit), ARRIVAL, run)
        for fault in faults:
            self._push(fault.time, FAULT, fault)
        if initial.running:
            self._dirty(0.0)

    # ------------------------------------------------------------ bookkeeping

    def _add(self, job: SimJob, index: int) -> Run:
        if job.id in self.by_id:
            raise ValueError(f"job id {job.id!r} appears twice")
        run = Run(job, index)
        self.runs.append(run)
        self.by_id[job.id] = run
        return run

    def _push(self, when: float, kind: int, payload, detail: str = "", version: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (when, kind, self._seq, payload, detail, version))

    def _dirty(self, when: float) -> None:
        if self.dirty_at is None or when < self.dirty_at:
            self.dirty_at = when

    def _log(self, when: float, job_id: str, event: str, detail: str = "") -> None:
        self.events.append((when, job_id, event, detail))

    def _next_tick(self, after: float) -> float:
        """The first tick boundary at or after `after` that has not been decided yet."""
        tick = self.policy.tick
        k = math.ceil(after / tick)
        when = k * tick
        if when < after:
            when = (k + 1) * tick
        if self.last_call is not None and when <= self.last_call:
            when = self.last_call + tick
        return when

    # ------------------------------------------------------------ the loop

    def run(self) -> Result:
        began = wallclock.perf_counter()
        until = math.inf if self.until is None else self.until
        last_report = began
        steps = 0
        heap = self.heap
        while True:
            next_event = heap[0][0] if heap else math.inf
            due = self.quiet_at if self.dirty_at is None else min(self.dirty_at, self.quiet_at)
            next_tick = self._next_tick(due) if due < math.inf else math.inf
            if next_event <= next_tick:
                if next_event > until or next_event == math.inf:
                    break
                self._handle_events(next_event)
            else:
                if next_tick > until:
                    break
                self._tick(next_tick)
            steps += 1
            if self.progress is not None and steps % 512 == 0:
                wall = wallclock.perf_counter()
                if wall - last_report > 0.5:
                    last_report = wall
                    self.progress(self.now, self.until, self.finished_jobs, len(self.runs))
        end = self.last_active if self.until is None else self.until
        self._advance(end)
        self.tracker.finish(end)
        if self.progress is not None:
            self.progress(end, self.until, self.finished_jobs, len(self.runs))
        return Result(
            policy=self.policy_name, cluster=self.cluster, units=self.units, runs=self.runs, events=self.events,
            tracker=self.tracker, end=end, wall_seconds=wallclock.perf_counter() - began,
            core_calls=self.core_calls, core_seconds=self.core_seconds, decisions=self.decisions,
            large_heads=self.large_heads, host_states={name: h.state for name, h in self.hosts.items()},
            preemptions_for=self.preemptions_for,
        )

    def _advance(self, when: float) -> None:
        if when > self.now:
            self.now = when
        self.tracker.advance(when)

    def _handle_events(self, when: float) -> None:
        heap = self.heap
        while heap and heap[0][0] == when:
            _, kind, _, payload, detail, version = heapq.heappop(heap)
            if kind == LEAVE and payload.version != version:
                continue  # about a run that has ended since
            self._advance(when)
            self.last_active = when
            if kind == LEAVE:
                run = payload
                self._end(run, when, Outcome.FINISHED if detail == FINISH else Outcome.STOPPED)
            elif kind == ARRIVAL:
                self._submit(payload, when)
            elif kind == FAULT:
                self._fault(payload, when)
            self._dirty(when)

    # ------------------------------------------------------------ the tick

    def _tick(self, when: float) -> None:
        self._advance(when)
        woken = self.quiet_at <= when
        self.dirty_at = None
        self.quiet_at = math.inf
        self.last_call = when
        if not self.state.pending and not woken and not self._forced_possible():
            return
        self.last_active = when
        self._update_checkpoints(when)
        began = wallclock.perf_counter()
        if self.kept:
            decisions = decide_on_state(self.state, now=when, policy=self.policy)
        else:
            decisions = self.decide(self.state.snapshot(when), now=when, policy=self.policy)
            self.state.apply(decisions, when)
        self.core_seconds += wallclock.perf_counter() - began
        self.core_calls += 1
        self._apply(decisions, when)
        self.quiet_at = quiet_until(self.state, now=when, policy=self.policy, last=decisions, fair_share=self.kept)

    def _forced_possible(self) -> bool:
        """Could the core end or move a running job with no job pending? (down hosts, drains)"""
        for name in self.attention:
            state = self.hosts[name].state
            if state == core.DRAINING or (state in (core.DOWN, core.DRAINED) and self.tracker.host_held_milli[name]):
                return True
        return False

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

    def _apply(self, decisions: core.Decisions, when: float) -> None:
        for preemption in decisions.preemptions:
            self._preempt(preemption, when)
        for start in decisions.starts:
            run = self.by_id[start.job_id]
            self._start(run, when, start.gpu_ids, start.gpu_milli, start.host)
        for change in decisions.host_changes:
            host = self.hosts[change.host]
            if host.state == core.DRAINING and change.state == core.DRAINED:
                self._set_host(change.host, core.DRAINED)
        # Claims on GPUs (rule 4), as the state now keeps them.
        for job_id, claim in decisions.earmarks.items():
            self.by_id[job_id].earmarks = set(claim)
        self.earmark_drops += len(decisions.earmark_drops)
        at_head = {r.job_id for r in decisions.reservations} | {p.preemptor for p in decisions.preemptions
                                                                if p.preemptor}
        for job_id in self.at_head - at_head:
            run = self.by_id[job_id]
            if run.state == PENDING:
                run.tenure = None
        for job_id in at_head:
            run = self.by_id[job_id]
            if run.klass != "large" or run.state != PENDING:
                continue
            if run.head is None:
                run.head = when
            if run.tenure is None:
                run.tenure = when
        self.at_head = {job_id for job_id in at_head if self.by_id[job_id].klass == "large"}
        self.decisions += len(decisions.starts) + len(decisions.preemptions)

    # ------------------------------------------------------------ job lives

    def _pending_job(self, run: Run) -> core.PendingJob:
        job = run.job
        return core.PendingJob(
            **{name: getattr(job, name) for name in PENDING_AS_IS},
            id=job.id, project=job.project, submit_time=job.submit, seq=job.seq, user=job.user,
            gpu_types=job.gpu_types, priority=job.priority, preemptions=run.preemptions, requeued_at=run.requeued_at,
        )

    def overhead(self, job: SimJob) -> float:
        """Seconds a restarted run of the job holds its GPUs before it makes progress."""
        return self.policy.restart_overhead if job.restart_overhead is None else job.restart_overhead

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
        run.progress_from = when + (self.overhead(job) if restart else 0.0)
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

    # ------------------------------------------------------------ hosts

    def _fault(self, fault: Fault, when: float) -> None:
        host = self.hosts.get(fault.host)
        if host is None:
            return
        self._set_host(fault.host, fault.new_state(host.state))

    def _set_host(self, name: str, state: str) -> None:
        host = self.hosts[name]
        if host.state == state:
            return
        self.hosts[name] = replace(host, state=state)
        self.topology = core.Topology(self.topology.domains, tuple(self.hosts.values()))
        self.state.set_topology(self.topology)
        self.tracker.host_changed(name, state)
        if state == core.UP:
            self.attention.discard(name)
        else:
            self.attention.add(name)


def _gpu_detail(gpu_ids: tuple[str, ...], milli: int) -> str:
    if milli >= core.WHOLE_GPU_MILLI:
        return " ".join(gpu_ids)
    return " ".join(f"{gpu}@{milli}" for gpu in gpu_ids)


def simulate(cluster: Cluster, units: tuple[core.Unit, ...], jobs: Iterable[SimJob], *, decide: Decide,
             policy_name: str = "allot", faults: Iterable[Fault] = (), until: float | None = None,
             initial: InitialState | None = None, progress=None) -> Result:
    """Run a simulation and return its result with `summary` filled (see `output.summarise`)."""
    from .output import summarise

    result = Simulation(cluster, units, jobs, decide=decide, policy_name=policy_name, faults=faults, until=until,
                        initial=initial, progress=progress).run()
    result.summary = summarise(result)
    return result

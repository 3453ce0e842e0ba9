"""The discrete-event simulator: a virtual clock over the scheduler's pure core.

It drives a decision function with the signature of `core.schedule`
(`scheduler/sim/policies.py`) exactly as the live tick does
(`scheduler/tick.py`, `scheduler/executors.py`): at tick boundaries
(multiples of the policy's tick) it builds a `Snapshot` of hosts, units with
their window usage, running and pending jobs, calls the function, and applies
the decisions: starts hold GPUs, preemptions put jobs in their grace period
(their GPUs earmarked for the preemptor), `down:` preemptions end runs at
once, drained hosts become drained.

Between ticks the executor model runs jobs in virtual time: a job finishes
when it has done `duration` seconds of work; a preempted job leaves at the end
of its grace period (or finishes first if its work is done), keeping the work
up to its last checkpoint (every `checkpoint_every` seconds of its run, or all
of it when it resumes exactly); resumable jobs requeue with their original
submit time, others stop (`preempted`, or `failed` when their host went down).

The clock jumps to the next moment anything can change: an arrival, a job
leaving, a fault, a protection or maximum runtime ending, and the tick
boundary after such a moment; the core is never called on an idle tick. Nor
is it called when the moment provably cannot change a decision (the *gates*,
each a necessary condition checked with the core's own fair-share functions):
with no whole GPU free that a pending job could use and no shared GPU with
room, a new job can only matter if it may preempt (an allocated job, with an
unallocated job running or a unit it may take from, rule 4), and a
protection ending only if some waiting allocated job may take from that
job's unit. Time passing alone changes usage ratios too, which can let a
less-served unit preempt: every `recheck` seconds while work waits, the
sets of (gainer, loser) project pairs rule 4 allows are recomputed, and the
core is called when one grows (`recheck=0`: the core at every tick while work
waits, as the live loop does; the tests compare both). Deterministic: no wall
clock in any decision, no randomness, every order stable (events by time,
kind, then job order).
"""

from __future__ import annotations

import heapq
import math
import time as wallclock
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from scheduler.core import model as core
from scheduler.core.fairshare import UnitTree, gpu_amount, share_of_cluster, sides_at_common_ancestor

from .faults import Fault
from .inputs import Cluster
from .measures import Tracker, job_class
from .workload import SimJob

Decide = Callable[..., core.Decisions]

# Event kinds, in the order they are handled at the same moment (all before that moment's tick).
FAULT, LEAVE, ARRIVAL, WAKE = 0, 1, 2, 3
# What a LEAVE event is.
FINISH, GRACE_END = "finish", "grace_end"

# Job states (FORMATS.md job states; `running` includes `preempting` in jobs.csv).
WAITING = "waiting"  # not yet submitted
PENDING = "pending"
RUNNING = "running"
PREEMPTING = "preempting"
COMPLETED = "completed"
PREEMPTED = "preempted"
FAILED = "failed"


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
                 "version", "first_start", "end", "preemptions", "requeue", "preempted_for", "grace_ends",
                 "klass", "amount", "head", "tenure", "planned_end", "lost", "earmarks", "next_checkpoint",
                 "stop_cause", "past_protection")

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
        self.requeue = False
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
        self.stop_cause = ""
        # Running, allocated and past its minimum runtime: a job rule 4b may preempt.
        self.past_protection = False


class WindowUsage:
    """Ended usage inside the look-back window, per project, kept as time slides (no re-summing).

    An ended run [s, e] of g GPUs counts g × (e − max(s, now − window)) while
    now − window < e: fully until now − window passes s, then shrinking
    linearly, then not at all. Each run crosses those two moments once.
    """

    def __init__(self, window: float):
        self.window = window
        self.full: dict[tuple[str, bool], float] = {}
        # Partly slid out: sums of g and g × e.
        self.partial: dict[tuple[str, bool], list[float]] = {}
        self._crossings: list[tuple[float, int, int, tuple, float, float]] = []
        self._seq = 0
        self.edge = -math.inf

    def add(self, project: str, allocated: bool, gpus: float, start: float, end: float) -> None:
        if end <= start or gpus <= 0:
            return
        key = (project, allocated)
        self.full[key] = self.full.get(key, 0.0) + gpus * (end - start)
        self._seq += 1
        heapq.heappush(self._crossings, (start + self.window, 0, self._seq, key, gpus, end))

    def at(self, now: float) -> None:
        """Slide the window to end at `now`."""
        crossings = self._crossings
        edge = now - self.window
        while crossings and crossings[0][0] <= now:
            when, kind, seq, key, gpus, end = heapq.heappop(crossings)
            if kind == 0:
                # The window's start passes the run's start: from now on it shrinks.
                start = when - self.window
                self.full[key] -= gpus * (end - start)
                partial = self.partial.setdefault(key, [0.0, 0.0])
                partial[0] += gpus
                partial[1] += gpus * end
                heapq.heappush(crossings, (end + self.window, 1, seq, key, gpus, end))
            else:
                partial = self.partial[key]
                partial[0] -= gpus
                partial[1] -= gpus * end
        self.edge = edge

    def usage(self, project: str, allocated: bool) -> float:
        key = (project, allocated)
        value = self.full.get(key, 0.0)
        partial = self.partial.get(key)
        if partial is not None and partial[0] > 0:
            value += partial[1] - self.edge * partial[0]
        return max(0.0, value)


@dataclass
class _View:
    """What `Simulation._view` computes: rule 4's reach, per project and fast-lane side."""

    # Loser project -> GPUs its allocated jobs past their protection hold, per fast-lane side.
    losers: dict[str, dict[bool, int]] = field(default_factory=dict)
    # GPUs unallocated running jobs hold, per fast-lane side.
    unallocated_held: dict[bool, int] = field(default_factory=lambda: {False: 0, True: 0})
    # Gainer project -> (the largest charge that still lets it take from the loser, loser), largest first.
    limits: dict[str, list[tuple[float, str]]] = field(default_factory=dict)


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
    summary: dict = field(default_factory=dict)


class Simulation:
    """One run of a workload on a cluster under a decision function."""

    def __init__(self, cluster: Cluster, units: tuple[core.Unit, ...], jobs: Iterable[SimJob], *,
                 decide: Decide, policy_name: str = "allot", faults: Iterable[Fault] = (),
                 until: float | None = None, initial: InitialState | None = None, recheck: float = 60.0,
                 progress: Callable[[float, float | None, int, int], None] | None = None):
        self.cluster = cluster
        # The core without rule 8's reasons (the simulator reads none): the same decisions, less work.
        self.policy = replace(cluster.policy, explain=False)
        self.decide = decide
        self.policy_name = policy_name
        self.until = until
        self.recheck = recheck
        self.progress = progress
        self.units = units
        self.unit_parent = {unit.name: unit.parent for unit in units}
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
        self.window = WindowUsage(self.policy.window)
        for interval in initial.history:
            self.window.add(interval.project, interval.allocated, interval.gpus, interval.start, interval.end)
        self.events: list[tuple[float, str, str, str]] = []
        self.heap: list[tuple] = []
        self._seq = 0
        self.runs: list[Run] = []
        self.by_id: dict[str, Run] = {}
        self.pending: dict[str, core.PendingJob] = {}
        self.running: dict[str, core.RunningJob] = {}
        self.checkpoints: list[tuple[float, int, Run, int]] = []
        self.recent_defrag: list[float] = []
        self.large_heads: dict[str, tuple[float, float]] = {}
        self.at_head: set[str] = set()
        self.now = 0.0
        self.dirty_at: float | None = None
        self.last_call: float | None = None
        # When to look again although nothing happened (usage ratios drift), if work waits.
        self.recheck_at: float | None = None
        self.max_runtime_due = False
        self.last_active = 0.0
        # What made the next tick dirty: only arrivals / only protection ends (then a gate may skip it).
        self.new_jobs: list[Run] = []
        self.protections: list[Run] = []
        self.other_change = False
        # Rule 4 pairs allowed at the last call: (gainer, loser) -> how many of the gainer's jobs.
        self.allowed_at_call: dict[tuple[str, str], int] = {}
        self.unallocated_running = 0
        # GPUs asked by pending jobs -> how many, for jobs that may use the fast lane and for the others.
        self.pending_sizes = {True: {}, False: {}}
        self.fractional_pending = 0
        self._charges: dict[str, list[float]] | None = None
        self.unit_names = {unit.name for unit in units}
        self.lane_of = {gpu: host.fast_lane for host in cluster.topology.hosts for gpu in host.gpus}
        self.withheld = 0
        # Pending jobs holding a claim on GPUs (rule 4), and claims the core dropped.
        self.claimants: set[str] = set()
        self.earmark_drops = 0
        self.base_usage = {unit.name: unit.allocated_usage for unit in units}
        self._tree_key: tuple | None = None
        self._tree_cached: UnitTree | None = None
        # Kept as jobs start and leave, for `_view`: per project, allocated GPUs running and GPUs × start
        # (their time in the window is then GPUs × now − that), with the starts in a heap to know when a
        # run is older than the window; GPUs rule 4 may take, per project (allocated, past protection) and
        # for unallocated jobs, per fast-lane side.
        self.running_gpus: dict[str, float] = {}
        self.running_gpu_starts: dict[str, float] = {}
        self.running_starts: list[tuple[float, int, Run, int]] = []
        self.loser_held: dict[str, dict[bool, int]] = {}
        self.unallocated_held = {False: 0, True: 0}
        self.skipped = {"arrival": 0, "protection": 0, "recheck": 0}
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
            if self.recheck_at is not None and self.recheck_at < next_event:
                if self.dirty_at is None or self.recheck_at < self.dirty_at:
                    if self.recheck_at > until:
                        break
                    self._recheck(self.recheck_at)
                    continue
            next_tick = self._next_tick(self.dirty_at) if self.dirty_at is not None else math.inf
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
        )

    def _advance(self, when: float) -> None:
        if when > self.now:
            self.now = when
        self.tracker.advance(when)

    def _handle_events(self, when: float) -> None:
        heap = self.heap
        while heap and heap[0][0] == when:
            _, kind, _, payload, detail, version = heapq.heappop(heap)
            if kind in (LEAVE, WAKE) and payload is not None and payload.version != version:
                continue  # about a run that has ended since
            self._advance(when)
            self.last_active = when
            if kind == LEAVE:
                run = payload
                if detail == FINISH:
                    self._end(run, when, COMPLETED)
                else:
                    self._end(run, when, PENDING if run.requeue else "stopped")
                self._changed(when)
            elif kind == ARRIVAL:
                self._submit(payload, when)
                self.new_jobs.append(payload)
                self._dirty(when)
            elif kind == FAULT:
                self._fault(payload, when)
                self._changed(when)
            elif kind == WAKE:
                run = payload
                if run is None:
                    # The hourly cap on defrag migrations lets one more through.
                    if self.pending:
                        self._changed(when)
                    continue
                if detail == "max_runtime":
                    self.max_runtime_due = True
                    self._changed(when)
                    continue
                if run.state == RUNNING and run.job.allocated and run.gpu_ids:
                    run.past_protection = True
                    held = self.loser_held.setdefault(run.job.project, {False: 0, True: 0})
                    held[self.lane_of[run.gpu_ids[0]]] += len(run.gpu_ids)
                if any(self.gpu_host[gpu] in self.attention for gpu in run.gpu_ids):
                    # Protection ended on a host that is draining: the job leaves.
                    self._changed(when)
                elif self.pending:
                    # Protection ended: the job may now be preempted.
                    self.protections.append(run)
                    self._dirty(when)

    # ------------------------------------------------------------ the tick

    def _changed(self, when: float) -> None:
        """Something no gate reasons about happened: the next tick calls the core."""
        self.other_change = True
        self._dirty(when)

    def _tick(self, when: float) -> None:
        self._advance(when)
        self.dirty_at = None
        self.last_call = when
        new_jobs, protections, other = self.new_jobs, self.protections, self.other_change
        self.new_jobs, self.protections, self.other_change = [], [], False
        if not self.pending and not self.max_runtime_due and not self._forced_possible():
            return
        if self.recheck > 0 and not other and not self.max_runtime_due and self._gated(when, new_jobs, protections):
            return
        self._call(when)

    def _snapshot(self, when: float, *, every_job: bool = True) -> core.Snapshot:
        """What the core sees at `when`: the live tick's snapshot, from the simulator's state (less the
        pending jobs that provably cannot act, unless `every_job`)."""
        self._update_checkpoints(when)
        self.window.at(when)
        pending = self.pending
        if not every_job and self.recheck > 0 and len(pending) > 8:
            inert = self._inert(self._view(when))
            if inert:
                self.withheld += len(inert)
                pending = {job_id: job for job_id, job in pending.items() if job_id not in inert}
        return core.Snapshot(
            self.topology, self._units(), tuple(self.running.values()), tuple(pending.values()),
            recent_defrag_migrations=tuple(t for t in self.recent_defrag if when - 3600 < t <= when),
        )

    def _call(self, when: float) -> None:
        self.max_runtime_due = False
        self.last_active = when
        snapshot = self._snapshot(when, every_job=False)
        began = wallclock.perf_counter()
        decisions = self.decide(snapshot, now=when, policy=self.policy)
        self.core_seconds += wallclock.perf_counter() - began
        self.core_calls += 1
        self._apply(decisions, when)
        if self.recheck > 0 and self.pending:
            self.allowed_at_call = self._allowed_pairs(when, self._tick_charges(decisions))
        self._schedule_recheck(when)

    def _tick_charges(self, decisions: core.Decisions) -> dict[str, float]:
        """What the core charged each project during the tick (rule 2): allocated starts, and jobs preempting
        or waiting for their victims. Ratios the core compared were at most this much higher."""
        charged: set[str] = {start.job_id for start in decisions.starts}
        charged |= {p.preemptor for p in decisions.preemptions if p.preemptor}
        charged |= {job_id for job_id, run in ((j, self.by_id[j]) for j in self.pending) if run.earmarks}
        charges: dict[str, float] = {}
        for job_id in sorted(charged):
            job = self.by_id[job_id].job
            if job.min_runtime > 0:
                charges[job.project] = charges.get(job.project, 0.0) + \
                    gpu_amount(job.gpus, job.gpu_milli) * job.min_runtime
        return charges

    def _schedule_recheck(self, when: float) -> None:
        if self.pending and self._preemptible_running():
            # Usage ratios drift as time passes and may let a less-served unit preempt: look again
            # later even if nothing happens (every tick with recheck 0, as live).
            self.recheck_at = when + max(self.recheck, self.policy.tick)
        else:
            self.recheck_at = None

    def _recheck(self, when: float) -> None:
        """`recheck` seconds passed with nothing happening: call the core if ratios now allow more (rule 4)."""
        self.recheck_at = None
        if not self.pending:
            return
        if self.recheck == 0:
            self._changed(when)
            return
        tick = self._next_tick(when)
        if self._room_for_pending() or _grew(self._allowed_pairs(tick), self.allowed_at_call):
            self._changed(when)
        else:
            self.skipped["recheck"] += 1
            self._schedule_recheck(when)

    # ------------------------------------------------------------ gates: calls that cannot decide anything

    def _room_for_pending(self) -> bool:
        """Could a pending job fit in what is free, ignoring shape and type? (whole GPUs of up hosts in a lane
        it may use, or room on a shared GPU)"""
        if self.tracker.partial_gpus and self.fractional_pending:
            return True
        free = self.tracker.free_by_lane
        regular, fast = free[False], free[True]
        for fast_capable, sizes in self.pending_sizes.items():
            room = max(regular, fast) if fast_capable else regular
            if sizes and min(sizes) <= room:
                return True
        return False

    def _pending_charges(self) -> dict[str, list[float]]:
        """Project -> what each of its waiting allocated jobs would be charged (rule 2), sorted; cached."""
        if self._charges is None:
            charges: dict[str, list[float]] = {}
            for job in self.pending.values():
                if job.min_runtime > 0 and job.gpus:
                    charges.setdefault(job.project, []).append(gpu_amount(job.gpus, job.gpu_milli) * job.min_runtime)
            for amounts in charges.values():
                amounts.sort()
            self._charges = charges
        return self._charges

    def _count_pending(self, run: Run, sign: int) -> None:
        self._charges = None
        job = run.job
        fast_capable = not job.allocated or job.min_runtime <= self.policy.fast_lane_max_min_runtime
        sizes = self.pending_sizes[fast_capable]
        count = sizes.get(job.gpus, 0) + sign
        if count:
            sizes[job.gpus] = count
        else:
            del sizes[job.gpus]
        if job.gpus == 1 and job.gpu_milli < core.WHOLE_GPU_MILLI:
            self.fractional_pending += sign

    def _gated(self, when: float, new_jobs: list[Run], protections: list[Run]) -> bool:
        """True if this tick provably decides nothing (see the module docstring); counts the skips."""
        if self._room_for_pending():
            return False
        allowed = None
        for run in new_jobs:
            if run.state != PENDING:
                continue
            job = run.job
            if not job.allocated:
                continue  # an unallocated job never preempts
            if self.unallocated_running or job.gpus == 0:
                return False
            allowed = allowed if allowed is not None else self._allowed_pairs(when)
            if any(gainer == job.project for gainer, _ in allowed):
                return False
        for run in protections:
            if run.state != RUNNING:
                continue
            allowed = allowed if allowed is not None else self._allowed_pairs(when)
            if any(loser == run.job.project for _, loser in allowed):
                return False
        self.skipped["arrival" if new_jobs else "protection"] += 1
        return True

    def _view(self, when: float, tick_charges: dict[str, float] | None = None) -> _View:
        """Rule 4 as the core will see it at `when`: the org tree with window usage and running jobs' time
        (the core's `UnitTree`), and the GPUs held, per fast-lane side, by jobs it may preempt."""
        self.window.at(when)
        edge = when - self.policy.window
        view = _View(losers={p: held for p, held in self.loser_held.items() if held[False] or held[True]},
                     unallocated_held=self.unallocated_held)
        starts = self.running_starts
        while starts and (starts[0][2].version != starts[0][3] or starts[0][2].running is None):
            heapq.heappop(starts)
        if starts and starts[0][0] < edge:
            # A run older than the window: count each run's time in it one by one.
            running_usage: dict[str, float] = {}
            for job in self.running.values():
                if job.min_runtime > 0 and job.gpu_ids:
                    seconds = when - max(job.start_time, edge)
                    if seconds > 0:
                        running_usage[job.project] = running_usage.get(job.project, 0.0) + \
                            gpu_amount(len(job.gpu_ids), job.gpu_milli) * seconds
        else:
            running_usage = {project: gpus * when - self.running_gpu_starts[project]
                             for project, gpus in self.running_gpus.items() if gpus > 0}
        charges = self._pending_charges()
        if not view.losers or not charges:
            return view
        tree = self._tree(set(charges) | set(view.losers))
        usage, base = self.window.usage, self.base_usage
        for node in tree.nodes.values():
            node.usage = base.get(node.name, 0.0) + usage(node.name, True) + running_usage.get(node.name, 0.0)
        extra: dict[str, float] = dict.fromkeys(tree.nodes, 0.0)
        for project, amount in (tick_charges or {}).items():
            if project in extra:
                extra[project] += amount
        for node in tree.bottom_up:
            if node.parent is not None:
                node.parent.usage += node.usage
                extra[node.parent.name] += extra[node.name]
        for gainer in charges:
            gainer_node = tree.nodes[gainer]
            limits = []
            for loser in view.losers:
                sides = sides_at_common_ancestor(gainer_node, tree.nodes[loser])
                if sides is None:
                    continue
                gainer_side, loser_side = sides
                if gainer_side.entitled <= 0:
                    continue
                # ratio_with(charge) < loser ratio  <=>  charge < loser ratio × entitled − usage (a hair of slack).
                limit = loser_side.ratio * gainer_side.entitled - gainer_side.usage - extra[gainer_side.name]
                limit += 1e-9 * max(1.0, abs(limit), gainer_side.entitled)
                if limit > 0:
                    limits.append((limit, loser))
            view.limits[gainer] = sorted(limits, reverse=True)
        return view

    def _tree(self, projects: set[str]) -> UnitTree:
        """The core's org tree (entitlements from the healthy GPUs), built once per cluster size and project set."""
        key = (self.tracker.up_capacity, frozenset(projects - self.unit_names))
        if self._tree_key != key:
            tree = UnitTree(self.units, set(key[1]), healthy_gpus=key[0], window=self.policy.window)
            tree.bottom_up = list(reversed(list(tree.top_down())))
            self._tree_key, self._tree_cached = key, tree
        return self._tree_cached

    def _allowed_pairs(self, when: float, tick_charges: dict[str, float] | None = None) -> dict[tuple[str, str], int]:
        """(gainer, loser) project -> how many of the gainer's waiting allocated jobs rule 4b would let take
        from the loser's jobs past their protection, each counted alone, with the core's tree and ratios at
        `when`. Without `tick_charges` an over-estimate of what the core may allow (it also charges the tick's
        earlier jobs); with the tick's charges added on the gainer's side, an under-estimate of what it
        did allow. A call is due when the first exceeds the second."""
        view = self._view(when, tick_charges)
        charges = self._pending_charges()
        allowed: dict[tuple[str, str], int] = {}
        for gainer, limits in view.limits.items():
            amounts = charges[gainer]
            for limit, loser in limits:
                count = bisect_left(amounts, limit)
                if count:
                    allowed[(gainer, loser)] = count
        return allowed

    def _inert(self, view: _View) -> set[str]:
        """Pending jobs that provably can neither start nor preempt this tick, nor hold its reservation.

        A job can start only if the free whole GPUs of a fast-lane side it may use (or a shared GPU's room)
        could hold it; it can preempt only if those plus the GPUs of jobs rule 4 lets it take (unallocated
        ones; allocated ones past their protection of units it may take from, with its own charge) could.
        Leaving such jobs out of the snapshot changes no decision of the core (the tests compare against
        calls with every job): capacity and victims only shrink during a tick, and a job that can't act
        only ever shows up in rule 5, whose reservation goes to the first job that can't act in fair-share
        order; so each project's first such jobs (in its own order, as many as reservations) stay in.
        """
        free = self.tracker.free_by_lane
        shared_room = self.tracker.partial_gpus > 0
        fast_max = self.policy.fast_lane_max_min_runtime
        inert: set[str] = set()
        first: dict[str, list[tuple]] = {}
        keep_first = self.policy.max_reservations
        for run_id, job in self.pending.items():
            if job.earmarked_gpus or job.gpus == 0:
                continue
            allocated = job.min_runtime > 0
            sides = (False, True) if not allocated or job.min_runtime <= fast_max else (False,)
            if job.gpus == 1 and job.gpu_milli < core.WHOLE_GPU_MILLI and shared_room:
                continue
            if any(free[side] >= job.gpus for side in sides):
                continue
            if allocated:
                charge = gpu_amount(job.gpus, job.gpu_milli) * job.min_runtime
                reach = {side: free[side] + view.unallocated_held[side] for side in sides}
                for limit, loser in view.limits.get(job.project, ()):
                    if charge >= limit:
                        break
                    held = view.losers[loser]
                    for side in sides:
                        reach[side] += held[side]
                if any(reach[side] >= job.gpus for side in sides):
                    continue
                key = (-job.priority, job.submit_time, job.seq, job.id)
                heads = first.setdefault(job.project, [])
                heads.append(key)
                if len(heads) > keep_first:
                    heads.sort()
                    inert.add(heads.pop()[3])
                continue
            inert.add(run_id)
        return inert

    def _forced_possible(self) -> bool:
        """Could the core end or move a running job with no job pending? (down hosts, drains)"""
        for name in self.attention:
            state = self.hosts[name].state
            if state == core.DRAINING or (state in (core.DOWN, core.DRAINED) and self.tracker.host_held_milli[name]):
                return True
        return False

    def _preemptible_running(self) -> bool:
        for job in self.running.values():
            if job.state == core.RUNNING and (not job.allocated or core.protected_until(job, self.policy) <= self.now):
                return True
        return False

    def _units(self) -> tuple[core.Unit, ...]:
        usage = self.window.usage
        return tuple(
            core.Unit(unit.name, unit.parent, unit.share,
                      allocated_usage=unit.allocated_usage + usage(unit.name, True),
                      unallocated_usage=unit.unallocated_usage + usage(unit.name, False))
            for unit in self.units
        )

    def _update_checkpoints(self, when: float) -> None:
        """Running jobs' last checkpoint as the core sees it (lost work decides victims and defrag)."""
        heap = self.checkpoints
        while heap and heap[0][0] <= when:
            _, _, run, version = heapq.heappop(heap)
            if run.version != version or run.running is None:
                continue
            every = run.job.checkpoint_every
            last = run.start + math.floor((when - run.start) / every) * every
            run.running = replace(run.running, last_checkpoint=last)
            self.running[run.job.id] = run.running
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
        # Claims on GPUs (rule 4) are kept as the core left them, as the live tick stores them.
        claims = decisions.earmarks
        for job_id in sorted(self.claimants | set(claims)):
            run = self.by_id[job_id]
            claim = set(claims.get(job_id, ())) if run.state == PENDING else set()
            if claim != run.earmarks:
                run.earmarks = claim
                if run.state == PENDING:
                    run.pending = self._pending_job(run)
                    self.pending[job_id] = run.pending
        self.claimants = {job_id for job_id in claims if self.by_id[job_id].state == PENDING}
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
            job.id, job.project, job.gpus, job.min_runtime, job.resumable, job.submit, job.seq, user=job.user,
            gpus_per_host=job.gpus_per_host, gpu_milli=job.gpu_milli, gpu_types=job.gpu_types,
            topology=job.topology, max_runtime=job.max_runtime, priority=job.priority, cpus=job.cpus,
            memory_gib=job.memory_gib, earmarked_gpus=tuple(sorted(run.earmarks)), preemptions=run.preemptions,
        )

    def _submit(self, run: Run, when: float) -> None:
        run.state = PENDING
        run.pending = self._pending_job(run)
        self.pending[run.job.id] = run.pending
        self._count_pending(run, 1)
        self._log(when, run.job.id, "submit")
        self.tracker.total_demand(run.amount)
        if run.job.allocated:
            self.tracker.project_level(run.job.project, demand=run.amount)

    def _start(self, run: Run, when: float, gpu_ids: tuple[str, ...], milli: int, host: str,
               log: bool = True) -> None:
        job = run.job
        if self.pending.pop(job.id, None) is not None:
            self._count_pending(run, -1)
        run.pending = None
        run.state = RUNNING
        if not job.allocated and gpu_ids:
            self.unallocated_running += 1
            self.unallocated_held[self.lane_of[gpu_ids[0]]] += len(gpu_ids)
        run.start = when
        run.gpu_ids = gpu_ids
        run.milli = milli
        run.host = host
        run.earmarks = set()
        if run.first_start is None:
            run.first_start = when
            if run.klass == "large":
                self.large_heads[job.id] = (when if run.head is None else run.head,
                                            when if run.tenure is None else run.tenure)
        left = max(0.0, job.duration - run.done)
        run.planned_end = when + left
        exact = job.checkpoint_every is None
        run.running = core.RunningJob(
            job.id, job.project, gpu_ids, when, job.min_runtime, job.resumable, job.submit, job.seq, user=job.user,
            gpu_milli=milli, topology=job.topology, max_runtime=job.max_runtime, priority=job.priority,
            cpus=job.cpus, memory_gib=job.memory_gib,
            # A job that resumes exactly has lost nothing at any moment: checkpointed through its end.
            last_checkpoint=run.planned_end if exact else None, host=host, preemptions=run.preemptions,
        )
        self.running[job.id] = run.running
        if log:
            self._log(when, job.id, "start", _gpu_detail(gpu_ids, milli) if gpu_ids else f"host:{host}")
        if gpu_ids:
            self.tracker.hold(gpu_ids, milli, job.allocated, self.gpu_host)
        if job.allocated:
            self.tracker.project_level(job.project, used=run.amount)
        run.version += 1
        if job.allocated and gpu_ids:
            self.running_gpus[job.project] = self.running_gpus.get(job.project, 0.0) + run.amount
            self.running_gpu_starts[job.project] = self.running_gpu_starts.get(job.project, 0.0) + run.amount * when
            heapq.heappush(self.running_starts, (when, run.index, run, run.version))
        self._push(run.planned_end, LEAVE, run, FINISH, run.version)
        protected = core.protected_until(run.running, self.policy)
        if job.allocated and protected < run.planned_end:
            self._push(protected, WAKE, run, "protection", run.version)
        if job.max_runtime is not None and when + job.max_runtime < run.planned_end:
            self._push(when + job.max_runtime, WAKE, run, "max_runtime", run.version)
        if not exact:
            run.next_checkpoint = when + job.checkpoint_every
            heapq.heappush(self.checkpoints, (run.next_checkpoint, run.index, run, run.version))

    def _preempt(self, preemption: core.Preemption, when: float) -> None:
        run = self.by_id[preemption.job_id]
        down = preemption.cause.startswith("down:")
        if run.state != RUNNING and not (run.state == PREEMPTING and down):
            return
        self._log(when, run.job.id, "preempt", preemption.cause)
        run.stop_cause = preemption.cause
        if preemption.cause != "max_runtime":
            run.preemptions += 1
        if preemption.cause == "defrag":
            self.recent_defrag.append(when)
            self.recent_defrag = [t for t in self.recent_defrag if when - 3600 < t]
            self._push(when + 3600, WAKE, None, "defrag cap")
        if down:
            run.requeue = preemption.requeue
            self._end(run, when, PENDING if preemption.requeue else FAILED)
            return
        self._not_preemptible(run)
        run.state = PREEMPTING
        run.requeue = preemption.requeue
        run.grace_ends = when + preemption.grace
        run.preempted_for = preemption.preemptor
        run.running = replace(run.running, state=core.PREEMPTING, preempted_for=preemption.preemptor,
                              grace_ends=run.grace_ends)
        self.running[run.job.id] = run.running
        if run.grace_ends < run.planned_end:
            self._push(run.grace_ends, LEAVE, run, GRACE_END, run.version)

    def _not_preemptible(self, run: Run) -> None:
        """A running job stops being one rule 4 may take (it is preempted or ends)."""
        if not run.gpu_ids:
            return
        if not run.job.allocated:
            self.unallocated_running -= 1
            self.unallocated_held[self.lane_of[run.gpu_ids[0]]] -= len(run.gpu_ids)
        elif run.past_protection:
            self.loser_held[run.job.project][self.lane_of[run.gpu_ids[0]]] -= len(run.gpu_ids)
        run.past_protection = False

    def _end(self, run: Run, when: float, outcome: str) -> None:
        """End the current run: `completed`, `pending` (requeued), `stopped` (preempted, not requeued), failed."""
        job = run.job
        if run.state == RUNNING:
            self._not_preemptible(run)
        if job.allocated and run.gpu_ids:
            self.running_gpus[job.project] -= run.amount
            self.running_gpu_starts[job.project] -= run.amount * run.start
        run.version += 1
        elapsed = max(0.0, when - run.start)
        if outcome == COMPLETED or run.stop_cause == "max_runtime":
            kept = elapsed
        elif not job.resumable or outcome == FAILED or outcome == "stopped":
            kept = 0.0
        elif job.checkpoint_every is None:
            kept = elapsed
        else:
            kept = math.floor(elapsed / job.checkpoint_every) * job.checkpoint_every
        if outcome != COMPLETED:
            lost = run.amount * (elapsed - kept) if job.gpus else 0.0
            run.lost += lost
        run.done = min(job.duration, run.done + kept)
        if run.gpu_ids:
            self.tracker.hold(run.gpu_ids, run.milli, job.allocated, self.gpu_host, sign=-1)
        if job.allocated:
            self.tracker.project_level(job.project, used=-run.amount)
        self.window.add(job.project, job.allocated, run.amount, run.start, when)
        del self.running[job.id]
        run.running = None
        run.preempted_for = None
        run.grace_ends = None
        stop_cause, run.stop_cause = run.stop_cause, ""
        run.gpu_ids = ()
        if outcome == COMPLETED:
            run.state = COMPLETED
            run.end = when
            self._log(when, job.id, "finish")
        elif outcome == PENDING:
            run.state = PENDING
            run.pending = self._pending_job(run)
            self.pending[job.id] = run.pending
            self._count_pending(run, 1)
            lost = f"lost {elapsed - kept:g} s of work" if kept < elapsed else "lost no work"
            self._log(when, job.id, "requeue", lost)
            return
        elif outcome == FAILED:
            run.state = FAILED
            run.end = when
            self._log(when, job.id, "fail", "host down; not resumable")
        else:
            run.state = FAILED if stop_cause == "max_runtime" else PREEMPTED
            run.end = when
            self._log(when, job.id, "stop", "reached its maximum runtime" if run.state == FAILED
                      else "preempted; not resumable")
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
        self.tracker.host_changed(name, state)
        if state == core.UP:
            self.attention.discard(name)
        else:
            self.attention.add(name)


def _grew(now: dict[tuple[str, str], int], before: dict[tuple[str, str], int]) -> bool:
    return any(count > before.get(pair, 0) for pair, count in now.items())


def _gpu_detail(gpu_ids: tuple[str, ...], milli: int) -> str:
    if milli >= core.WHOLE_GPU_MILLI:
        return " ".join(gpu_ids)
    return " ".join(f"{gpu}@{milli}" for gpu in gpu_ids)


def simulate(cluster: Cluster, units: tuple[core.Unit, ...], jobs: Iterable[SimJob], *, decide: Decide,
             policy_name: str = "allot", faults: Iterable[Fault] = (), until: float | None = None,
             initial: InitialState | None = None, recheck: float = 60.0, progress=None) -> Result:
    """Run a simulation and return its result with `summary` filled (see `output.summarise`)."""
    from .output import summarise

    result = Simulation(cluster, units, jobs, decide=decide, policy_name=policy_name, faults=faults, until=until,
                        initial=initial, recheck=recheck, progress=progress).run()
    result.summary = summarise(result)
    return result

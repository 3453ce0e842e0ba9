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

Between ticks the executor model runs jobs in virtual time: `runs.py` (a
run's start, preemption and end, its checkpoints, the work it keeps and
loses).

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
from dataclasses import replace

from scheduler.core import model as core
from scheduler.core.engine import decide as decide_on_state
from scheduler.core.engine import schedule
from scheduler.core.fairshare import share_of_cluster
from scheduler.core.lifecycle import Outcome
from scheduler.core.quiet import quiet_until, waits_on_arrival
from scheduler.core.state import ClusterState

from .faults import Fault
from .inputs import Cluster, InitialRun, InitialState, UsageInterval
from .measures import Tracker
from .output import Result, summarise
from .runs import ARRIVAL, FAULT, FINISH, LEAVE, PENDING, JobLives, Run
from .workload import SimJob

# The initial state's types live in inputs.py; callers import them from here too.
__all__ = ["InitialRun", "InitialState", "Simulation", "UsageInterval", "simulate"]

Decide = Callable[..., core.Decisions]


class Simulation(JobLives):
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

    # ------------------------------------------------------------ the clock

    def _push(self, when: float, kind: int, payload, detail: str = "", version: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (when, kind, self._seq, payload, detail, version))

    def _dirty(self, when: float) -> None:
        if self.dirty_at is None or when < self.dirty_at:
            self.dirty_at = when

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
                if self.kept and waits_on_arrival(self.state, payload.pending, policy=self.policy):
                    continue  # a tick now would decide what the last one did (the core says when it won't)
            elif kind == FAULT:
                self._fault(payload, when)
            self._dirty(when)

    # ------------------------------------------------------------ the tick

    def _tick(self, when: float) -> None:
        self._advance(when)
        woken = self.quiet_at <= when
        self.dirty_at = None
        self.last_call = when
        if not self.state.pending and not woken and not self._forced_possible():
            # Nothing to decide now, but the moment the core said it would next decide something (a maximum
            # runtime ending) still comes.
            return
        self.quiet_at = math.inf
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
        self.quiet_at = self._quiet_until(when, decisions)

    def _quiet_until(self, when: float, decisions: core.Decisions, named: list[str] | None = None) -> float:
        """When the core next could decide something new with no event (`quiet.quiet_until`)."""
        return quiet_until(self.state, now=when, policy=self.policy, last=decisions, fair_share=self.kept,
                           named=named)

    def _forced_possible(self) -> bool:
        """Could the core end or move a running job with no job pending? (down hosts, drains)"""
        for name in self.attention:
            state = self.hosts[name].state
            if state == core.DRAINING or (state in (core.DOWN, core.DRAINED) and self.tracker.host_held_milli[name]):
                return True
        return False

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


def simulate(cluster: Cluster, units: tuple[core.Unit, ...], jobs: Iterable[SimJob], *, decide: Decide,
             policy_name: str = "allot", faults: Iterable[Fault] = (), until: float | None = None,
             initial: InitialState | None = None, progress=None) -> Result:
    """Run a simulation and return its result with `summary` filled (see `output.summarise`)."""
    result = Simulation(cluster, units, jobs, decide=decide, policy_name=policy_name, faults=faults, until=until,
                        initial=initial, progress=progress).run()
    result.summary = summarise(result)
    return result

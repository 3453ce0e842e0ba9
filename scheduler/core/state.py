"""The scheduler's kept state: what a tick decides on, kept between ticks and changed by events (DESIGN §6b).

`schedule(snapshot)` builds a `ClusterState` from the snapshot and decides
once. A caller that runs many ticks in a row — the simulator, the budget
what-if, tests — keeps one `ClusterState` instead and tells it what happened
between ticks: a job submitted or cancelled, a run that ended, a checkpoint,
a host that changed state, new shares or usage. Each event costs what it
changes; nothing is rebuilt from the whole cluster at every tick.

What it keeps:

- the free capacity, indexed per pool, domain and host by free GPUs
  (`Capacity`), with the GPUs each running job holds;
- the pending jobs, split allocated / unallocated, each project's in its own
  order (priority, submit time, seq), so the fair-share walk reads them in
  place;
- the running jobs, the ones stopping (their grace period), and the jobs
  holding a claim on GPUs (rule 4);
- the MIG demand and the projects with work (for the org tree);
- what the waiting jobs ask, counted: allocated jobs' charges and asks, the
  asks of those defragmentation is tried for (both for `quiet.py`), and the
  whole GPUs unallocated jobs ask (the tick's unallocated walk ends once
  fewer are free than the smallest).

`engine.decide(state, now=, policy=)` runs the tick's phases on it and,
unless told not to, commits what it decided: started jobs hold their GPUs, preempted
ones are stopping, claims are kept. What the caller learns from the outside
world — a victim's exit, a finished job — comes back as an event. The tick's
own working marks (reservations, the claims' holds on free GPUs) are undone
before `decide` returns, so a kept state always equals the state built
afresh from its `snapshot()`; a property test replays random event
sequences and compares the two decision by decision.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from operator import itemgetter

from .capacity import Capacity
from .defrag import defragments_for
from .fairshare import UnitTree, charge_of
from .lifecycle import Cause
from .model import (
    PREEMPTING,
    Decisions,
    Host,
    InSeqOrder,
    PendingJob,
    Policy,
    RunningJob,
    Snapshot,
    Start,
    Topology,
    Unit,
    alike,
    backed_off_until,
    protected_until,
    shielded_until,
    whole_gpus_asked,
)
from .window import WindowUsage

DEFRAG_HOUR = 3600.0


def running_from(job: PendingJob, start: Start, now: float) -> RunningJob:
    """The run a start begins, as the tick's own bookkeeping has it (engine.py `_start`)."""
    return RunningJob(
        job.id, job.project, start.gpu_ids, now, job.min_runtime, job.resumable, job.submit_time, job.seq,
        user=job.user, gpu_milli=start.gpu_milli, topology=job.topology, max_runtime=job.max_runtime,
        priority=job.priority, cpus=job.cpus, memory_gib=job.memory_gib, host=start.host,
        mig_profile=start.mig_profile, mig_start=start.mig_start, preemptions=job.preemptions,
        restart_overhead=job.restart_overhead, checkpoint_every=job.checkpoint_every,
    )


def _usage_fields(job: RunningJob) -> tuple:
    """What a running job's part of the window usage depends on (`UnitTree.add_window_usage`)."""
    return (job.project, job.seq, job.start_time, len(job.gpu_ids), job.gpu_milli, job.min_runtime > 0)


def _ends(job: RunningJob, policy: Policy) -> tuple[RunningJob, float, float]:
    return job, protected_until(job, policy), shielded_until(job, policy)


def _ask(job: PendingJob) -> tuple:
    """What a pending job's charge and whether it needs a whole NVLink domain depend on."""
    return (job.gpus, job.gpus_per_host, job.gpu_types, job.min_runtime, job.gpu_milli)


def _order(job: PendingJob) -> tuple:
    return (-job.priority, job.submit_time, job.seq, job.id)


class ClusterState:
    """One cluster as the scheduler sees it, kept between ticks (see the module docstring)."""

    def __init__(self, topology: Topology, units: tuple[Unit, ...], *, running=(), pending=(),
                 recent_defrag_migrations=(), window: float | None = None):
        self.topology = topology
        # The units as given: shares, and usage from before the runs recorded here (`record_run`).
        self.units = tuple(units)
        # Runs that ended, slid along the look-back window (a kept state records them; a snapshot's units
        # already carry them).
        self.window = WindowUsage(window) if window is not None else None
        self.running: dict[str, RunningJob] = {}
        # The running jobs' (seq, id), sorted, and the jobs in that order (built again after a change).
        self._running_keys: list[tuple] = []
        self._in_order: InSeqOrder | None = None
        self.pending: dict[str, PendingJob] = {}
        # Allocated? -> project -> its pending jobs in project order, and their keys (for bisection).
        self.queues: dict[bool, dict[str, list[PendingJob]]] = {True: {}, False: {}}
        self._queue_keys: dict[bool, dict[str, list[tuple]]] = {True: {}, False: {}}
        # Pending job id -> the number of its class (`model.alike`: jobs alike in all a decision reads of them but
        # who they are share one), numbered as classes are first met, never reused.
        self.classes: dict[str, int] = {}
        self._class_numbers: dict[tuple, int] = {}
        # Jobs holding a claim on GPUs (rule 4), and running jobs in their grace period.
        self.claimants: dict[str, PendingJob] = {}
        # Pending unallocated jobs requeued after a preemption: the only ones that may be backing off
        # (`model.backed_off_until`; `quiet_until` reads them, not the whole unallocated queue).
        self.backing_off: dict[str, PendingJob] = {}
        # Their (`backed_off_until`, id), sorted, under `_backoff_policy` (`backoff_ends`).
        self._backoff_policy: Policy | None = None
        self._backoff_ends: list[tuple[float, str]] = []
        self.stopping: dict[str, RunningJob] = {}
        self.recent_defrag: list[float] = sorted(recent_defrag_migrations)
        # Did the last tick keep a job out of free GPUs only for a reservation (rule 5)? (`quiet.py`)
        self.held_back = False
        # The last tick kept a job from preempting outside its ancestor while a less-served sibling waited.
        self.scoped = False
        # The last tick passed over a job between its declared checkpoints for a waiting job (rule 4), or
        # counted on one leaving at its next checkpoint (rule 5).
        self.passed_over = False
        # The running jobs whose checkpoints the last tick read: passed over between them (rule 4), or whose
        # leave time in rule 5's sweep they set (`quiet.py`).
        self.window_jobs: set[str] = set()
        # Domain -> the jobs the last tick's defragmentation plans took there before the waiting job fitted
        # (`defrag.plan_defrag`'s `read`; `quiet.py`).
        self.moves_read: dict[str, set[str]] = {}
        # The jobs the last tick's allocated walk charged for, in order, and project -> how many of those charges
        # it had made when it met the project's first and last job (`Cycle.met`; `quiet.py`).
        self.walk_charges: tuple[tuple[str, ...], dict[str, tuple[int, int]]] = ((), {})
        self._mig_demand: Counter[tuple[str, frozenset[str]]] = Counter()
        # What the pending allocated jobs that defragmentation is tried for ask (`defrag.defragments_for`: GPUs,
        # minimum runtime, GPU types) -> [how many, one of them] (`defrag_asks`).
        self._defrag_asks: dict[tuple, list] = {}
        # Whole GPUs each pending unallocated job asks, counted; 0 for one asking a fraction, a MIG instance or no
        # GPU (`smallest_unallocated_ask`).
        self._unallocated_asks: Counter[int] = Counter()
        # Project -> how many of its jobs are pending or running (the org tree needs every project named).
        self._projects: Counter[str] = Counter()
        # Bumped when a project comes or goes from `_projects`, and the projects without a unit as last worked out
        # (`_projects_without_unit`): (that count, the units' names, those projects).
        self._project_set_version = 0
        self._without_unit: tuple | None = None
        # Project -> what starting each of its pending allocated jobs would charge it (rule 2), counted.
        self._charges: dict[str, Counter[float]] = {}
        # Project -> what its pending allocated jobs ask (`_ask`) -> [how many, one of them]; jobs holding a claim
        # aside. Whether a job needs a whole NVLink domain depends on nothing else (`quiet._large_charges`).
        self._asks: dict[str, dict[tuple, list]] = {}
        # Bumped whenever a project's pending jobs come to ask something new or stop asking something
        # (`pending_asks`' keys; `quiet._large_charges` keeps its answer while it stands).
        self.asks_version = 0
        # The org tree's usage over the window as `usage_tree` last summed it: (version, now, window,
        # {unit: (allocated, unallocated usage)}). The version moves with every change that could alter that
        # sum at that moment (`_usage_changed`), so a tick and the `quiet_until` after it sum it once.
        self._usage_version = 0
        self._usage_seen: tuple | None = None
        # The org tree as last built: (units, their names, projects without a unit, healthy GPUs, window, tree).
        # Its nodes' usage is set anew by every `usage_tree`; nothing else of it changes while the rest holds.
        self._tree: tuple | None = None
        # Running job id -> (the job, when its protection ends, when its shield ends) under `_ends_policy`
        # (`model.protected_until`, `shielded_until`): read for every running job by each tick's victims and
        # reservations and by `quiet_until`, kept as runs start, change and end (`run_ends`).
        self._ends_policy: Policy | None = None
        self._ends: dict[str, tuple[RunningJob, float, float]] = {}
        for job in sorted(running, key=lambda j: (j.seq, j.id)):
            self._add_running(job)
        self.capacity = Capacity(topology, self.running_in_order(), (), 0.0)
        pending = tuple(pending)
        for job in pending:
            self._note_pending(job)
        self._queue_all(pending)

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> ClusterState:
        return cls(snapshot.topology, snapshot.units, running=snapshot.running, pending=snapshot.pending,
                   recent_defrag_migrations=snapshot.recent_defrag_migrations)

    def snapshot(self, now: float | None = None) -> Snapshot:
        """The snapshot a live tick would build of this state at `now` (`from_snapshot` gives it back)."""
        units = self.units if now is None else self.units_at(now)
        return Snapshot(self.topology, units, tuple(self.running.values()), tuple(self.pending.values()),
                        recent_defrag_migrations=tuple(self.recent_defrag))

    def units_at(self, now: float) -> tuple[Unit, ...]:
        """The units with the usage of recorded runs that is still inside the window at `now` (rule 1)."""
        if self.window is None:
            return self.units
        return tuple(replace(unit, allocated_usage=allocated, unallocated_usage=unallocated)
                     for unit, (_, allocated, unallocated) in zip(self.units, self._own_usage(now), strict=True))

    def _own_usage(self, now: float) -> list[tuple[str, float, float]]:
        """Each unit's (name, allocated usage, unallocated usage) charged to it alone, with the recorded runs still
        inside the window at `now`."""
        if self.window is None:
            return [(unit.name, unit.allocated_usage, unit.unallocated_usage) for unit in self.units]
        window = self.window
        window.at(now)
        return [(unit.name, unit.allocated_usage + window.usage(unit.name, True),
                 unit.unallocated_usage + window.usage(unit.name, False)) for unit in self.units]

    def usage_tree(self, now: float, window: float) -> UnitTree:
        """The org tree with its usage over the window at `now` (rule 1), before any tick's charges.

        Summed once per moment: asked again at the same `now` with nothing changed that the sum depends on
        (a tick and the `quiet_until` after it), the sums are copied from the first time, bit for bit.
        """
        tree = self._tree_shape(window)
        seen = self._usage_seen
        if (seen is not None and seen[0] == self._usage_version and seen[1] == now and seen[2] == window
                and seen[3].keys() == tree.nodes.keys()):
            if self.window is not None:
                self.window.at(now)  # as `units_at` would (the slopes `quiet_until` reads are as of `now`)
            for name, (usage, unallocated) in seen[3].items():
                node = tree.nodes[name]
                node.usage = usage
                node.unallocated_usage = unallocated
            return tree
        for node in tree.nodes.values():
            node.usage = 0.0
            node.unallocated_usage = 0.0
        tree.sum_window_usage(self._own_usage(now), self.running_in_order(), now=now, window=window)
        self._usage_seen = (self._usage_version, now, window,
                            {name: (node.usage, node.unallocated_usage) for name, node in tree.nodes.items()})
        return tree

    def _tree_shape(self, window: float) -> UnitTree:
        """The org tree of this state's units and projects, kept while they and the healthy GPUs are the same
        (its usage is the caller's to set)."""
        units, healthy = self.units, self.capacity.healthy_gpus
        kept = self._tree
        if kept is None or kept[0] is not units:
            kept = (units, frozenset(unit.name for unit in units), None, None, None, None)
        others = self._projects_without_unit(kept[1])
        if kept[2:5] != (others, healthy, window):
            tree = UnitTree(units, self.projects(), healthy_gpus=healthy, window=window)
            kept = (units, kept[1], others, healthy, window, tree)
        self._tree = kept
        return kept[5]

    def _projects_without_unit(self, named: frozenset[str]) -> tuple[str, ...]:
        """The projects jobs name that no unit does, sorted; worked out again only when a project comes or goes
        (or the units do)."""
        known = self._without_unit
        if known is None or known[0] != self._project_set_version or known[1] is not named:
            known = self._without_unit = (self._project_set_version, named,
                                          tuple(sorted(self._projects.keys() - named)))
        return known[2]

    def _usage_changed(self) -> None:
        self._usage_version += 1

    def record_run(self, project: str, *, allocated: bool, gpus: float, start: float, end: float) -> None:
        """A run ended: its GPU time counts in its project's usage until it slides out of the window."""
        self._usage_changed()
        if self.window is not None:
            self.window.add(project, allocated, gpus, start, end)

    def pending_asks(self) -> dict[str, dict[tuple, list]]:
        """Project -> what its pending allocated jobs ask -> [how many, one of them] (the caller must not change
        it); jobs holding a claim aside."""
        return self._asks

    def pending_charges(self) -> dict[str, list[float]]:
        """Project -> what starting each of its pending allocated jobs would charge it (rule 2), each amount
        once, smallest first; jobs holding a claim aside (they are charged already, and preempt no more)."""
        return {project: sorted(charges) for project, charges in self._charges.items()}

    # ------------------------------------------------------------ what a tick reads

    def recent_defrag_migrations(self, now: float) -> tuple[float, ...]:
        return tuple(t for t in self.recent_defrag if now - DEFRAG_HOUR < t <= now)

    def running_in_order(self) -> InSeqOrder:
        """The running jobs in (seq, id) order."""
        if self._in_order is None:
            running = self.running
            self._in_order = InSeqOrder(running[key[1]] for key in self._running_keys)
        return self._in_order

    def run_ends(self, policy: Policy) -> dict[str, tuple[RunningJob, float, float]]:
        """Running job id -> (the job, `protected_until`, `shielded_until`) under `policy`; the caller must not
        change it. Built once per policy object, then kept by the events."""
        if self._ends_policy is not policy:
            self._ends_policy = policy
            self._ends = {job_id: _ends(job, policy) for job_id, job in self.running.items()}
        return self._ends

    def backoff_ends(self, policy: Policy) -> list[tuple[float, str]]:
        """(Until when it backs off, id) of every job in `backing_off` under `policy`, sorted; the caller must
        not change it. Built once per policy object, then kept by the events."""
        if self._backoff_policy is not policy:
            self._backoff_policy = policy
            self._backoff_ends = sorted((backed_off_until(job, policy), job.id) for job in self.backing_off.values())
        return self._backoff_ends

    def mig_demand(self) -> Counter[tuple[str, frozenset[str]]]:
        return Counter(self._mig_demand)

    def defrag_asks(self) -> dict[tuple, list]:
        """What the pending allocated jobs that defragmentation is tried for ask (GPUs, minimum runtime, GPU
        types) -> [how many, one of them] (the caller must not change it)."""
        return self._defrag_asks

    def smallest_unallocated_ask(self) -> float:
        """The fewest whole GPUs a pending unallocated job asks: 0 if one asks a fraction, a MIG instance or no
        GPU (those may find room however few GPUs are free), inf if none waits."""
        return min(self._unallocated_asks, default=math.inf)

    def projects(self) -> set[str]:
        return set(self._projects)

    def commit(self, decisions: Decisions, started: dict[str, tuple[RunningJob, list]], now: float) -> None:
        """Make a tick's decisions this state: `started` maps each started job to its run and (host, GPUs)
        as the tick took them on this state's capacity."""
        for start in decisions.starts:
            job = self.pending.get(start.job_id)
            if job is None:
                continue
            self._remove_pending(job)
            run, held = started[start.job_id]
            self._add_running(run)
            self.capacity.held[run.id] = held
        self._commit_the_rest(decisions, now)

    def apply(self, decisions: Decisions, now: float) -> None:
        """Make another decision function's decisions this state (a baseline's, which took nothing here)."""
        for start in decisions.starts:
            job = self.pending.get(start.job_id)
            if job is not None:
                self.start(running_from(job, start, now))
        self._commit_the_rest(decisions, now)

    def _commit_the_rest(self, decisions: Decisions, now: float) -> None:
        for preemption in decisions.preemptions:
            job = self.running.get(preemption.job_id)
            if job is None or job.state == PREEMPTING:
                continue
            stopping = replace(job, state=PREEMPTING, preempted_for=preemption.preemptor,
                               grace_ends=now + preemption.grace)
            self.update_running(stopping)
            if preemption.cause == Cause.DEFRAG:
                self.recent_defrag.append(now)
        if self.recent_defrag:
            self.recent_defrag = [t for t in self.recent_defrag if now - DEFRAG_HOUR < t]
        for job_id in sorted(set(self.claimants) | set(decisions.earmarks)):
            job = self.pending.get(job_id)
            claim = decisions.earmarks.get(job_id, ())
            if job is not None and job.earmarked_gpus != claim:
                self.update_pending(replace(job, earmarked_gpus=claim))
        if decisions.mig_layouts:
            self._set_mig_layouts(decisions.mig_layouts)

    # ------------------------------------------------------------ events

    def submit(self, job: PendingJob) -> None:
        """A job waits: newly submitted, or requeued after a preemption."""
        if job.id in self.pending or job.id in self.running:
            raise ValueError(f"job {job.id!r} is already known")
        self._add_pending(job)

    def cancel(self, job_id: str) -> None:
        """A pending job leaves the queue (cancelled)."""
        job = self.pending.get(job_id)
        if job is not None:
            self._remove_pending(job)

    def update_pending(self, job: PendingJob) -> None:
        old = self.pending[job.id]
        self._remove_pending(old)
        self._add_pending(job)

    def start(self, job: RunningJob) -> None:
        """A job runs that this state did not start itself (e.g. at the start of a what-if)."""
        pending = self.pending.get(job.id)
        if pending is not None:
            self._remove_pending(pending)
        self._add_running(job)
        self.capacity.add_running(job)

    def update_running(self, job: RunningJob) -> None:
        """The same run with other facts: a checkpoint, its grace period (it holds the same GPUs)."""
        old = self.running.get(job.id)
        if old is None or _usage_fields(old) != _usage_fields(job):
            self._usage_changed()
        if old is None or old.seq != job.seq:
            keys = self._running_keys
            if old is not None:
                del keys[bisect_left(keys, (old.seq, old.id))]
            insort(keys, (job.seq, job.id))
        self.running[job.id] = job
        if self._ends_policy is not None:
            self._ends[job.id] = _ends(job, self._ends_policy)
        self._in_order = None
        if job.state == PREEMPTING:
            self.stopping[job.id] = job
        else:
            self.stopping.pop(job.id, None)
        self.capacity.replace_running(job)

    def end_run(self, job_id: str) -> RunningJob | None:
        """A run ended (finished, stopped, lost): its GPUs, CPUs and memory are free again."""
        job = self.running.pop(job_id, None)
        if job is None:
            return None
        self._usage_changed()
        self._ends.pop(job_id, None)
        keys = self._running_keys
        del keys[bisect_left(keys, (job.seq, job.id))]
        self._in_order = None
        self.stopping.pop(job_id, None)
        self._count_project(job.project, -1)
        self.capacity.remove_running(job)
        return job

    def set_topology(self, topology: Topology) -> None:
        """Hosts changed state or health: the capacity is built again (rare; O(GPUs))."""
        self.topology = topology
        self._usage_changed()
        self.capacity = Capacity(topology, self.running_in_order(), (), 0.0)

    def set_host_state(self, name: str, state: str) -> None:
        hosts = tuple(replace(host, state=state) if host.name == name else host for host in self.topology.hosts)
        self.set_topology(Topology(self.topology.domains, hosts))

    def set_units(self, units: tuple[Unit, ...]) -> None:
        """Shares or ended usage changed (the window slides, a run ended, a budget was approved)."""
        self._usage_changed()
        self.units = tuple(units)

    # ------------------------------------------------------------ bookkeeping

    def _add_pending(self, job: PendingJob) -> None:
        self._note_pending(job)
        allocated = job.min_runtime > 0
        key = _order(job)
        keys = self._queue_keys[allocated].setdefault(job.project, [])
        queue = self.queues[allocated].setdefault(job.project, [])
        index = bisect_left(keys, key)
        keys.insert(index, key)
        queue.insert(index, job)

    def _queue_all(self, jobs: Iterable[PendingJob]) -> None:
        """Put a new state's pending jobs in their projects' queues, each queue sorted once: the order `_add_pending`
        gives them one at a time (no two keys are equal: each ends with the job's id)."""
        grouped: dict[tuple[bool, str], list[tuple[tuple, PendingJob]]] = {}
        for job in jobs:
            group = (job.min_runtime > 0, job.project)
            entries = grouped.get(group)
            if entries is None:
                entries = grouped[group] = []
            entries.append((_order(job), job))
        for (allocated, project), entries in grouped.items():
            entries.sort(key=itemgetter(0))
            self._queue_keys[allocated][project] = [key for key, _ in entries]
            self.queues[allocated][project] = [job for _, job in entries]

    def _note_pending(self, job: PendingJob) -> None:
        """All a pending job counts in but its project's queue (`_add_pending` puts it there)."""
        self.pending[job.id] = job
        numbers = self._class_numbers
        self.classes[job.id] = numbers.setdefault(alike(job), len(numbers))
        allocated = job.min_runtime > 0
        if job.earmarked_gpus:
            self.claimants[job.id] = job
        if not allocated and job.requeued_at is not None and job.preemptions > 0:
            self.backing_off[job.id] = job
            if self._backoff_policy is not None:
                insort(self._backoff_ends, (backed_off_until(job, self._backoff_policy), job.id))
        if job.mig_profile:
            self._mig_demand[(job.mig_profile, job.gpu_types)] += 1
        if not allocated:
            self._unallocated_asks[whole_gpus_asked(job)] += 1
        elif defragments_for(job):
            _count_in(self._defrag_asks, _defrag_ask(job), job)
        if allocated and not job.earmarked_gpus:
            if job.gpus:
                charges = self._charges.get(job.project)
                if charges is None:
                    charges = self._charges[job.project] = Counter()
                charges[charge_of(job)] += 1
            asks = self._asks.get(job.project)
            if asks is None:
                asks = self._asks[job.project] = {}
            if _count_in(asks, _ask(job), job):
                self.asks_version += 1
        self._count_project(job.project, 1)

    def _remove_pending(self, job: PendingJob) -> None:
        del self.pending[job.id]
        del self.classes[job.id]
        allocated = job.min_runtime > 0
        keys = self._queue_keys[allocated][job.project]
        queue = self.queues[allocated][job.project]
        index = bisect_left(keys, _order(job))
        del keys[index]
        del queue[index]
        if not queue:
            del self.queues[allocated][job.project]
            del self._queue_keys[allocated][job.project]
        self.claimants.pop(job.id, None)
        if self.backing_off.pop(job.id, None) is not None and self._backoff_policy is not None:
            ends = self._backoff_ends
            del ends[bisect_left(ends, (backed_off_until(job, self._backoff_policy), job.id))]
        if job.mig_profile:
            key = (job.mig_profile, job.gpu_types)
            self._mig_demand[key] -= 1
            if self._mig_demand[key] <= 0:
                del self._mig_demand[key]
        if not allocated:
            asked = whole_gpus_asked(job)
            self._unallocated_asks[asked] -= 1
            if self._unallocated_asks[asked] <= 0:
                del self._unallocated_asks[asked]
        elif defragments_for(job):
            key = _defrag_ask(job)
            entry = self._defrag_asks[key]
            entry[0] -= 1
            if entry[0] <= 0:
                del self._defrag_asks[key]
        if allocated and job.gpus and not job.earmarked_gpus:
            charges = self._charges[job.project]
            charge = charge_of(job)
            charges[charge] -= 1
            if charges[charge] <= 0:
                del charges[charge]
                if not charges:
                    del self._charges[job.project]
        if allocated and not job.earmarked_gpus:
            asks = self._asks[job.project]
            ask = _ask(job)
            asks[ask][0] -= 1
            if asks[ask][0] <= 0:
                del asks[ask]
                self.asks_version += 1
                if not asks:
                    del self._asks[job.project]
        self._count_project(job.project, -1)

    def _add_running(self, job: RunningJob) -> None:
        # A run starting at or after the moment last summed adds nothing to that sum (a tick's own starts).
        if self._usage_seen is None or job.start_time < self._usage_seen[1]:
            self._usage_changed()
        self.running[job.id] = job
        if self._ends_policy is not None:
            self._ends[job.id] = _ends(job, self._ends_policy)
        insort(self._running_keys, (job.seq, job.id))
        self._in_order = None
        if job.state == PREEMPTING:
            self.stopping[job.id] = job
        self._count_project(job.project, 1)

    def _count_project(self, project: str, change: int) -> None:
        count = self._projects[project] + change
        if count > 0:
            if project not in self._projects:
                self._project_set_version += 1
            self._projects[project] = count
        else:
            del self._projects[project]
            self._project_set_version += 1

    def _set_mig_layouts(self, layouts) -> None:
        """MIG GPUs given new layouts: the topology says so too (for when the capacity is built again)."""
        by_gpu = {layout.gpu: layout.instances for layout in layouts}
        hosts = []
        for host in self.topology.hosts:
            if host.mig and any(m.gpu in by_gpu for m in host.mig):
                host = Host(host.name, host.domain, host.gpu_type, host.gpus, state=host.state, cpus=host.cpus,
                            memory_gib=host.memory_gib, fast_lane=host.fast_lane,
                            mig=tuple(replace(m, instances=tuple(by_gpu[m.gpu])) if m.gpu in by_gpu else m
                                      for m in host.mig))
            hosts.append(host)
        self.topology = Topology(self.topology.domains, tuple(hosts))


def _count_in(counted: dict[tuple, list], key: tuple, job: PendingJob) -> bool:
    """Count a pending job under `key` in `counted` (key -> [how many, one of them]); True if the key is new."""
    entry = counted.get(key)
    if entry is None:
        counted[key] = [1, job]
        return True
    entry[0] += 1
    return False


def _defrag_ask(job: PendingJob) -> tuple:
    """What a job's pools and size for defragmentation depend on (`quiet._may_defragment`)."""
    return (job.gpus, job.min_runtime, job.gpu_types)


"""Rules 1 and 2: usage over the look-back window and the fair-share order."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from operator import attrgetter

from .model import (
    QUEUE_AFTER_ALLOCATED,
    QUEUE_AHEAD_NO_ALLOCATION,
    QUEUE_BOTH_UNALLOCATED,
    QUEUE_CHARGED,
    QUEUE_EQUAL_RATIOS,
    QUEUE_FIRST,
    QUEUE_FIRST_UNALLOCATED,
    QUEUE_LESS_SERVED,
    QUEUE_NEITHER_ALLOCATED,
    QUEUE_NO_ALLOCATION,
    QUEUE_SAME_UNITS,
    WHOLE_GPU_MILLI,
    PendingJob,
    QueueStep,
    RunningJob,
    Unit,
    in_seq_order,
)


def gpu_amount(gpus: int, milli: int) -> float:
    """GPUs a job holds: a 1-GPU job may hold a fraction; larger ones whole GPUs."""
    if gpus == 1:
        return milli / WHOLE_GPU_MILLI
    return float(gpus)


def charge_of(job: PendingJob) -> float:
    """Rule 2: what starting (or preempting for) a pending job adds to its units' usage for the rest of the tick."""
    return gpu_amount(job.gpus, job.gpu_milli) * job.min_runtime


@dataclass(eq=False)
class UnitNode:
    """A unit of the org tree with its entitlement and working usage."""

    name: str
    share: float | None
    parent: UnitNode | None
    children: list[UnitNode] = field(default_factory=list)
    # Product of share/100 down the path; 0 if any share on it is None.
    share_of_cluster: float = 0.0
    # GPU-seconds per window: share_of_cluster × healthy GPUs × window.
    entitled: float = 0.0
    # Allocated GPU-seconds in the window (subtree), plus this tick's charges.
    usage: float = 0.0
    unallocated_usage: float = 0.0
    # Root .. self.
    path: tuple[UnitNode, ...] = ()
    # Another node -> `sides_at_common_ancestor(self, it)`: the paths never change once the tree is built, and a
    # kept state keeps its tree across ticks while its shape holds (`ClusterState._tree_shape`), so once per pair.
    sides_with: dict[UnitNode, tuple[UnitNode, UnitNode] | None] = field(default_factory=dict, repr=False)

    @property
    def ratio(self) -> float:
        return self.ratio_with(0.0)

    def ratio_with(self, extra: float) -> float:
        if self.entitled <= 0:
            return math.inf
        return (self.usage + extra) / self.entitled


class UnitTree:
    """The org tree as seen from one cluster.

    Units whose parent is None (or unknown) are siblings at the top. A project
    that jobs name but the snapshot lacks is treated as a top-level unit with
    no allocation here.
    """

    def __init__(self, units: tuple[Unit, ...], projects: set[str], *, healthy_gpus: int, window: float):
        self.nodes: dict[str, UnitNode] = {}
        # What callers work out from the tree's shape and entitlements alone, which never change once it is
        # built (a kept state keeps its tree while they hold: `ClusterState._tree_shape`), by the caller's key.
        self.derived: dict[tuple, object] = {}
        for unit in sorted(units, key=lambda u: u.name):
            self.nodes[unit.name] = UnitNode(unit.name, unit.share, None)
        for name in sorted(projects - self.nodes.keys()):
            self.nodes[name] = UnitNode(name, None, None)
        by_name = {unit.name: unit for unit in units}
        self.roots: list[UnitNode] = []
        for node in self.nodes.values():
            unit = by_name.get(node.name)
            parent = self.nodes.get(unit.parent) if unit is not None and unit.parent else None
            node.parent = parent
            (parent.children if parent is not None else self.roots).append(node)
        for node in self.top_down():
            parent_share = node.parent.share_of_cluster if node.parent is not None else 1.0
            node.share_of_cluster = parent_share * (node.share or 0.0) / 100
            node.entitled = node.share_of_cluster * healthy_gpus * window
            node.path = (node.parent.path if node.parent is not None else ()) + (node,)

    def top_down(self) -> Iterator[UnitNode]:
        stack = list(reversed(self.roots))
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def add_window_usage(self, units: tuple[Unit, ...], running: tuple[RunningJob, ...], *, now: float,
                         window: float) -> None:
        """Rule 1: ended usage from the units plus running jobs' time in the window, summed up the tree.

        A unit's own `allocated_usage` counts jobs charged to it alone (the
        caller clips it to the window); descendants' usage is added here.
        """
        self.sum_window_usage([(unit.name, unit.allocated_usage, unit.unallocated_usage) for unit in units],
                              running, now=now, window=window)

    def sum_window_usage(self, own: list[tuple[str, float, float]], running: tuple[RunningJob, ...], *,
                         now: float, window: float) -> None:
        """`add_window_usage` from each unit's (name, allocated usage, unallocated usage)."""
        for name, allocated_usage, unallocated_usage in own:
            node = self.nodes[name]
            node.usage = allocated_usage
            node.unallocated_usage = unallocated_usage
        window_start = now - window
        nodes = self.nodes
        for job in in_seq_order(running):
            # `max(job.start_time, window_start)`, without a call per running job.
            start = job.start_time
            seconds = now - (window_start if window_start > start else start)
            if seconds <= 0:
                continue
            used = gpu_amount(len(job.gpu_ids), job.gpu_milli) * seconds
            node = nodes[job.project]
            if job.min_runtime > 0:
                node.usage += used
            else:
                node.unallocated_usage += used
        for node in reversed(list(self.top_down())):
            if node.parent is not None:
                node.parent.usage += node.usage
                node.parent.unallocated_usage += node.unallocated_usage

    def ratios(self) -> dict[str, float]:
        return {name: node.ratio for name, node in self.nodes.items()}


_UNKNOWN = object()  # not worked out yet (None is an answer: one project)


def sides_at_common_ancestor(gainer: UnitNode, loser: UnitNode) -> tuple[UnitNode, UnitNode] | None:
    """The children of the lowest common ancestor on each side (None for one project); kept by the gainer."""
    sides = gainer.sides_with.get(loser, _UNKNOWN)
    if sides is _UNKNOWN:
        sides = gainer.sides_with[loser] = _sides_at_common_ancestor(gainer, loser)
    return sides


def _sides_at_common_ancestor(gainer: UnitNode, loser: UnitNode) -> tuple[UnitNode, UnitNode] | None:
    for gainer_side, loser_side in zip(gainer.path, loser.path, strict=False):
        if gainer_side is not loser_side:
            return gainer_side, loser_side
    return None


def may_take_from(gainer: UnitNode, loser: UnitNode, charge: float,
                  sides: tuple[UnitNode, UnitNode] | None = None) -> tuple[UnitNode, UnitNode] | None:
    """Rule 4b: may a job of `gainer` preempt an allocated job of `loser`?

    Compared at their lowest common ancestor: the gainer's side, charged
    `charge` GPU-seconds for the new job, must stay strictly below the loser's
    side. Returns the two sides when it may (for the reason), else None. `sides`: the two sides, if the caller
    knows them already.
    """
    if sides is None:
        sides = sides_at_common_ancestor(gainer, loser)
        if sides is None:
            return None
    gainer_side, loser_side = sides
    if gainer_side.ratio_with(charge) < loser_side.ratio:
        return sides
    return None


def may_take_on_own_path(gainer: UnitNode, loser: UnitNode, charge: float,
                         sides: tuple[UnitNode, UnitNode] | None = None) -> tuple[UnitNode, UnitNode] | None:
    """Rule 4b, second clause: may a job of `gainer` preempt an allocated job of `loser` although its side at
    their lowest common ancestor is not less served than the loser's?

    For a job that needs a whole multi-host NVLink domain (the callers check): it may when a unit on its own
    path below that side (its project, or an ancestor of it), charged `charge`, stays strictly below the
    loser's side. Such a job can start only where a domain that large stands and can't be given what its
    siblings hold elsewhere, so a side kept level with the loser's by their use does not keep it out. Jobs
    the first clause opens come first as victims (`Victims`); the loser's side, less served then, may take
    back as usual. Returns (that unit, the loser's side) for the reason, else None. `sides` as for
    `may_take_from`.
    """
    if sides is None:
        sides = sides_at_common_ancestor(gainer, loser)
        if sides is None:
            return None
    gainer_side, loser_side = sides
    limit = loser_side.ratio
    for node in gainer.path[len(gainer_side.path):]:
        if node.ratio_with(charge) < limit:
            return node, loser_side
    return None


def allocated_key(node: UnitNode) -> tuple:
    # Lowest usage ratio first; ties: larger share, then name.
    return (node.ratio, -(node.share or 0.0), node.name)


def unallocated_key(node: UnitNode) -> tuple:
    # Free time is shared equally: fewest unallocated GPU-seconds first. Not
    # divided by share, since units without one are its main users.
    return (node.unallocated_usage, node.name)


def sort_in_project_order(jobs: list[PendingJob]) -> list[PendingJob]:
    """A project's own order: priority (high first), submit time, then seq (and id)."""
    # One stable sort per key, least significant first: cheaper than tuple keys.
    ordered = sorted(jobs, key=attrgetter("id"))
    ordered.sort(key=attrgetter("seq"))
    ordered.sort(key=attrgetter("submit_time"))
    ordered.sort(key=attrgetter("priority"), reverse=True)
    return ordered


def project_order_key(job: PendingJob) -> tuple:
    """A project's own order as one key: priority (high first), submit time, then seq (and id)."""
    return (-job.priority, job.submit_time, job.seq, job.id)


class FairShareWalk:
    """Pending jobs in hierarchical fair-share order, produced lazily.

    Every unit with pending work sits in its parent's heap, keyed by the order
    key; `next()` follows the heap tops down to a project and takes its next
    job, and keeps taking from that project until something is charged (its
    jobs are consecutive in the order until then). `charge()` adds a started
    job's GPU-seconds to its units and re-keys only them: each is the top of
    its parent's heap at that moment, so one `heapreplace` per level suffices
    (DESIGN §6b). Units whose work is done are dropped from the heaps when a
    descent meets them.

    `queues` holds each project's jobs already in project order (a kept
    state keeps them so): the walk reads them through cursors and copies
    nothing.
    """

    def __init__(self, tree: UnitTree, queues: dict[str, list[PendingJob]], *, allocated: bool):
        self._allocated = allocated
        self._key = allocated_key if allocated else unallocated_key
        self._queues = {name: queue for name, queue in queues.items() if queue}
        self._cursor = dict.fromkeys(self._queues, 0)
        with_work = {node.name: node for name in self._queues for node in tree.nodes[name].path}
        self._heaps: dict[str | None, list] = {None: []}
        for name in sorted(with_work):
            node = with_work[name]
            parent = node.parent.name if node.parent is not None else None
            self._heaps.setdefault(parent, []).append((self._key(node), node.name, node))
        for heap in self._heaps.values():
            heapq.heapify(heap)
        self._path: list[UnitNode] = []
        # The project being taken from, until the next charge.
        self._current: str | None = None

    @classmethod
    def of_jobs(cls, tree: UnitTree, jobs: list[PendingJob], *, allocated: bool) -> FairShareWalk:
        queues: dict[str, list[PendingJob]] = {}
        for job in sort_in_project_order(jobs):
            queues.setdefault(job.project, []).append(job)
        return cls(tree, queues, allocated=allocated)

    def _take(self, name: str) -> PendingJob | None:
        queue = self._queues[name]
        position = self._cursor[name]
        if position >= len(queue):
            return None
        self._cursor[name] = position + 1
        return queue[position]

    def next(self) -> PendingJob | None:
        if self._current is not None:
            job = self._take(self._current)
            if job is not None:
                return job
        name = self._descend()
        return self._take(name) if name is not None else None

    def pass_known(self, class_of: dict[str, int], known: dict, owed: set[str]) -> list[PendingJob]:
        """Take at once the next jobs of the project `next()` takes from while their class (`class_of`) is in
        `known` and none is in `owed`, and return them, in order: jobs the caller knows wait, as `next()` would
        have given them one by one (nothing is charged in between)."""
        name = self._current
        queue = self._queues[name]
        start = position = self._cursor[name]
        end = len(queue)
        while position < end:
            job_id = queue[position].id
            if class_of[job_id] not in known or job_id in owed:
                break
            position += 1
        self._cursor[name] = position
        return queue[start:position]

    def _descend(self) -> str | None:
        """Down the heap tops to the project with the next job; drops units with nothing left."""
        while True:
            heap = self._heaps[None]
            if not heap:
                self._current = None
                return None
            path = []
            while True:
                node = heap[0][2]
                children = self._heaps.get(node.name)
                if children:
                    path.append(node)
                    heap = children
                    continue
                queue = self._queues.get(node.name)
                if queue is not None and self._cursor[node.name] < len(queue):
                    path.append(node)
                    self._path = path
                    self._current = node.name
                    return node.name
                heapq.heappop(heap)
                break

    def charge(self, gpu_seconds: float) -> None:
        """Charge the units of the job `next()` returned last (rule 2)."""
        for node in self._path:
            if self._allocated:
                node.usage += gpu_seconds
            else:
                node.unallocated_usage += gpu_seconds
        for node in reversed(self._path):
            heap = self._heaps[node.parent.name if node.parent is not None else None]
            heapq.heapreplace(heap, (self._key(node), node.name, node))
        self._current = None

    def rest(self) -> Iterator[PendingJob]:
        """The remaining jobs in order, for when nothing more can start or preempt."""
        while True:
            name = self._current
            if name is None or self._cursor[name] >= len(self._queues[name]):
                name = self._descend()
            if name is None:
                return
            queue, position = self._queues[name], self._cursor[name]
            self._cursor[name] = len(queue)
            self._current = None
            yield from queue[position:]


def explain_order(firsts: dict[str, tuple[int, bool]], tree: UnitTree,
                  ratios: dict[str, float]) -> tuple[QueueStep, ...]:
    """Rule 2's order explained: why each project stands after the previous one, in queue order.

    `firsts` maps each project with a job still waiting, in queue order, to
    where its first waiting job stands and whether that job is allocated;
    `ratios` are the units' usage ratios at the start of the tick (before this
    tick's charges). Two consecutive allocated projects are compared at the
    first level of the org tree where their units differ, as the walk compared
    them. Costs projects × tree depth.
    """
    steps = []
    before: tuple[UnitNode, bool] | None = None
    for project, (position, allocated) in firsts.items():
        node = tree.nodes[project]
        if before is None:
            step = QueueStep(project, position, QUEUE_FIRST if allocated else QUEUE_FIRST_UNALLOCATED)
        elif not allocated:
            step = QueueStep(project, position, QUEUE_AFTER_ALLOCATED if before[1] else QUEUE_BOTH_UNALLOCATED)
        else:
            step = _after_sibling(project, position, before[0], node, ratios)
        steps.append(replace(step, path=tuple(unit.name for unit in node.path)))
        before = (node, allocated)
    return tuple(steps)


def _after_sibling(project: str, position: int, previous: UnitNode, node: UnitNode,
                   ratios: dict[str, float]) -> QueueStep:
    """The first level where the two projects' units differ, and what their ratios say there."""

    def ratio(unit: UnitNode) -> float | None:
        value = ratios.get(unit.name, math.inf)
        return None if math.isinf(value) else value

    for ahead, here in zip(previous.path, node.path, strict=False):
        if ahead is here:
            continue
        ahead_ratio, here_ratio = ratio(ahead), ratio(here)
        if ahead_ratio is None and here_ratio is None:
            kind = QUEUE_NEITHER_ALLOCATED
        elif here_ratio is None:
            kind = QUEUE_NO_ALLOCATION
        elif ahead_ratio is None:
            kind = QUEUE_AHEAD_NO_ALLOCATION
        elif ahead_ratio < here_ratio:
            kind = QUEUE_LESS_SERVED
        elif ahead_ratio == here_ratio:
            kind = QUEUE_EQUAL_RATIOS
        else:
            kind = QUEUE_CHARGED
        return QueueStep(project, position, kind, ahead.name, here.name, ahead_ratio, here_ratio)
    return QueueStep(project, position, QUEUE_SAME_UNITS)


def share_of_cluster(units: tuple[Unit, ...]) -> dict[str, float]:
    """Unit -> product of its shares down the tree (0..1); 0 where any share on the path is missing."""
    by_name = {unit.name: unit for unit in units}
    result: dict[str, float] = {}

    def share(name: str) -> float:
        if name not in result:
            unit = by_name[name]
            own = (unit.share or 0.0) / 100
            result[name] = own * (share(unit.parent) if unit.parent in by_name else 1.0)
        return result[name]

    for unit in units:
        share(unit.name)
    return result

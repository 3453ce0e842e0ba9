"""Fractional-GPU packing: which node and which GPU a GPU-sharing task gets.

Pure: no Django, no clock, no randomness of its own. Every policy breaks ties
between equally scored nodes by node order (the first node wins), as the
published FGD simulator does (its scheduler picks the smallest node name, and
names carry a seeded random prefix: shuffle the node list to get the same).
Only the ``random`` policy draws, from a ``random.Random``-like object the
caller passes in.

Vocabulary (units as in the Alibaba openb trace):

- a **task** asks for ``cpu_milli``, ``memory_mib`` and ``num_gpu`` GPUs of
  ``gpu_milli`` each. A 1-GPU task with ``gpu_milli`` < 1000 *shares* one GPU
  with others (the milli-GPUs on one GPU never exceed 1000); ``num_gpu`` > 1
  takes whole, fully free GPUs. ``gpu_models`` (empty = any) restricts the
  GPU model.
- a **node**'s free state: free CPU milli, free memory MiB, free milli-GPU of
  each GPU, and its GPU model.
- the **target workload**: the task shapes the cluster expects and how often
  each was seen (``TargetWorkload.from_tasks``).

Policies (``POLICIES``):

- ``random``: a uniformly random feasible node, a random GPU that fits.
- ``bestfit``: the BestFit baseline of Weng et al., "Beware of Fragmentation:
  Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent"
  (USENIX ATC '23): the node with the least weighted remaining resources,
  ``0.5 * (cpu_free - cpu_req) / 128 cores + 0.5 * (gpu_free - gpu_req) / 8 GPUs``,
  scored as an integer 0..100 like the published simulator (equal integers
  tie), best-fit GPU inside the node.
- ``fgd``: Fragmentation Gradient Descent from the same paper. A node's
  *fragmentation* is the milli-GPU that the tasks of the target workload
  could not use, weighted by each task shape's popularity; FGD puts a task
  where that expected fragmentation grows the least (node and GPU), scored
  like the published simulator (``int(100 * sigmoid(-growth / 1000))``).
- ``allot``: ours; see ``AllotPolicy``.

``Packer`` keeps a cluster's free state and decides one task at a time. It
caches each node's score per task shape and re-scores only the nodes that
changed since the shape was last seen, and the fragmentation measures are
memoised per (GPU model, CPU bucket, sorted free GPUs); so a stream of tasks
costs O(changed nodes) per decision rather than O(nodes x workload shapes).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

WHOLE_GPU_MILLI = 1000

# BestFit's normalisers (the simulator's MaxSpecCpu and MaxSpecGpu).
BESTFIT_CPU_SPEC_MILLI = 128_000
BESTFIT_GPU_SPEC_MILLI = 8_000

# FGD takes the most popular task shapes covering this share of the tasks.
FGD_DEFAULT_COVERAGE = 0.95

POLICIES = ("allot", "fgd", "bestfit", "random")

_INFEASIBLE = float("-inf")


class TieBreaker(Protocol):
    """What the ``random`` policy needs from a random source: ``random.Random`` fits."""

    def randrange(self, stop: int) -> int: ...


# ------------------------------------------------------------------- data


@dataclass(frozen=True)
class Task:
    """One task's request. ``gpu_milli`` is per GPU."""

    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_milli: int = 0
    # Allowed GPU models; empty means any.
    gpu_models: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError(f"negative CPU or memory request: {self}")
        if self.num_gpu < 0:
            raise ValueError(f"num_gpu must be >= 0, got {self.num_gpu}")
        if self.num_gpu == 0 and self.gpu_milli != 0:
            raise ValueError(f"gpu_milli={self.gpu_milli} without GPUs")
        if self.num_gpu > 0 and not 0 < self.gpu_milli <= WHOLE_GPU_MILLI:
            raise ValueError(f"gpu_milli must be in 1..1000, got {self.gpu_milli}")
        if self.num_gpu > 1 and self.gpu_milli != WHOLE_GPU_MILLI:
            raise ValueError("a multi-GPU task takes whole GPUs (gpu_milli=1000)")
        if not isinstance(self.gpu_models, frozenset):
            object.__setattr__(self, "gpu_models", frozenset(self.gpu_models))

    @property
    def shares_gpu(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < WHOLE_GPU_MILLI

    @property
    def gpu_request_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    def allows(self, model: str) -> bool:
        return self.num_gpu == 0 or not self.gpu_models or model in self.gpu_models


@dataclass(frozen=True)
class NodeState:
    """A node's free resources."""

    name: str
    model: str
    cpu_milli: int
    memory_mib: int
    # Free milli-GPU of each GPU, by GPU index.
    gpu_free: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.gpu_free, tuple):
            object.__setattr__(self, "gpu_free", tuple(self.gpu_free))
        if any(not 0 <= f <= WHOLE_GPU_MILLI for f in self.gpu_free):
            raise ValueError(f"GPU free milli must be in 0..1000: {self.gpu_free}")
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError(f"negative free CPU or memory on {self.name}")

    def after(self, task: Task, gpus: Sequence[int]) -> NodeState:
        """The state once ``task`` runs here on ``gpus`` (no checks)."""
        free = list(self.gpu_free)
        for g in gpus:
            free[g] -= task.gpu_milli
        return NodeState(
            self.name,
            self.model,
            self.cpu_milli - task.cpu_milli,
            self.memory_mib - task.memory_mib,
            tuple(free),
        )


@dataclass(frozen=True)
class Placement:
    node: int  # index in the packer's node list
    node_name: str
    gpus: tuple[int, ...]


# ------------------------------------------------------------ fit and GPUs


def best_fit_gpu(gpu_free: Sequence[int], milli: int) -> int | None:
    """The GPU with the least free milli that still holds ``milli``.

    Ties go to the lowest index (SCENARIOS P1).
    """
    best = None
    best_free = WHOLE_GPU_MILLI + 1
    for g, free in enumerate(gpu_free):
        if milli <= free < best_free:
            best, best_free = g, free
    return best


def whole_gpus(gpu_free: Sequence[int], count: int) -> tuple[int, ...] | None:
    """The first ``count`` fully free GPUs, or None."""
    chosen = tuple(g for g, free in enumerate(gpu_free) if free == WHOLE_GPU_MILLI)
    return chosen[:count] if len(chosen) >= count else None


def _resources_fit(node: NodeState, task: Task) -> bool:
    return task.cpu_milli <= node.cpu_milli and task.memory_mib <= node.memory_mib and task.allows(node.model)


def choose_gpus(node: NodeState, task: Task) -> tuple[int, ...] | None:
    """Best-fit GPUs for ``task`` on ``node``, or None if it does not fit."""
    if not _resources_fit(node, task):
        return None
    if task.num_gpu == 0:
        return ()
    if task.shares_gpu:
        g = best_fit_gpu(node.gpu_free, task.gpu_milli)
        return None if g is None else (g,)
    return whole_gpus(node.gpu_free, task.num_gpu)


def fits(node: NodeState, task: Task) -> bool:
    return choose_gpus(node, task) is not None


# ------------------------------------------------------- target workload


@dataclass(frozen=True, order=True)
class TaskShape:
    """What FGD distinguishes between tasks (memory does not enter it)."""

    cpu_milli: int
    gpu_milli: int
    num_gpu: int
    gpu_models: tuple[str, ...] = ()  # sorted; empty = any model

    @classmethod
    def of(cls, task: Task) -> TaskShape:
        models = tuple(sorted(task.gpu_models)) if task.num_gpu else ()
        return cls(task.cpu_milli, task.gpu_milli, task.num_gpu, models)


@dataclass(frozen=True)
class TargetWorkload:
    """The tasks a cluster expects: each distinct request and how often it was seen."""

    counts: tuple[tuple[Task, int], ...]

    @classmethod
    def from_tasks(cls, tasks: Iterable[Task]) -> TargetWorkload:
        return cls.from_counts(Counter(tasks))

    @classmethod
    def from_counts(cls, counts: Mapping[Task, int]) -> TargetWorkload:
        """Each distinct request and how often it was seen (counts > 0)."""
        ordered = sorted(((task, n) for task, n in counts.items() if n > 0), key=lambda kv: _task_key(kv[0]))
        return cls(tuple(ordered))

    @property
    def total(self) -> int:
        return sum(n for _, n in self.counts)

    def typical(self, coverage: float = FGD_DEFAULT_COVERAGE) -> tuple[tuple[TaskShape, int], ...]:
        """FGD's target workload: the most popular shapes covering ``coverage``.

        As the FGD simulator does: count tasks per shape, take shapes in
        decreasing popularity (ties: larger shape first) until their tasks
        reach ``coverage`` of all. Returns (shape, count) pairs.
        """
        per_shape = Counter()
        for task, n in self.counts:
            per_shape[TaskShape.of(task)] += n
        total = sum(per_shape.values())
        ranked = sorted(per_shape.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        chosen: list[tuple[TaskShape, int]] = []
        covered = 0
        for shape, n in ranked:
            if covered >= coverage * total:
                break
            chosen.append((shape, n))
            covered += n
        return tuple(chosen)


def _task_key(task: Task) -> tuple:
    return (task.num_gpu, task.gpu_milli, task.cpu_milli, task.memory_mib, sorted(task.gpu_models))


# ------------------------------------------------------------ fragmentation


class Fragmentation:
    """FGD's expected fragmentation of a node, in milli-GPU x weight.

    For each task shape of the target workload, the free milli-GPU on the
    node that a task of that shape could not use: all of it when the task
    cannot run there at all (CPU-only shape, wrong GPU model, too little
    CPU, not enough GPUs with room), otherwise the free milli of the GPUs
    too small for it. Multiplied by the shape's weight and summed. Memory
    does not enter (as in the paper).

    Weights are the shapes' popularities (FGD) or their integer counts
    (exact arithmetic, so equal growths tie exactly). Values are memoised
    per (model, CPU bucket, sorted free GPUs): nodes of one kind in one
    state share an entry.
    """

    def __init__(self, shapes: Iterable[tuple[TaskShape, float]]):
        self.shapes = tuple(shapes)
        self._tables: dict[str, tuple[float, tuple, tuple[int, ...]]] = {}
        self._memo: dict[tuple, float] = {}

    def _table(self, model: str) -> tuple[float, tuple, tuple[int, ...]]:
        table = self._tables.get(model)
        if table is None:
            blocked = 0  # shapes that can never use this node's GPUs
            usable = []
            for shape, weight in self.shapes:
                if shape.num_gpu == 0 or (shape.gpu_models and model not in shape.gpu_models):
                    blocked += weight
                else:
                    usable.append((weight, shape.cpu_milli, shape.gpu_milli, shape.num_gpu))
            thresholds = tuple(sorted({cpu for _, cpu, _, _ in usable}))
            table = (blocked, tuple(usable), thresholds)
            self._tables[model] = table
        return table

    def of(self, model: str, cpu_milli: int, gpu_free: Sequence[int]) -> float:
        blocked, usable, thresholds = self._table(model)
        free = tuple(sorted(gpu_free))
        key = (model, bisect_right(thresholds, cpu_milli), free)
        value = self._memo.get(key)
        if value is not None:
            return value
        total_free = sum(free)
        value = blocked * total_free
        if total_free:
            for weight, cpu, milli, count in usable:
                if cpu > cpu_milli:
                    value += weight * total_free
                    continue
                roomy = sum(1 for f in free if f >= milli)
                if roomy < count:
                    value += weight * total_free
                else:
                    value += weight * sum(f for f in free if f < milli)
        self._memo[key] = value
        return value


def _sigmoid_score(growth_milli: float) -> int:
    """The simulator's integer node score for a fragmentation growth."""
    return int(100.0 / (1.0 + math.exp(growth_milli / 1000.0)))


def eventual_waste(workload: TargetWorkload, dead_share: float) -> tuple[tuple[float, ...], int]:
    """Expected milli a GPU with ``f`` free will never give out, for f in 0..1000.

    A hole is filled by later tasks that fit it, drawn with the workload's
    popularity (whole-GPU tasks count once per GPU): ``W[f]`` is the mean of
    ``W[f - m]`` over the sizes ``m`` that fit. Sizes so rare that together
    they make at most ``dead_share`` of the sharing tasks are left out: there
    are far more small holes than such tasks (every 810-milli task leaves a
    190 hole), so a hole only they could fill counts as lost. Returns
    (W, smallest size counted).
    """
    live, smallest = _live_sizes(workload, dead_share)
    waste = [0.0] * (WHOLE_GPU_MILLI + 1)
    for f in range(1, WHOLE_GPU_MILLI + 1):
        waste[f] = _waste_at(f, live, waste)
    return tuple(waste), smallest


def _live_sizes(workload: TargetWorkload, dead_share: float) -> tuple[list[tuple[int, int]], int]:
    """(size, count) of the sizes that fill holes, ascending, and the smallest of them (see `eventual_waste`)."""
    sizes: Counter[int] = Counter()
    share_sizes: Counter[int] = Counter()
    for task, n in workload.counts:
        if task.shares_gpu:
            sizes[task.gpu_milli] += n
            share_sizes[task.gpu_milli] += n
        elif task.num_gpu:
            sizes[WHOLE_GPU_MILLI] += n * task.num_gpu
    shared = sum(share_sizes.values())
    smallest = WHOLE_GPU_MILLI
    below = 0
    for m in sorted(share_sizes):
        if below > dead_share * shared:
            break
        smallest = m
        below += share_sizes[m]
    return sorted((m, n) for m, n in sizes.items() if m >= smallest), smallest


def _waste_at(f: int, live: list[tuple[int, int]], waste) -> float:
    total = weighted = 0.0
    for m, n in live:
        if m > f:
            break
        total += n
        weighted += n * waste[f - m]
    return weighted / total if total else float(f)


class LazyWaste:
    """`eventual_waste`'s table, the same values, computed only for the free amounts asked and those they need.

    A tick asks for a handful; sizes on a grid (multiples of 50 milli, say)
    reach only a few dozen amounts, where the whole table costs a thousand.
    """

    def __init__(self, workload: TargetWorkload, dead_share: float):
        self.live, self.smallest = _live_sizes(workload, dead_share)
        self._known: dict[int, float] = {0: 0.0}

    def __getitem__(self, f: int) -> float:
        known = self._known
        value = known.get(f)
        if value is not None:
            return value
        live = self.live
        stack = [f]
        while stack:
            x = stack[-1]
            if x in known:
                stack.pop()
                continue
            needed = [x - m for m, _ in live if m <= x and x - m not in known]
            if needed:
                stack.extend(needed)
                continue
            known[x] = _waste_at(x, live, known)
            stack.pop()
        return known[f]


# ------------------------------------------------------------------ policies


class _Policy:
    """Scores a node for a task; higher is better. None = does not fit.

    ``score`` returns (score, gpus); gpus None means "let ``gpus_at_commit``
    choose".
    """

    name = ""
    needs_rng = False

    def score(self, packer: Packer, i: int, task: Task) -> tuple[float, tuple[int, ...] | None] | None:
        raise NotImplementedError

    def gpus_at_commit(self, packer: Packer, i: int, task: Task, rng: TieBreaker | None) -> tuple[int, ...]:
        return packer._best_fit_gpus(i, task)


class RandomPolicy(_Policy):
    """Any feasible node, any GPU that fits (both uniformly at random)."""

    name = "random"
    needs_rng = True

    def score(self, packer, i, task):
        return (0.0, None) if packer._fits(i, task) else None

    def gpus_at_commit(self, packer, i, task, rng):
        if not task.shares_gpu:
            return packer._best_fit_gpus(i, task)
        options = [g for g, f in enumerate(packer.gpu_free[i]) if f >= task.gpu_milli]
        return (options[rng.randrange(len(options))],)


class BestFitPolicy(_Policy):
    """The published BestFit baseline: least weighted remaining resources."""

    name = "bestfit"

    def score(self, packer, i, task):
        if not packer._fits(i, task):
            return None
        left = (
            0.5 * (packer.cpu_free[i] - task.cpu_milli) / BESTFIT_CPU_SPEC_MILLI
            + 0.5 * (packer.gpu_total_free[i] - task.gpu_request_milli) / BESTFIT_GPU_SPEC_MILLI
        )
        # Integer 0..100 like the simulator, so nearly-equal nodes tie.
        return float(int((1.0 - left) * 100)), None


class FgdPolicy(_Policy):
    """Fragmentation Gradient Descent, scored as the published simulator.

    Target workload: the most popular task shapes covering 95 % of the
    tasks, weighted by popularity. The node score is
    ``int(100 * sigmoid(-growth / 1000))`` for the growth of the node's
    expected fragmentation; a shared task goes to the GPU with the best such
    score (lowest index on ties), whole GPUs to the first free ones. Equal
    integer scores tie (and go to the first node).
    """

    name = "fgd"

    def __init__(self, workload: TargetWorkload, coverage: float = FGD_DEFAULT_COVERAGE):
        typical = workload.typical(coverage)
        covered = sum(n for _, n in typical)
        self.frag = Fragmentation((shape, n / covered) for shape, n in typical)

    def score(self, packer, i, task):
        if not packer._fits(i, task):
            return None
        model = packer.models[i]
        free = packer.gpu_free[i]
        cpu_after = packer.cpu_free[i] - task.cpu_milli
        before = self.frag.of(model, packer.cpu_free[i], free)
        if task.shares_gpu:
            best, best_gpu = -1, -1
            seen: dict[int, int] = {}
            for g, f in enumerate(free):
                if f < task.gpu_milli:
                    continue
                s = seen.get(f)
                if s is None:
                    after = list(free)
                    after[g] = f - task.gpu_milli
                    s = _sigmoid_score(self.frag.of(model, cpu_after, after) - before)
                    seen[f] = s
                if s > best:
                    best, best_gpu = s, g
            return float(best), (best_gpu,)
        gpus = whole_gpus(free, task.num_gpu) if task.num_gpu else ()
        after = list(free)
        for g in gpus:
            after[g] = 0
        return float(_sigmoid_score(self.frag.of(model, cpu_after, after) - before)), gpus


class _Scarcity:
    """How much a node's free state can host that few nodes of the cluster can.

    For each GPU task request of the workload, ``weight = popularity among
    GPU tasks x milli-GPU x (nodes / nodes able to host it when the cluster is as
    given - 1)``: zero for a request every node can host, large for one only
    a few can (a 120-core 8-GPU task that fits only the 128-core nodes, a
    model-constrained task). A node's value is the sum of the weights of the
    requests it can host now; memoised like ``Fragmentation``.
    """

    def __init__(self, workload: TargetWorkload, nodes: Sequence[NodeState]):
        total = sum(n for task, n in workload.counts if task.num_gpu)
        n_nodes = len(nodes)
        self.requests = []
        for task, n in workload.counts:
            if not task.num_gpu:
                continue
            able = sum(1 for node in nodes if _fits_empty_like(node, task))
            if 0 < able < n_nodes:
                weight = n / total * task.gpu_request_milli * (n_nodes / able - 1)
                self.requests.append((weight, task))
        self._tables: dict[str, tuple] = {}
        self._memo: dict[tuple, float] = {}

    def _table(self, model: str) -> tuple:
        table = self._tables.get(model)
        if table is None:
            usable = tuple(
                (w, t.cpu_milli, t.memory_mib, t.gpu_milli, t.num_gpu, t.shares_gpu)
                for w, t in self.requests
                if t.allows(model)
            )
            cpus = tuple(sorted({u[1] for u in usable}))
            mems = tuple(sorted({u[2] for u in usable}))
            table = self._tables[model] = (usable, cpus, mems)
        return table

    def of(self, model: str, cpu_milli: int, memory_mib: int, gpu_free: Sequence[int]) -> float:
        usable, cpus, mems = self._table(model)
        if not usable:
            return 0.0
        free = tuple(sorted(gpu_free))
        key = (model, bisect_right(cpus, cpu_milli), bisect_right(mems, memory_mib), free)
        value = self._memo.get(key)
        if value is None:
            most = free[-1] if free else 0
            whole = sum(1 for f in free if f == WHOLE_GPU_MILLI)
            value = 0.0
            for weight, cpu, mem, milli, count, shares in usable:
                if cpu <= cpu_milli and mem <= memory_mib and (most >= milli if shares else whole >= count):
                    value += weight
            self._memo[key] = value
        return value


def _fits_empty_like(node: NodeState, task: Task) -> bool:
    # Capability, not current room: GPU count instead of free GPUs.
    return (
        task.cpu_milli <= node.cpu_milli
        and task.memory_mib <= node.memory_mib
        and task.allows(node.model)
        and task.num_gpu <= len(node.gpu_free)
    )


class AllotPolicy(_Policy):
    """Ours: minimise the capacity a placement will cost later.

    FGD measures, for one node in isolation, what the next task could not
    use. Replaying the openb default trace (seed 42) shows where FGD's 4.6 %
    unallocated capacity sits at 130 % load: 2.6 % in the 190-milli holes
    next to 810-milli tasks (only the rare tasks of 50-160 milli fit there;
    no placement avoids most of them), 0.9 % in other holes below 220
    milli, 0.9 % on nodes whose CPU or memory ran out first, 0.15 % in
    larger holes. Allot leaves 2.9 / 0.7 / 0.14 / 0.04 % there. A
    placement's cost is the growth of four measures, all in milli-GPU
    (lower is better):

    1. **eventual waste** of the GPU: ``eventual_waste`` gives, for a GPU
       with ``f`` milli free, what it is expected never to give out if the
       workload keeps arriving; holes that only rare tiny tasks fit count as
       lost. It looks past FGD's one-task horizon (470 + 470 leaves a dead
       60; 470 + 320 leaves a 210 that a 160 may still take).
    2. **CPU stranding** of the node: free GPUs the node's CPU could not
       feed, ``max(0, free_gpu - free_cpu / rho)``, with ``rho`` the upper
       quartile of the workload's CPU per milli-GPU (a margin, so a node
       keeps CPU for the heavier three quarters of tasks). It sends
       CPU-light tasks to CPU-poor nodes and CPU-only tasks where CPU is
       spare.
    3. **scarcity**: losing the room for a request that few nodes can host
       (``_Scarcity``) costs more than losing one that any node can host;
       this keeps the big-CPU 8-GPU nodes and model-constrained capacity.
    4. **FGD's fragmentation** (exact counts, 30 %), for what the others do
       not see: the node-level shape of the free GPUs.

    Deterministic: scores are rounded to 1e-6 milli so that floating-point
    noise never decides; ties go to the first node, then the lowest GPU.
    """

    name = "allot"

    FGD_WEIGHT = 0.3
    WASTE_WEIGHT = 1.0
    STRAND_WEIGHT = 0.5
    SCARCITY_WEIGHT = 0.5
    # Sizes that together make at most this share of sharing tasks cannot
    # be counted on to fill holes.
    DEAD_SHARE = 0.05
    # Quantile of the GPU tasks' CPU per milli-GPU that a free GPU keeps.
    CPU_RESERVE_QUANTILE = 0.75

    def __init__(self, workload: TargetWorkload, nodes: Sequence[NodeState]):
        typical = workload.typical(FGD_DEFAULT_COVERAGE)
        self.covered = sum(n for _, n in typical) or 1
        self.frag = Fragmentation(typical)  # integer weights: exact ties
        self.waste, self.smallest_live_milli = eventual_waste(workload, self.DEAD_SHARE)
        self.scarcity = _Scarcity(workload, nodes)
        self.cpu_per_gpu_milli = _quantile_cpu_per_gpu_milli(workload, self.CPU_RESERVE_QUANTILE)

    def _stranded(self, free_gpu_milli: int, cpu_milli: int) -> float:
        if free_gpu_milli == 0 or self.cpu_per_gpu_milli == 0:
            return 0.0
        return max(0.0, free_gpu_milli - cpu_milli / self.cpu_per_gpu_milli)

    def score(self, packer, i, task):
        if not packer._fits(i, task):
            return None
        model = packer.models[i]
        free = packer.gpu_free[i]
        cpu, mem = packer.cpu_free[i], packer.mem_free[i]
        cpu_after, mem_after = cpu - task.cpu_milli, mem - task.memory_mib
        total_free = packer.gpu_total_free[i]
        strand = self.STRAND_WEIGHT * (
            self._stranded(total_free - task.gpu_request_milli, cpu_after) - self._stranded(total_free, cpu)
        )
        frag_before = self.frag.of(model, cpu, free)
        value_before = self.scarcity.of(model, cpu, mem, free)
        waste = self.waste

        def cost(after: list[int], waste_growth: float) -> float:
            frag = self.FGD_WEIGHT * (self.frag.of(model, cpu_after, after) - frag_before) / self.covered
            lost = self.SCARCITY_WEIGHT * (value_before - self.scarcity.of(model, cpu_after, mem_after, after))
            return round(strand + self.WASTE_WEIGHT * waste_growth + frag + lost, 6)

        if task.shares_gpu:
            best, best_gpu = None, -1
            seen: dict[int, float] = {}
            for g, f in enumerate(free):
                if f < task.gpu_milli:
                    continue
                c = seen.get(f)
                if c is None:
                    after = list(free)
                    after[g] = f - task.gpu_milli
                    c = seen[f] = cost(after, waste[f - task.gpu_milli] - waste[f])
                if best is None or c < best:
                    best, best_gpu = c, g
            return -best, (best_gpu,)
        gpus = whole_gpus(free, task.num_gpu) if task.num_gpu else ()
        after = list(free)
        for g in gpus:
            after[g] = 0
        return -cost(after, -len(gpus) * waste[WHOLE_GPU_MILLI]), gpus


def _quantile_cpu_per_gpu_milli(workload: TargetWorkload, q: float) -> float:
    ratios = sorted((t.cpu_milli / t.gpu_request_milli, n) for t, n in workload.counts if t.num_gpu)
    total = sum(n for _, n in ratios)
    if not total:
        return 0.0
    rank = int(q * total)
    seen = 0
    for ratio, n in ratios:
        seen += n
        if seen > rank:
            return ratio
    return ratios[-1][0]


def make_policy(name: str, workload: TargetWorkload | None = None, nodes: Sequence[NodeState] = ()) -> _Policy:
    if name == "random":
        return RandomPolicy()
    if name == "bestfit":
        return BestFitPolicy()
    if name in ("fgd", "allot"):
        if workload is None:
            raise ValueError(f"policy {name!r} needs the target workload")
        return FgdPolicy(workload) if name == "fgd" else AllotPolicy(workload, nodes)
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")


# ------------------------------------------------------------------- packer


class _ShapeCache:
    __slots__ = ("scores", "gpus", "seen_at")

    def __init__(self, n: int):
        self.scores = [_INFEASIBLE] * n
        self.gpus: list[tuple[int, ...] | None] = [None] * n
        self.seen_at = -1


class Packer:
    """A cluster's free state and one policy; decides tasks one at a time.

    ``decide`` never changes the state; ``commit`` applies a placement;
    ``place`` does both. Ties between equally scored nodes go to the lowest
    node index; only the ``random`` policy uses ``rng``. ``inventory`` is
    what ``allot`` judges scarcity against: the cluster's nodes as built
    (free = capacity); it defaults to ``nodes``.
    """

    def __init__(
        self,
        nodes: Sequence[NodeState],
        *,
        policy: str | _Policy = "allot",
        workload: TargetWorkload | None = None,
        rng: TieBreaker | None = None,
        inventory: Sequence[NodeState] | None = None,
    ):
        if isinstance(policy, _Policy):
            self.policy = policy
        else:
            self.policy = make_policy(policy, workload, nodes if inventory is None else inventory)
        if self.policy.needs_rng and rng is None:
            raise ValueError(f"policy {self.policy.name!r} needs a random source (rng)")
        self.rng = rng
        self.names = [n.name for n in nodes]
        self.models = [n.model for n in nodes]
        self.cpu_free = [n.cpu_milli for n in nodes]
        self.mem_free = [n.memory_mib for n in nodes]
        self.gpu_free = [list(n.gpu_free) for n in nodes]
        self.gpu_total_free = [sum(n.gpu_free) for n in nodes]
        self.gpu_max_free = [max(n.gpu_free, default=0) for n in nodes]
        self.gpu_whole_free = [sum(1 for f in n.gpu_free if f == WHOLE_GPU_MILLI) for n in nodes]
        self.gpu_capacity_milli = sum(WHOLE_GPU_MILLI * len(n.gpu_free) for n in nodes)
        self.used_gpu_milli = sum(WHOLE_GPU_MILLI * len(n.gpu_free) - sum(n.gpu_free) for n in nodes)
        # Node index changed by each commit, in order: what to re-score.
        self._changes: list[int] = []
        self._cache: dict[Task, _ShapeCache] = {}

    # -- state

    def __len__(self) -> int:
        return len(self.names)

    def node(self, i: int) -> NodeState:
        return NodeState(self.names[i], self.models[i], self.cpu_free[i], self.mem_free[i], tuple(self.gpu_free[i]))

    def nodes(self) -> list[NodeState]:
        return [self.node(i) for i in range(len(self))]

    def _fits(self, i: int, task: Task) -> bool:
        if task.cpu_milli > self.cpu_free[i] or task.memory_mib > self.mem_free[i]:
            return False
        if task.num_gpu == 0:
            return True
        if task.gpu_models and self.models[i] not in task.gpu_models:
            return False
        if task.shares_gpu:
            return self.gpu_max_free[i] >= task.gpu_milli
        return self.gpu_whole_free[i] >= task.num_gpu

    def _best_fit_gpus(self, i: int, task: Task) -> tuple[int, ...]:
        if task.num_gpu == 0:
            return ()
        if task.shares_gpu:
            return (best_fit_gpu(self.gpu_free[i], task.gpu_milli),)
        return whole_gpus(self.gpu_free[i], task.num_gpu)

    # -- decisions

    def _scores(self, task: Task) -> _ShapeCache:
        cache = self._cache.get(task)
        now = len(self._changes)
        n = len(self.names)
        if cache is None:
            cache = self._cache[task] = _ShapeCache(n)
        if cache.seen_at == now:
            return cache
        if cache.seen_at < 0 or now - cache.seen_at >= n:
            stale: Iterable[int] = range(n)
        else:
            stale = set(self._changes[cache.seen_at :])
        score = self.policy.score
        scores, gpus = cache.scores, cache.gpus
        for i in stale:
            result = score(self, i, task)
            if result is None:
                scores[i], gpus[i] = _INFEASIBLE, None
            else:
                scores[i], gpus[i] = result
        cache.seen_at = now
        return cache

    def decide(self, task: Task) -> Placement | None:
        """Where ``task`` would go now, or None if no node can take it."""
        cache = self._scores(task)
        scores = cache.scores
        best = max(scores, default=_INFEASIBLE)
        if best == _INFEASIBLE:
            return None
        if self.policy.needs_rng:
            ties = [j for j, s in enumerate(scores) if s == best]
            i = ties[self.rng.randrange(len(ties))] if len(ties) > 1 else ties[0]
        else:
            i = scores.index(best)
        gpus = cache.gpus[i]
        if gpus is None:
            gpus = self.policy.gpus_at_commit(self, i, task, self.rng)
        return Placement(i, self.names[i], tuple(gpus))

    def commit(self, task: Task, placement: Placement) -> None:
        i = placement.node
        if len(placement.gpus) != task.num_gpu or len(set(placement.gpus)) != task.num_gpu:
            raise ValueError(f"{task} needs {task.num_gpu} distinct GPUs, placement has {placement.gpus}")
        if not self._fits(i, task):
            raise ValueError(f"{task} does not fit on {self.names[i]}")
        free = self.gpu_free[i]
        for g in placement.gpus:
            if free[g] < task.gpu_milli or (not task.shares_gpu and free[g] != WHOLE_GPU_MILLI):
                raise ValueError(f"GPU {g} of {self.names[i]} cannot take {task}")
        for g in placement.gpus:
            free[g] -= task.gpu_milli
        self.cpu_free[i] -= task.cpu_milli
        self.mem_free[i] -= task.memory_mib
        self.gpu_total_free[i] -= task.gpu_request_milli
        self.gpu_max_free[i] = max(free, default=0)
        self.gpu_whole_free[i] = sum(1 for f in free if f == WHOLE_GPU_MILLI)
        self.used_gpu_milli += task.gpu_request_milli
        self._changes.append(i)

    def place(self, task: Task) -> Placement | None:
        placement = self.decide(task)
        if placement is not None:
            self.commit(task, placement)
        return placement


def choose(
    nodes: Sequence[NodeState],
    task: Task,
    *,
    policy: str = "allot",
    workload: TargetWorkload | None = None,
    rng: TieBreaker | None = None,
    inventory: Sequence[NodeState] | None = None,
) -> Placement | None:
    """One decision on a snapshot of free states (no caching across calls).

    Gives what ``Packer.decide`` gives for the same free states, workload
    and inventory.
    """
    return Packer(nodes, policy=policy, workload=workload, rng=rng, inventory=inventory).decide(task)


# ------------------------------------------------------------ the live engine


class ShareCost:
    """What putting one GPU-sharing task on one GPU of a node costs later, for the live engine.

    ``AllotPolicy``'s measures, in milli-GPU, lower is better, with its
    weights: the growth of the GPU's **eventual waste** (the milli it is
    expected never to give out as the workload keeps arriving), of the
    node's **CPU stranding** (free GPUs its CPU could not feed) and of its
    **FGD fragmentation** (the node-level shape of its free GPUs). The
    fourth measure, scarcity, is left out: it is judged per request shape
    against the whole inventory, which a tick cannot afford, and the
    engine's pools already keep GPU types apart.

    The engine builds one per tick from the demand it sees (its pending and
    running jobs, as tasks) and asks it only to rank GPUs its topology rules
    allow (see ``placement._shared_placement``).
    """

    def __init__(self, workload: TargetWorkload):
        typical = workload.typical(FGD_DEFAULT_COVERAGE)
        self.covered = sum(n for _, n in typical) or 1
        self.frag = Fragmentation(typical)
        self.waste = LazyWaste(workload, AllotPolicy.DEAD_SHARE)
        self.cpu_per_gpu_milli = _quantile_cpu_per_gpu_milli(workload, AllotPolicy.CPU_RESERVE_QUANTILE)

    def _stranded(self, free_gpu_milli: int, cpu_milli: int) -> float:
        if free_gpu_milli == 0 or self.cpu_per_gpu_milli == 0:
            return 0.0
        return max(0.0, free_gpu_milli - cpu_milli / self.cpu_per_gpu_milli)

    def cost(self, model: str, cpu_milli: int, gpu_free: Sequence[int], gpu: int, task: Task) -> float:
        """The cost of ``task`` (a 1-GPU fraction) on GPU ``gpu`` of a node with ``gpu_free`` and ``cpu_milli`` free."""
        milli = task.gpu_milli
        free = gpu_free[gpu]
        if free < milli:
            raise ValueError(f"GPU {gpu} has {free} milli free, the task needs {milli}")
        after = list(gpu_free)
        after[gpu] = free - milli
        cpu_after = cpu_milli - task.cpu_milli
        total = sum(gpu_free)
        strand = AllotPolicy.STRAND_WEIGHT * (
            self._stranded(total - milli, cpu_after) - self._stranded(total, cpu_milli)
        )
        frag = AllotPolicy.FGD_WEIGHT * (
            self.frag.of(model, cpu_after, after) - self.frag.of(model, cpu_milli, gpu_free)
        ) / self.covered
        waste = AllotPolicy.WASTE_WEIGHT * (self.waste[free - milli] - self.waste[free])
        return round(strand + waste + frag, 6)

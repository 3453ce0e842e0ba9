"""Rule 3: gang placement, topology-aware, best fit.

A placement is found on the working `Capacity` (optionally with GPUs that
victims would release, for rules 4 and 5) and allocated by the engine.

- Single-host jobs (no more GPUs than a host, and no per-host shape that
  splits them) go to the host with the fewest free GPUs that fits, inside a
  partly used domain if any fits (breaking an empty domain last).
- Multi-host jobs take whole hosts where the shape allows: `gpus_per_host`
  set means exactly that many on each host; unset means as few hosts as
  possible, the last being the smallest that completes the job.
- `domain` jobs go to the one domain that fits with the least left over,
  partly used (or partial, failed-tray) domains before empty ones.
- `preferred` and `any` multi-host jobs do the same, and when no single domain
  can hold them take as few domains as possible, the largest first and the
  last being the smallest that completes them (Kueue's BestFit). `any` asks
  for nothing more, but respecting topology costs it nothing.
- A 1-GPU job with `gpu_milli` < 1000 shares a GPU. Topology first: a GPU
  already shared before a whole free one (whole GPUs, hosts and domains are
  what gang jobs need), and a whole one only by host best fit (partly used
  domains and hosts first). Among the shared GPUs that fit, the one where the
  fraction costs the least later by the fragmentation-aware measures of
  `packing.ShareCost` (learnt on the openb trace, where it beats FGD),
  judged against the demand the tick sees; then the least free milli-GPU.
- A job asking for a MIG profile goes to a GPU in MIG mode (`_mig_placement`):
  an idle instance or free slices of a GPU that already runs MIG jobs first,
  then a GPU with no job on it, which may be given a new layout for the
  demand (`mig.choose_layout`). A GPU with jobs on it is never repartitioned.
- A gang never mixes GPU types and never straddles the fast lane (each pool
  is searched on its own); CPU and memory must fit on every host.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import takewhile
from operator import attrgetter
from typing import TypeVar

from . import mig as mig_geometry
from .capacity import NOTHING, Capacity, Group, HostState, MigState, Pool, Release
from .model import DOMAIN, UP, WHOLE_GPU_MILLI, PendingJob, Policy, Topology, run_shield
from .packing import ShareCost, TargetWorkload, Task


def lanes(job: PendingJob, policy: Policy) -> tuple[bool, ...]:
    """Fast-lane flags of the pools a job may use, preferred first (rule 6).

    Short allocated jobs prefer the fast lane; unallocated ones use it when
    the rest is full; other allocated jobs never do.
    """
    if not job.allocated:
        return (False, True)
    if job.min_runtime <= policy.fast_lane_max_min_runtime:
        return (True, False)
    return (False,)


def protected_for(job: PendingJob, policy: Policy) -> float:
    """How long a job can't be preempted for fairness once started (`model.run_shield`: its protection, longer once
    it has been preempted), unless it must end sooner."""
    protected = run_shield(job, policy)
    if job.max_runtime is None:
        return protected
    return min(protected, job.max_runtime)


@dataclass(frozen=True)
class JobRequest:
    """What a pending job needs, normalised for placement."""

    job_id: str
    gpus: int
    # Exact GPUs per host for multi-host shapes; None: fill hosts.
    per_host: int | None
    # < 1000 only for a 1-GPU job that shares a GPU.
    milli: int
    gpu_types: frozenset[str]
    topology: str
    cpus: int
    memory_gib: int
    # Fast-lane flags of the pools it may use, preferred first (rule 6).
    lanes: tuple[bool, ...]
    # How long it can't be preempted once started (0: unallocated).
    protected_for: float
    earmarked: tuple[str, ...]
    # A MIG profile (then `milli` is its share of the GPU, and it shares nothing).
    mig_profile: str = ""

    @classmethod
    def of(cls, job: PendingJob, policy: Policy) -> JobRequest:
        per_host = job.gpus_per_host
        if per_host is not None and per_host >= job.gpus:
            per_host = job.gpus
        return cls(
            job_id=job.id,
            gpus=job.gpus,
            per_host=per_host,
            milli=job.gpu_milli if job.gpus == 1 else WHOLE_GPU_MILLI,
            gpu_types=job.gpu_types,
            topology=job.topology,
            cpus=job.cpus,
            memory_gib=job.memory_gib,
            lanes=lanes(job, policy),
            protected_for=protected_for(job, policy),
            earmarked=job.earmarked_gpus,
            mig_profile=job.mig_profile if job.gpus == 1 else "",
        )

    @property
    def shared(self) -> bool:
        return self.milli < WHOLE_GPU_MILLI and not self.mig_profile

    def single_host(self, pool: Pool) -> bool:
        if self.per_host is not None:
            return self.per_host == self.gpus
        return self.gpus <= pool.largest_host


HostFilter = Callable[[HostState], bool]
Part = TypeVar("Part")


@dataclass(frozen=True)
class MigChoice:
    """A MIG job's instance: on which GPU, which one, and the GPU's layout once it starts."""

    state: MigState
    instance: tuple[str, int]
    layout: tuple[tuple[str, int], ...]
    # IDLE_INSTANCE, NEW_INSTANCE or NEW_LAYOUT.
    how: str


IDLE_INSTANCE = "idle instance"
NEW_INSTANCE = "new instance"
NEW_LAYOUT = "new layout"


@dataclass(frozen=True)
class Placement:
    """Where a job would start: not yet allocated."""

    # (host, GPUs there), hosts in name order.
    parts: tuple[tuple[HostState, int], ...]
    # Best-fit key; smaller is better (compared across pools).
    key: tuple
    shared_gpu: str | None = None
    mig: MigChoice | None = None

    @property
    def domains(self) -> tuple[str, ...]:
        return tuple(sorted({host.domain for host, _ in self.parts}))


def room(host: HostState, req: JobRequest, extra: Release = NOTHING) -> int:
    """How many of the job's GPUs this host could take (CPU and memory included)."""
    count = len(host.free) + extra.gpus
    cpus, memory = extra.cpus, extra.memory_gib
    if req.earmarked:
        count += len(host.earmarked.get(req.job_id, ()))
        held = host.resources_held.get(req.job_id)
        if held is not None:
            cpus, memory = cpus + held[0], memory + held[1]
    if req.cpus and host.cpus_free is not None:
        count = min(count, (host.cpus_free + cpus) * req.gpus // req.cpus)
    if req.memory_gib and host.memory_free is not None:
        count = min(count, (host.memory_free + memory) * req.gpus // req.memory_gib)
    return count


def fewest_parts(items: list[tuple[int, str, Part]], need: int) -> list[tuple[Part, int]] | None:
    """Cover `need` with as few parts as possible (Kueue's BestFit).

    `items` are (capacity, name, part). Take the largest parts while none
    completes the need alone, then the smallest part that completes it.
    """
    items = sorted((c, n, p) for c, n, p in items if c > 0)
    items.sort(key=lambda item: -item[0])  # stable: names stay ascending among equals
    if sum(c for c, _, _ in items) < need:
        return None
    chosen: list[tuple[Part, int]] = []
    start = 0
    while need > 0:
        if items[start][0] >= need:
            smallest = min(c for c, _, _ in items[start:] if c >= need)
            part = next(p for c, _, p in items[start:] if c == smallest)
            chosen.append((part, need))
            return chosen
        capacity, _, part = items[start]
        chosen.append((part, capacity))
        need -= capacity
        start += 1
    return chosen


# ---------------------------------------------------------------- in a group


def plan_in_group(group: Group, req: JobRequest, need: int, host_ok: HostFilter,
                  extra: dict[str, Release] | None = None) -> list[tuple[HostState, int]] | None:
    """Hosts of one group for `need` of the job's GPUs, or None."""
    def room_of(host: HostState) -> int:
        return room(host, req, extra.get(host.name, NOTHING) if extra else NOTHING)

    if req.per_host is not None:
        per_host = req.per_host
        fitting = [(room_of(h), h.name, h) for h in group.hosts if host_ok(h)]
        fitting = sorted(f for f in fitting if f[0] >= per_host)
        if len(fitting) * per_host < need:
            return None
        # Best fit: the hosts with the least room that hold one share each.
        return [(h, per_host) for _, _, h in fitting[: need // per_host]]
    return fewest_parts([(room_of(h), h.name, h) for h in group.hosts if host_ok(h)], need)


def group_room(group: Group, req: JobRequest, host_ok: HostFilter, extra: dict[str, Release] | None = None) -> int:
    """GPUs of the job a group could hold (whole shares for per-host shapes)."""
    total = 0
    for host in group.hosts:
        if host_ok(host):
            count = room(host, req, extra.get(host.name, NOTHING) if extra else NOTHING)
            if req.per_host is not None:
                count = req.per_host if count >= req.per_host else 0
            total += count
    return total


def plan_across_groups(groups: list[Group], req: JobRequest, host_ok: HostFilter,
                       extra: dict[str, Release] | None = None) -> list[tuple[HostState, int]] | None:
    """As few groups as possible, the largest first (for non-`domain` jobs)."""
    unit = req.per_host or 1
    items = [(group_room(g, req, host_ok, extra) // unit, g.domain, g) for g in groups]
    chosen = fewest_parts(items, req.gpus // unit)
    if chosen is None:
        return None
    parts: list[tuple[HostState, int]] = []
    for group, shares in chosen:
        plan = plan_in_group(group, req, shares * unit, host_ok, extra)
        if plan is None:
            return None
        parts += plan
    return parts


# ---------------------------------------------------------------- in a pool


def _groups_in_fit_order(pool: Pool, need: int) -> Iterator[tuple[bool, int, str]]:
    """(breaks an empty domain, free, domain) of groups with `need` free, best fit first."""
    used = pool.used[bisect_left(pool.used, (need, "")):]
    first_empty = bisect_left(pool.empty, (need, ""))
    exact = takewhile(lambda e: e[0] == need, pool.empty[first_empty:])
    for free, domain in heapq.merge(used, exact):
        yield False, free, domain
    for free, domain in pool.empty[bisect_left(pool.empty, (need + 1, "")):]:
        yield True, free, domain


def _best_host(pool: Pool, req: JobRequest, need: int, host_ok: HostFilter) -> Placement | None:
    """Host best fit: partly used domains first, then the fewest free GPUs."""
    counts = sorted(c for c in set(pool.used_by_host_free) | set(pool.empty_by_host_free) if c >= need)
    for breaks in (False, True):
        for count in counts:
            if breaks:
                entries = [e for e in pool.empty_by_host_free.get(count, ()) if e[0] != need]
            else:
                empty = pool.empty_by_host_free.get(count, ())
                exact = takewhile(lambda e: e[0] == need, empty) if count == need else ()
                entries = heapq.merge(pool.used_by_host_free.get(count, ()), exact)
            for free, domain in entries:
                for host in pool.groups[domain].hosts_by_free[count]:
                    if host_ok(host) and room(host, req) >= need:
                        return Placement(((host, need),), (0, breaks, count, free, domain, host.name))
    return None


# The search over shared GPUs is bounded: GPUs with the same free milli-GPU cost the same on the GPU itself and
# differ only by their host's terms, so at most this many of each free amount are scored, and this many in all.
SHARED_SCORED_PER_FREE = 4
SHARED_SCORED_MAX = 64
# CPU milli of a host whose CPUs are not constrained.
UNCONSTRAINED_CPU_MILLI = 1 << 40


def _shared_placement(req: JobRequest, capacity: Capacity, host_ok: HostFilter) -> Placement | None:
    """A fraction: the shared GPU where it costs the least later, else a whole one by host best fit.

    Per fast-lane side, in preference order: every pool's shared GPUs with
    room first (scored together, so GPU types compare on one scale), then a
    whole free GPU, the best host fit over the pools.
    """
    for pools in pools_for(req, capacity):
        candidates = [c for pool in pools if pool.shared for c in _shared_candidates(pool, req, host_ok, capacity)]
        if candidates:
            return _cheapest_shared(candidates, req, capacity)
        best = None
        for pool in pools:
            whole = _best_host(pool, req, 1, host_ok) if pool.free else None
            if whole is not None and (best is None or whole.key < best.key):
                best = whole
        if best is not None:
            host = best.parts[0][0]
            # A whole GPU it claimed, else a free one: a claim on a GPU others still share is no whole GPU.
            own = [gpu for gpu in host.earmarked.get(req.job_id, ()) if gpu not in host.milli_used]
            return Placement(best.parts, (1,) + best.key, shared_gpu=own[0] if own else host.free[0])
    return None


def _shared_candidates(pool: Pool, req: JobRequest, host_ok: HostFilter,
                       capacity: Capacity) -> list[tuple[int, HostState, str]]:
    """(free milli, host, GPU) of the pool's shared GPUs the fraction fits on, the fewest free first (bounded)."""
    shared = pool.shared
    index = bisect_left(shared, (req.milli, "", ""))
    candidates: list[tuple[int, HostState, str]] = []
    while index < len(shared) and len(candidates) < SHARED_SCORED_MAX:
        free_milli = shared[index][0]
        end = bisect_left(shared, (free_milli + 1, "", ""), index)
        taken = 0
        for i in range(index, end):
            _, host_name, gpu = shared[i]
            host = capacity.hosts[host_name]
            if host_ok(host) and room(host, req, Release(gpus=1)) >= 1:
                candidates.append((free_milli, host, gpu))
                taken += 1
                if taken == SHARED_SCORED_PER_FREE or len(candidates) == SHARED_SCORED_MAX:
                    break
        index = end
    return candidates


def _cheapest_shared(candidates: list[tuple[int, HostState, str]], req: JobRequest, capacity: Capacity) -> Placement:
    """The candidate of least `ShareCost` (then the least free, then by name); one alone needs no scoring."""
    if len(candidates) == 1:
        free_milli, host, gpu = candidates[0]
        return Placement(((host, 1),), (0, 0.0, free_milli, host.name, gpu), shared_gpu=gpu)
    cost = share_cost(capacity)
    task = _task(req.cpus * 1000, req.memory_gib * 1024, req.milli, req.gpu_types)
    best = None
    for free_milli, host, gpu in candidates:
        gpu_free, position = _gpu_free(host, gpu)
        cpu = UNCONSTRAINED_CPU_MILLI if host.cpus_free is None else host.cpus_free * 1000
        key = (0, cost.cost(host.gpu_type, cpu, gpu_free, position, task), free_milli, host.name, gpu)
        if best is None or key < best[0]:
            best = (key, host, gpu)
    key, host, gpu = best
    return Placement(((host, 1),), key, shared_gpu=gpu)


@lru_cache(maxsize=4096)
def _task(cpu_milli: int, memory_mib: int, milli: int, gpu_types: frozenset[str], gpus: int = 1) -> Task:
    """Packing tasks are immutable: one object per shape."""
    return Task(cpu_milli, memory_mib, gpus, milli, gpu_types)


def _gpu_free(host: HostState, gpu: str) -> tuple[list[int], int]:
    """Free milli-GPU of each GPU of the host (MIG GPUs aside), and the index of `gpu` in that list."""
    gpu_free = [WHOLE_GPU_MILLI - used for used in host.milli_used.values()]
    position = list(host.milli_used).index(gpu)
    gpu_free += [WHOLE_GPU_MILLI] * len(host.free)
    # Whole GPUs held by jobs, or earmarked for one: nothing free.
    gpu_free += [0] * max(0, host.gpu_count - len(gpu_free))
    return gpu_free, position


def share_cost(capacity: Capacity) -> ShareCost:
    """The tick's `ShareCost`, built once, from the demand it sees: every pending and running GPU job."""
    cost = capacity.share_cost
    if cost is None:
        cost = capacity.share_cost = ShareCost(demand_workload(capacity.running, capacity.pending))
    return cost


_pending_shape = attrgetter("cpus", "memory_gib", "gpus", "gpu_milli", "gpu_types", "mig_profile")
_running_shape = attrgetter("cpus", "memory_gib", "gpu_ids", "gpu_milli", "mig_profile")


def demand_workload(running, pending) -> TargetWorkload:
    """The jobs as packing tasks (MIG and CPU-only jobs aside): what the cluster expects to be asked."""
    shapes: Counter = Counter(map(_pending_shape, pending))
    shapes.update((cpus, memory, len(gpu_ids), milli, frozenset(), mig)
                  for cpus, memory, gpu_ids, milli, mig in map(_running_shape, running))
    tasks: Counter = Counter()
    for (cpus, memory, gpus, milli, types, mig), count in shapes.items():
        if gpus <= 0 or mig:
            continue
        milli = milli if gpus == 1 and 0 < milli < WHOLE_GPU_MILLI else WHOLE_GPU_MILLI
        tasks[_task(max(0, cpus) * 1000, max(0, memory) * 1024, milli, types, gpus)] += count
    return TargetWorkload.from_counts(tasks)


# ---------------------------------------------------------------- MIG


def _mig_placement(req: JobRequest, capacity: Capacity, host_ok: HostFilter) -> Placement | None:
    """The MIG GPU and instance for a MIG job, or None.

    In this order: an idle instance of its profile on a GPU that runs MIG
    jobs, then a new instance in free slices of such a GPU (`mig.place`,
    which moves nothing), then an idle instance on a GPU with no job, then a
    new layout for a GPU with no job (`mig.choose_layout` over the MIG
    demand of the tick, the job's profile included). Inside each: the
    busiest GPU (compute slices held), then the fewest idle instances
    destroyed, then the one left with the most room (`mig.room`), then the
    GPU order.
    """
    for side in req.lanes:
        best = None
        for state in capacity.mig.values():
            host = state.host
            if not state.open or host.fast_lane != side:
                continue
            if req.gpu_types and host.gpu_type not in req.gpu_types:
                continue
            if not host_ok(host) or not _cpu_memory_fit(host, req):
                continue
            found = _mig_choice(state, req.mig_profile, capacity)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        if best is not None:
            key, choice = best
            return Placement(((choice.state.host, 1),), key, mig=choice)
    return None


def _mig_choice(state: MigState, profile: str, capacity: Capacity) -> tuple[tuple, MigChoice] | None:
    idle = [instance for instance in state.idle if instance[0] == profile]
    if state.held:
        if idle:
            tier, choice = 0, MigChoice(state, idle[0], state.layout, IDLE_INSTANCE)
        else:
            start = mig_geometry.place(profile, state.layout)
            if start is None:
                return None  # never repartition a GPU with jobs on it
            layout = mig_geometry.validate_layout(state.layout + ((profile, start),))
            tier, choice = 1, MigChoice(state, (profile, start), layout, NEW_INSTANCE)
    elif idle:
        tier, choice = 2, MigChoice(state, idle[0], state.layout, IDLE_INSTANCE)
    else:
        # No job on it: the layout the waiting demand wants (idle instances it does not want go).
        layout = capacity.mig_layout_for(state.host.gpu_type, profile)
        instance = next(i for i in layout if i[0] == profile)
        tier, choice = 3, MigChoice(state, instance, layout, NEW_LAYOUT)
    busy_after = state.busy_compute + mig_geometry.PROFILES[profile].compute_slices
    room_after = mig_geometry.room(choice.layout)
    # Partitioning anew: a GPU with fewer idle instances to destroy first.
    destroyed = len(state.layout) if tier == 3 else 0
    key = (tier, -busy_after, destroyed, tuple(-r for r in room_after), state.position)
    return key, choice


def _cpu_memory_fit(host: HostState, req: JobRequest) -> bool:
    if req.cpus and host.cpus_free is not None and host.cpus_free < req.cpus:
        return False
    return not (req.memory_gib and host.memory_free is not None and host.memory_free < req.memory_gib)


def _best_group(pool: Pool, req: JobRequest, host_ok: HostFilter) -> Placement | None:
    for breaks, free, domain in _groups_in_fit_order(pool, req.gpus):
        plan = plan_in_group(pool.groups[domain], req, req.gpus, host_ok)
        if plan is not None:
            return Placement(tuple(sorted(plan, key=lambda p: p[0].name)), (1, breaks, free, domain))
    return None


def _fewest_groups(pool: Pool, req: JobRequest, host_ok: HostFilter) -> Placement | None:
    groups = [pool.groups[d] for _, d in pool.used + pool.empty]
    plan = plan_across_groups(groups, req, host_ok)
    if plan is None:
        return None
    parts = tuple(sorted(plan, key=lambda p: p[0].name))
    return Placement(parts, (2, len({h.domain for h, _ in parts})))


def _best_in_pool(pool: Pool, req: JobRequest, host_ok: HostFilter, capacity: Capacity) -> Placement | None:
    if pool.free < req.gpus:
        return None
    if req.single_host(pool):
        if pool.largest_free_host < req.gpus:
            return None
        return _best_host(pool, req, req.gpus, host_ok)
    if req.per_host is not None and req.gpus % req.per_host:
        return None
    if pool.largest_free_group >= req.gpus:
        placement = _best_group(pool, req, host_ok)
        if placement is not None:
            return placement
    if req.topology == DOMAIN:
        return None
    return _fewest_groups(pool, req, host_ok)


def spans_hosts(req: JobRequest, capacity: Capacity) -> bool:
    """Does the job need more than one host in every pool it may use?"""
    return not any(req.single_host(pool) for lane in pools_for(req, capacity) for pool in lane)


def needs_whole_domain(req: JobRequest, capacity: Capacity) -> bool:
    """Does the job need at least one whole multi-host NVLink domain (rule 5's large jobs, rule 4b's second
    clause)? More GPUs than one host holds in every pool it may use, and as many as their largest domain."""
    pools = [pool for lane in pools_for(req, capacity) for pool in lane]
    return (bool(pools) and not any(req.single_host(pool) for pool in pools)
            and req.gpus >= max(pool.largest_group for pool in pools))


def pools_for(req: JobRequest, capacity: Capacity) -> list[list[Pool]]:
    """The pools a job may use, one list per fast-lane side in preference order."""
    return pools_in(capacity, req.lanes, req.gpu_types)


def pools_in(capacity: Capacity, sides: tuple[bool, ...], gpu_types: frozenset[str]) -> list[list[Pool]]:
    """The pools of the given fast-lane sides and GPU types (any type if empty), by GPU type."""
    key = (sides, gpu_types)
    pools = capacity.pool_choices.get(key)
    if pools is None:
        pools = capacity.pool_choices[key] = [
            [p for (gpu_type, fast), p in sorted(capacity.pools.items())
             if fast == side and (not gpu_types or gpu_type in gpu_types)]
            for side in sides
        ]
    return pools


def _on_earmarks(req: JobRequest, capacity: Capacity) -> Placement | None:
    """A job that preempted others starts on the GPUs it claimed, once they are free.

    The claim is its own: another job's reservation does not keep it out.
    """
    hosts = sorted({capacity.gpu_host[g] for g in req.earmarked if g in capacity.gpu_host})
    hosts = [capacity.hosts[h] for h in hosts]
    hosts = [h for h in hosts if h.schedulable and req.job_id in h.earmarked]
    if not hosts:
        return None
    if req.shared:
        for host in hosts:
            gpu = host.earmarked[req.job_id][0]
            used = host.milli_used_for(req.job_id, gpu)
            if used is not None and WHOLE_GPU_MILLI - used < req.milli:
                continue  # its victims still hold what it needs there
            if room(host, req) >= 1:
                return Placement(((host, 1),), (), shared_gpu=gpu)
        return None
    if req.single_host(hosts[0].group.pool):
        fitting = sorted((room(h, req), h.name, h) for h in hosts if room(h, req) >= req.gpus)
        if not fitting:
            return None
        return Placement(((fitting[0][2], req.gpus),), ())
    groups = sorted({h.group for h in hosts}, key=lambda g: g.domain)
    for group in groups:
        plan = plan_in_group(group, req, req.gpus, _any_host)
        if plan is not None:
            return Placement(tuple(sorted(plan, key=lambda p: p[0].name)), ())
    if req.topology != DOMAIN and len(groups) > 1:
        # A claim across domains (a job larger than any one of them): on as few of them as it can.
        plan = plan_across_groups(groups, req, _any_host)
        if plan is not None:
            return Placement(tuple(sorted(plan, key=lambda p: p[0].name)), ())
    return None


def _any_host(host: HostState) -> bool:
    return True


def find_placement(req: JobRequest, capacity: Capacity, host_ok: HostFilter) -> Placement | None:
    """Where the job could start now, or None."""
    if req.gpus == 0:
        return _cpu_only_host(req, capacity, host_ok)
    if req.mig_profile:
        return _mig_placement(req, capacity, host_ok)
    if req.earmarked:
        placement = _on_earmarks(req, capacity)
        if placement is not None:
            return placement
    if req.shared:
        return _shared_placement(req, capacity, host_ok)
    for pools in pools_for(req, capacity):
        best = None
        for pool in pools:
            placement = _best_in_pool(pool, req, host_ok, capacity)
            if placement is not None and (best is None or placement.key < best.key):
                best = placement
        if best is not None:
            return best
    return None


def _cpu_only_host(req: JobRequest, capacity: Capacity, host_ok: HostFilter) -> Placement | None:
    """CPU-only jobs: the up host with the least CPU to spare that fits."""
    best = None
    for host in capacity.hosts.values():
        if host.state != UP or host.fast_lane not in req.lanes or not host_ok(host):
            continue
        if req.gpu_types and host.gpu_type not in req.gpu_types:
            continue
        if req.cpus and host.cpus_free is not None and host.cpus_free < req.cpus:
            continue
        if req.memory_gib and host.memory_free is not None and host.memory_free < req.memory_gib:
            continue
        key = (host.cpus_free if host.cpus_free is not None else float("inf"), host.name)
        if best is None or key < best[0]:
            best = (key, host)
    return None if best is None else Placement(((best[1], 0),), best[0])


# ---------------------------------------------------------------- fast lane


def choose_fast_lane_hosts(topology: Topology, gpus: int) -> tuple[str, ...]:
    """Whole hosts adding up to at least `gpus` for the fast lane (rule 6).

    Small domains first (single-host HGX servers before racks), so the lane
    breaks no NVLink domain a large job could use; then by name. Hosts that
    are up come before the rest. Deterministic: the loader and the simulator
    mark the same hosts.
    """
    if gpus <= 0:
        return ()
    domain_gpus: dict[str, int] = {}
    for host in topology.hosts:
        domain_gpus[host.domain] = domain_gpus.get(host.domain, 0) + len(host.gpus)
    ordered = sorted(
        (h for h in topology.hosts if h.gpus),
        key=lambda h: (h.state != UP, domain_gpus[h.domain], h.domain, h.name),
    )
    chosen: list[str] = []
    total = 0
    for host in ordered:
        if total >= gpus:
            break
        chosen.append(host.name)
        total += len(host.gpus)
    return tuple(sorted(chosen))

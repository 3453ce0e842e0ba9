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
- A 1-GPU job with `gpu_milli` < 1000 shares a GPU: the shared GPU with the
  least free milli-GPU that fits, else a whole free GPU by host best fit.
- A gang never mixes GPU types and never straddles the fast lane (each pool
  is searched on its own); CPU and memory must fit on every host.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import takewhile
from typing import TypeVar

from .capacity import NOTHING, Capacity, Group, HostState, Pool, Release
from .model import DOMAIN, UP, WHOLE_GPU_MILLI, PendingJob, Policy, Topology


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


def protected_for(job: PendingJob) -> float:
    """How long a job can't be preempted once started: its minimum runtime, unless it must end sooner."""
    if job.max_runtime is None:
        return job.min_runtime
    return min(job.min_runtime, job.max_runtime)


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
            protected_for=protected_for(job),
            earmarked=job.earmarked_gpus,
        )

    @property
    def shared(self) -> bool:
        return self.milli < WHOLE_GPU_MILLI

    def single_host(self, pool: Pool) -> bool:
        if self.per_host is not None:
            return self.per_host == self.gpus
        return self.gpus <= pool.largest_host


HostFilter = Callable[[HostState], bool]
Part = TypeVar("Part")


@dataclass(frozen=True)
class Placement:
    """Where a job would start: not yet allocated."""

    # (host, GPUs there), hosts in name order.
    parts: tuple[tuple[HostState, int], ...]
    # Best-fit key; smaller is better (compared across pools).
    key: tuple
    shared_gpu: str | None = None

    @property
    def domains(self) -> tuple[str, ...]:
        return tuple(sorted({host.domain for host, _ in self.parts}))


def room(host: HostState, req: JobRequest, extra: Release = NOTHING) -> int:
    """How many of the job's GPUs this host could take (CPU and memory included)."""
    count = len(host.free) + extra.gpus
    if req.earmarked:
        count += len(host.earmarked.get(req.job_id, ()))
    if req.cpus and host.cpus_free is not None:
        count = min(count, (host.cpus_free + extra.cpus) * req.gpus // req.cpus)
    if req.memory_gib and host.memory_free is not None:
        count = min(count, (host.memory_free + extra.memory_gib) * req.gpus // req.memory_gib)
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


def _best_shared_gpu(pool: Pool, req: JobRequest, host_ok: HostFilter, capacity: Capacity) -> Placement | None:
    """The shared GPU with the least free milli-GPU that fits, else a whole one."""
    for free_milli, host_name, gpu in pool.shared[bisect_left(pool.shared, (req.milli, "", "")):]:
        host = capacity.hosts[host_name]
        if host_ok(host) and room(host, req, Release(gpus=1)) >= 1:
            return Placement(((host, 1),), (0, free_milli, host_name, gpu), shared_gpu=gpu)
    whole = _best_host(pool, req, 1, host_ok)
    if whole is None:
        return None
    host = whole.parts[0][0]
    own = host.earmarked.get(req.job_id, ())
    gpu = own[0] if own else host.free[0]
    return Placement(whole.parts, (1,) + whole.key, shared_gpu=gpu)


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
    if pool.free < req.gpus and not (req.shared and pool.shared):
        return None
    if req.shared:
        return _best_shared_gpu(pool, req, host_ok, capacity)
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


def _on_earmarks(req: JobRequest, capacity: Capacity, host_ok: HostFilter) -> Placement | None:
    """A job that preempted others starts on the GPUs they left, if it can."""
    hosts = sorted({capacity.gpu_host[g] for g in req.earmarked if g in capacity.gpu_host})
    hosts = [capacity.hosts[h] for h in hosts]
    hosts = [h for h in hosts if h.schedulable and req.job_id in h.earmarked and host_ok(h)]
    if not hosts:
        return None
    if req.shared or req.single_host(hosts[0].group.pool):
        fitting = sorted((room(h, req), h.name, h) for h in hosts if room(h, req) >= req.gpus)
        if not fitting:
            return None
        host = fitting[0][2]
        shared = host.earmarked[req.job_id][0] if req.shared else None
        return Placement(((host, req.gpus),), (), shared_gpu=shared)
    for group in sorted({h.group for h in hosts}, key=lambda g: g.domain):
        plan = plan_in_group(group, req, req.gpus, host_ok)
        if plan is not None:
            return Placement(tuple(sorted(plan, key=lambda p: p[0].name)), ())
    return None


def find_placement(req: JobRequest, capacity: Capacity, host_ok: HostFilter) -> Placement | None:
    """Where the job could start now, or None."""
    if req.gpus == 0:
        return _cpu_only_host(req, capacity, host_ok)
    if req.earmarked:
        placement = _on_earmarks(req, capacity, host_ok)
        if placement is not None:
            return placement
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

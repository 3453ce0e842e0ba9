"""Defragmentation: make one domain whole for a `domain` job that waits
although enough GPUs are free in total.

Resumable jobs that may be stopped (unallocated, or past their minimum
runtime) are moved out of a partly used domain when

- they fit in the free space outside it right now (checked by allocating
  them on the working capacity and rolling back),
- the work they lose since their last checkpoint (GPU-seconds) is less than
  what the waiting job gains: its GPUs × the time it would otherwise wait,
  counted over at most its minimum runtime (the horizon: the GPU time its
  contract guarantees once started), and
- the hourly cap on migrations allows them.

Among the domains that qualify, the one losing the least work is chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .capacity import NOTHING, Capacity, Group, Release
from .fairshare import gpu_amount
from .model import DOMAIN, RUNNING, PendingJob, Policy, RunningJob, protected_until
from .placement import HostFilter, JobRequest, find_placement, plan_in_group, pools_for, pools_in
from .preemption import lost_work

HOUR = 3600.0


@dataclass(frozen=True)
class DefragPlan:
    """Jobs to move out of one domain, and the hosts the waiting job will take there."""

    domain: str
    hosts: tuple[str, ...]
    moved: tuple[RunningJob, ...]
    lost_work: float


def migrations_left(recent: Iterable[float], now: float, policy: Policy) -> int:
    """Migrations the hourly cap still allows, counting those of the last hour."""
    used = sum(1 for when in recent if now - HOUR < when <= now)
    return max(0, policy.defrag_max_migrations_per_hour - used)


def defragments_for(job: PendingJob | JobRequest) -> bool:
    """Is defragmentation tried for this job when it can't start (a multi-GPU job of topology `domain`)? It may
    move any job past its protection, whoever holds it."""
    return job.topology == DOMAIN and job.gpus > 1


def free_for(sides: tuple[bool, ...], gpu_types: frozenset[str], capacity: Capacity) -> int:
    """Free GPUs in total in the pools a job may use (`placement.pools_in`): defragmentation is tried only for a
    job that asks no more (it waits although enough GPUs are free in total)."""
    return sum(pool.free for side in pools_in(capacity, sides, gpu_types) for pool in side)


def plan_defrag(job: PendingJob, req: JobRequest, capacity: Capacity, *, earliest: float, budget: int,
                unavailable: set[str], host_filter: Callable[[JobRequest], HostFilter], now: float,
                policy: Policy) -> DefragPlan | None:
    """The cheapest worthwhile set of moves that frees one domain for the job, or None.

    `earliest` is when the job could start without moving anything (inf if
    never); `unavailable` are jobs already leaving or chosen as victims.
    """
    if budget <= 0:
        return None
    if free_for(req.lanes, req.gpu_types, capacity) < req.gpus:
        return None
    pools = [pool for lane in pools_for(req, capacity) for pool in lane]
    gain = gpu_amount(req.gpus, req.milli) * min(job.min_runtime, earliest - now)
    host_ok = host_filter(req)
    best: DefragPlan | None = None
    for pool in pools:
        for group in sorted(pool.groups.values(), key=lambda g: g.domain):
            if group.capacity < req.gpus:
                continue
            found = _moves_in(group, req, capacity, host_ok, unavailable, now, policy)
            if found is None:
                continue
            moved, hosts = found
            lost = sum(lost_work(j, now) for j in moved)
            if len(moved) > budget or lost >= gain:
                continue
            if best is not None and (lost, len(moved), group.domain) >= (best.lost_work, len(best.moved), best.domain):
                continue
            if _fit_elsewhere(moved, group, capacity, host_filter, policy):
                best = DefragPlan(group.domain, hosts, moved, lost)
    return best


def _moves_in(group: Group, req: JobRequest, capacity: Capacity, host_ok: HostFilter, unavailable: set[str],
              now: float, policy: Policy) -> tuple[tuple[RunningJob, ...], tuple[str, ...]] | None:
    """Movable jobs of the group, least lost work first, until the job fits; then drop the unneeded."""
    names = {h.name for h in group.hosts}
    movable: dict[str, RunningJob] = {}
    for host in group.hosts:
        for job in host.jobs:
            if (job.state == RUNNING and job.resumable and job.id not in unavailable and not job.mig_profile
                    and (not job.allocated or now >= protected_until(job, policy))):
                movable[job.id] = job
    ordered = sorted(movable.values(), key=lambda j: (lost_work(j, now), len(j.gpu_ids), j.seq, j.id))
    extra: dict[str, Release] = {}
    chosen: list[RunningJob] = []
    releases: dict[str, dict[str, Release]] = {}
    for job in ordered:
        releases[job.id] = {n: r for n, r in capacity.releases(job).items() if n in names}
        for name, release in releases[job.id].items():
            extra[name] = extra.get(name, NOTHING) + release
        chosen.append(job)
        if plan_in_group(group, req, req.gpus, host_ok, extra) is not None:
            break
    else:
        return None
    for job in reversed(list(chosen)):
        without = {n: r - releases[job.id].get(n, NOTHING) for n, r in extra.items()}
        if plan_in_group(group, req, req.gpus, host_ok, without) is not None:
            chosen.remove(job)
            extra = without
    plan = plan_in_group(group, req, req.gpus, host_ok, extra)
    return tuple(chosen), tuple(sorted(h.name for h, _ in plan))


def _fit_elsewhere(moved: tuple[RunningJob, ...], group: Group, capacity: Capacity,
                   host_filter: Callable[[JobRequest], HostFilter], policy: Policy) -> bool:
    """Would every moved job start right away outside the group? (a trial, rolled back)"""
    mark = capacity.checkpoint()
    try:
        for job in sorted(moved, key=lambda j: (-len(j.gpu_ids), j.seq, j.id)):
            req = _request_for_running(job, capacity, policy)
            placement = find_placement(req, capacity, _elsewhere(group, host_filter(req)))
            if placement is None:
                return False
            capacity.take(job.id, req.gpus, placement.parts, cpus=req.cpus, memory_gib=req.memory_gib,
                          milli=req.milli, shared_gpu=placement.shared_gpu)
        return True
    finally:
        capacity.rollback(mark)


def _elsewhere(group: Group, host_ok: HostFilter) -> HostFilter:
    return lambda host: host.group is not group and host_ok(host)


def _request_for_running(job: RunningJob, capacity: Capacity, policy: Policy) -> JobRequest:
    """A moved job asks again for what it holds: as many GPUs, of the type it runs on."""
    gpu_types = frozenset(capacity.hosts[capacity.gpu_host[g]].gpu_type for g in job.gpu_ids if g in capacity.gpu_host)
    return JobRequest.of(PendingJob(
        id=job.id, project=job.project, gpus=len(job.gpu_ids), min_runtime=job.min_runtime,
        resumable=job.resumable, submit_time=job.submit_time, seq=job.seq, gpu_milli=job.gpu_milli,
        gpu_types=gpu_types, topology=job.topology, max_runtime=job.max_runtime, cpus=job.cpus,
        memory_gib=job.memory_gib,
    ), policy)

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
from itertools import chain, pairwise

from .capacity import NOTHING, Capacity, Group, Release
from .fairshare import gpu_amount
from .model import DOMAIN, RUNNING, PendingJob, Policy, RunningJob, protected_until
from .placement import HostFilter, JobRequest, find_placement, plan_in_group, pools_for, pools_in
from .preemption import lost_work, work_line

HOUR = 3600.0

Moved = tuple[RunningJob, ...]


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
                policy: Policy, read: dict[str, set[str]] | None = None) -> DefragPlan | None:
    """The cheapest worthwhile set of moves that frees one domain for the job, or None.

    `earliest` is when the job could start without moving anything (inf if
    never); `unavailable` are jobs already leaving or chosen as victims.
    `read` gathers, per domain, the jobs a move took before the job fitted
    (`_moves_in`): what it finds there turns only with their order.
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
            moved, hosts, taken = found
            if read is not None:
                read.setdefault(group.domain, set()).update(job.id for job in taken)
            lost = sum(lost_work(j, now) for j in moved)
            if len(moved) > budget or lost >= gain:
                continue
            if best is not None and (lost, len(moved), group.domain) >= (best.lost_work, len(best.moved), best.domain):
                continue
            if _fit_elsewhere(moved, group, capacity, host_filter, policy):
                best = DefragPlan(group.domain, hosts, moved, lost)
    return best


def movable(job: RunningJob, now: float, policy: Policy) -> bool:
    """May a move take this job now? Running, resumable, no MIG instance, past its protection if allocated."""
    return (job.state == RUNNING and job.resumable and not job.mig_profile
            and (not job.allocated or now >= protected_until(job, policy)))


def _move_order(job: RunningJob, now: float) -> tuple:
    """The order moves take a group's jobs in: least work lost first (`lost_work`), then fewest GPUs."""
    return lost_work(job, now), len(job.gpu_ids), job.seq, job.id


def _in_move_order(group: Group, now: float, policy: Policy, unavailable: set[str] | frozenset = frozenset()
                   ) -> list[RunningJob]:
    """The group's jobs a move may take (`movable`, not `unavailable`), each once, in the order it takes them."""
    jobs = {job.id: job for host in group.hosts for job in host.jobs
            if job.id not in unavailable and movable(job, now, policy)}
    return sorted(jobs.values(), key=lambda j: _move_order(j, now))


def _moves_in(group: Group, req: JobRequest, capacity: Capacity, host_ok: HostFilter, unavailable: set[str],
              now: float, policy: Policy) -> tuple[Moved, tuple[str, ...], Moved] | None:
    """Movable jobs of the group, least lost work first, until the job fits; then drop the unneeded. Also the
    jobs taken before it fitted, unpruned: the order of the others does not matter (None: it never fits, in any
    order)."""
    names = {h.name for h in group.hosts}
    ordered = _in_move_order(group, now, policy, unavailable)
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
    taken = tuple(chosen)
    for job in reversed(list(chosen)):
        without = {n: r - releases[job.id].get(n, NOTHING) for n, r in extra.items()}
        if plan_in_group(group, req, req.gpus, host_ok, without) is not None:
            chosen.remove(job)
            extra = without
    plan = plan_in_group(group, req, req.gpus, host_ok, extra)
    return tuple(chosen), tuple(sorted(h.name for h, _ in plan)), taken


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


def next_order_turn(groups: Iterable[tuple[Group, set[str]]], now: float, policy: Policy, before: float,
                    just_after: float) -> float:
    """The first moment after `now`, before `before`, at which what a move takes in one of these groups
    (`_moves_in`) could change with time alone (else `before`); `just_after` (the caller's moment right after
    `now`) if it could at once.

    `groups`: each group with the jobs a plan took there before the job fitted (`plan_defrag`'s `read`). Moves
    take jobs least work lost first, and each job's lost work grows as a line from its last checkpoint (or
    start): `gpus × (t - since)`, zero until `since` if that is still to come (`preemption.work_line`). What
    a plan takes changes when two of those jobs swap, or another job comes before the last of them; lines in
    a sorted list first swap between neighbours, so the soonest crossing of neighbours among them, of the last
    of them with each job after it, and the moments a line leaves zero, bound when that happens. Lines tied
    now part at once when the one ahead (on fewer GPUs, or earlier) grows faster: fractions of a GPU, whose
    lines grow by the fraction. A job the plan did not take that stands before the last it took (one started
    since) changes it at once. (A checkpoint drops a line to zero: the caller counts those moments,
    `quiet._next_movable_checkpoint`.)
    """
    soonest = before
    for group, read in groups:
        ordered = _in_move_order(group, now, policy)
        last = max((i for i, job in enumerate(ordered) if job.id in read), default=None)
        if last is None:
            continue
        if any(job.id not in read for job in ordered[:last]):
            return just_after
        lines = [work_line(job) for job in ordered]
        for _, since in lines:
            if now < since < soonest:
                soonest = since
        pairs = chain(pairwise(lines[:last + 1]), ((lines[last], after) for after in lines[last + 1:]))
        for (slope_a, since_a), (slope_b, since_b) in pairs:
            # a is ahead of b now. A line still at zero until its `since` (counted above) stays level till then:
            # b's falls below a's at once only if a's starts growing now.
            if since_b > now:
                if since_a <= now and slope_a > 0:
                    return just_after
                continue
            if since_a > now:
                continue
            # Both grow: b's line falls below a's at `turns` if it grows more slowly.
            if slope_b < slope_a:
                turns = (slope_a * since_a - slope_b * since_b) / (slope_a - slope_b)
                if turns <= now:
                    return just_after
                if turns < soonest:
                    soonest = turns
    return soonest

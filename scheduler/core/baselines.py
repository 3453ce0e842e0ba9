"""Baseline policies to compare Allot against: same snapshot in, same decisions out.

- `fifo_first_fit`: jobs in submission order, each placed on the first hosts
  (by name) with free GPUs; a job that doesn't fit is skipped, as
  Kubernetes' default scheduler does (no head-of-line blocking). No fair
  share, no preemption, no reservations.
- `node_level`: submission order too, but topology-blind placement onto the
  least-allocated hosts first (Kubernetes' default scoring), the way a
  scheduler that sees nodes and not NVLink domains spreads work. It still
  keeps a `domain` job inside one domain (the first that fits by name), as
  such a scheduler would by a node label, and fragments racks doing so.

Both keep rule 7 (down hosts, maximum runtimes, drains) so a simulation under
them stays sane, and give every waiting job a status.
"""

from __future__ import annotations

import math

from .capacity import Capacity, HostState
from .drains import drain_progress, jobs_leaving
from .engine import collector_paused
from .model import DOMAIN, UP, WHOLE_GPU_MILLI, Decisions, PendingJob, PendingStatus, Policy, Snapshot, Start
from .reasons import need


def fifo_first_fit(snapshot: Snapshot, *, now: float, policy: Policy) -> Decisions:
    """First come, first served; the first hosts by name that hold the job."""
    with collector_paused():
        return _in_submission_order(snapshot, now, policy, order=lambda h: h.name, name="FIFO first fit")


def node_level(snapshot: Snapshot, *, now: float, policy: Policy) -> Decisions:
    """First come, first served; the least-allocated hosts first, domains ignored."""
    with collector_paused():
        return _in_submission_order(snapshot, now, policy, order=lambda h: (-len(h.free), h.name),
                                    name="node-level placement")


def _in_submission_order(snapshot: Snapshot, now: float, policy: Policy, *, order, name: str) -> Decisions:
    capacity = Capacity(snapshot.topology, snapshot.running, snapshot.pending, now)
    forced, leave_at = jobs_leaving(snapshot.running, capacity, now=now, policy=policy)
    # Hosts that take new jobs; earmarks mean nothing to a baseline.
    hosts = [h for h in capacity.hosts.values() if h.state == UP and h.gpu_count]
    for host in hosts:
        for gpus in host.earmarked.values():
            host.free.extend(gpus)
        host.earmarked.clear()
        host.free.sort(key=capacity.gpu_position.__getitem__)
    with_room = sorted((h for h in hosts if h.free), key=order)
    largest_host = max((h.gpu_count for h in hosts), default=0)
    free = sum(len(h.free) for h in with_room)
    # A job no bigger than one of the same shape that did not fit does not fit either
    # (capacity only shrinks), so it is not searched again.
    smallest_failed: dict[tuple, int] = {}
    starts: list[Start] = []
    waiting: list[PendingJob] = []
    for job in sorted(snapshot.pending, key=lambda j: (j.submit_time, j.seq, j.id)):
        shape = (job.gpus_per_host, job.topology, job.gpu_types, job.cpus, job.memory_gib)
        if job.gpus == 0 or job.gpus > free or job.gpus >= smallest_failed.get(shape, math.inf):
            waiting.append(job)
            continue
        parts = _place(job, with_room, largest_host)
        if parts is None:
            smallest_failed[shape] = job.gpus if not (job.cpus or job.memory_gib) else math.inf
            waiting.append(job)
            continue
        gpu_ids: list[str] = []
        milli = job.gpu_milli if job.gpus == 1 else WHOLE_GPU_MILLI
        for host, count in parts:
            gpu_ids += host.free[:count]
            del host.free[:count]
            if host.cpus_free is not None:
                host.cpus_free -= -(-job.cpus * count // job.gpus)
            if host.memory_free is not None:
                host.memory_free -= -(-job.memory_gib * count // job.gpus)
        free -= job.gpus
        with_room = sorted((h for h in with_room if h.free), key=order)
        starts.append(Start(job.id, tuple(gpu_ids), milli, f"{name}: first hosts with room"))
    texts: dict[tuple, str] = {}
    pending = {}
    for position, job in enumerate(waiting, 1):
        asked = (job.gpus, job.gpus_per_host, job.gpu_milli, job.gpu_types, job.topology, job.cpus, job.memory_gib)
        text = texts.get(asked)
        if text is None:
            text = texts[asked] = f"{need(job)}; {free} free; waiting in submission order ({name})"
        pending[job.id] = PendingStatus(job.id, text, position)
    return Decisions(
        starts=tuple(starts),
        preemptions=tuple(forced),
        pending=pending,
        host_changes=tuple(drain_progress(capacity, leave_at, now=now, policy=policy)),
    )


def _fits_host(job: PendingJob, host: HostState, count: int) -> bool:
    if job.gpu_types and host.gpu_type not in job.gpu_types:
        return False
    if job.cpus and host.cpus_free is not None and host.cpus_free < -(-job.cpus * count // job.gpus):
        return False
    if job.memory_gib and host.memory_free is not None and host.memory_free < -(-job.memory_gib * count // job.gpus):
        return False
    return True


def _place(job: PendingJob, hosts: list[HostState], largest_host: int) -> list[tuple[HostState, int]] | None:
    """Whole GPUs only (a baseline shares no GPU): one host if the job fits one, else a gang of hosts."""
    per_host = job.gpus_per_host
    if per_host is None and job.gpus <= largest_host:
        per_host = job.gpus
    if job.topology == DOMAIN:
        by_domain: dict[str, list[HostState]] = {}
        for host in hosts:
            by_domain.setdefault(host.domain, []).append(host)
        for domain in sorted(by_domain):
            parts = _gang(job, by_domain[domain], per_host)
            if parts is not None:
                return parts
        return None
    return _gang(job, hosts, per_host)


def _gang(job: PendingJob, hosts: list[HostState], per_host: int | None) -> list[tuple[HostState, int]] | None:
    needed = job.gpus
    parts: list[tuple[HostState, int]] = []
    for host in hosts:
        if per_host is None:
            take = min(len(host.free), needed)
        else:
            take = min(per_host, needed) if len(host.free) >= min(per_host, needed) else 0
        if take and _fits_host(job, host, take):
            parts.append((host, take))
            needed -= take
            if needed <= 0:
                return parts
    return None

"""Baseline policies to compare Allot against: same snapshot in, same decisions out.

- `fifo_first_fit`: jobs in submission order, each placed on the first hosts
  (by name) with free GPUs; a job that doesn't fit is skipped, as
  Kubernetes' default scheduler does (no head-of-line blocking). No fair
  share, no preemption, no reservations.
- `node_level`: submission order too, but topology-blind placement onto the
  least-allocated hosts first (Kubernetes' default scoring), the way a
  scheduler that sees nodes and not NVLink domains spreads work. It still
  keeps a `domain` job inside one domain, as such a scheduler would by a
  node label: the domain of the best-scored host that lets the whole gang
  follow it (the label is all it knows of domains), and fragments racks
  doing so.
- `priority_levels`: Ai2's former scheduler. Two priority levels: jobs that
  declare a minimum runtime are HIGH (priority inflation: every running job
  ended up HIGH), unallocated ones LOW. Jobs opt out of preemption, within a
  per-project cap on non-preemptible GPUs (the project's share of the
  healthy GPUs); beyond the cap a job still runs, preemptible, on idle GPUs.
  Which running jobs are the protected ones is derived from the snapshot:
  per project, the earliest started allocated jobs that fit under the cap.
  A HIGH job that fits under its cap may preempt preemptible jobs (LOW
  first, then the most recently started); nobody else preempts and
  protected jobs run to the end. First-fit placement by host name; jobs
  under their cap are placed before the others, each group in priority
  then submission order; no fair share, no reservations, no fast lane.

All keep rule 7 (down hosts, maximum runtimes, drains) so a simulation under
them stays sane, and give every waiting job a status.
"""

from __future__ import annotations

import math

from .capacity import Capacity, HostState
from .drains import drain_progress, jobs_leaving
from .engine import collector_paused
from .fairshare import share_of_cluster
from .lifecycle import Cause, StopCause
from .model import (
    DOMAIN,
    RUNNING,
    UP,
    WHOLE_GPU_MILLI,
    Decisions,
    PendingJob,
    PendingStatus,
    Policy,
    Preemption,
    RunningJob,
    Snapshot,
    Start,
)
from .reasons import need
from .reservation import grace_for


def fifo_first_fit(snapshot: Snapshot, *, now: float, policy: Policy) -> Decisions:
    """First come, first served; the first hosts by name that hold the job."""
    with collector_paused():
        return _in_submission_order(snapshot, now, policy, order=lambda h: h.name, name="FIFO first fit")


def node_level(snapshot: Snapshot, *, now: float, policy: Policy) -> Decisions:
    """First come, first served; the least-allocated hosts first, domains ignored."""
    with collector_paused():
        return _in_submission_order(snapshot, now, policy, order=lambda h: (-len(h.free), h.name),
                                    name="node-level placement")


def _open_hosts(snapshot: Snapshot, now: float, policy: Policy):
    """The capacity, the jobs rule 7 sends away, and the hosts that take new jobs (earmarks mean nothing to a
    baseline: their GPUs are free again)."""
    capacity = Capacity(snapshot.topology, snapshot.running, snapshot.pending, now)
    forced, leave_at = jobs_leaving(snapshot.running, capacity, now=now, policy=policy)
    hosts = [h for h in capacity.hosts.values() if h.state == UP and h.gpu_count]
    for host in hosts:
        for gpus in host.earmarked.values():
            host.free.extend(gpus)
        host.earmarked.clear()
        host.free.sort(key=capacity.gpu_position.__getitem__)
    return capacity, forced, leave_at, hosts


def _in_submission_order(snapshot: Snapshot, now: float, policy: Policy, *, order, name: str) -> Decisions:
    capacity, forced, leave_at, hosts = _open_hosts(snapshot, now, policy)
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
        milli = job.gpu_milli if job.gpus == 1 else WHOLE_GPU_MILLI
        gpu_ids = _take(job, parts)
        free -= job.gpus
        with_room = sorted((h for h in with_room if h.free), key=order)
        starts.append(Start(job.id, gpu_ids, milli, f"{name}: first hosts with room"))
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
        # Domains in the order of their best host in `hosts` (by name for first fit, so name order).
        by_domain: dict[str, list[HostState]] = {}
        for host in hosts:
            by_domain.setdefault(host.domain, []).append(host)
        for domain in by_domain:
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


# ---------------------------------------------------------------- Ai2's former scheduler

HIGH, LOW = 1, 0


def priority_levels(snapshot: Snapshot, *, now: float, policy: Policy) -> Decisions:
    """Two priority levels, opt-out of preemption under a per-project cap (see the module docstring)."""
    with collector_paused():
        return _priority_levels(snapshot, now, policy)


def level(job: PendingJob | RunningJob) -> int:
    return HIGH if job.min_runtime > 0 else LOW


def _priority_levels(snapshot: Snapshot, now: float, policy: Policy) -> Decisions:
    capacity, forced, leave_at, hosts = _open_hosts(snapshot, now, policy)
    hosts.sort(key=lambda h: h.name)
    largest_host = max((h.gpu_count for h in hosts), default=0)
    healthy = sum(h.gpu_count for h in hosts)
    shares = share_of_cluster(snapshot.units)
    cap = {name: int(share * healthy + 1e-9) for name, share in shares.items()}

    # Protected (opted-out) GPUs per project: its earliest started allocated jobs under the cap, plus
    # pending jobs whose victims are leaving (they will run protected).
    protected: dict[str, int] = {}
    preemptible: list[RunningJob] = []
    for job in sorted(snapshot.running, key=lambda j: (j.start_time, j.seq, j.id)):
        gpus = len(job.gpu_ids)
        if job.allocated and protected.get(job.project, 0) + gpus <= cap.get(job.project, 0):
            protected[job.project] = protected.get(job.project, 0) + gpus
        elif job.state == RUNNING and job.id not in leave_at and gpus and job.gpu_milli >= WHOLE_GPU_MILLI:
            preemptible.append(job)
    owed = {job.id for job in snapshot.pending if job.earmarked_gpus and job.allocated}
    for job in snapshot.pending:
        if job.id in owed:
            protected[job.project] = protected.get(job.project, 0) + job.gpus
    # Victims preferred: LOW first, then the most recently started, then the fewest GPUs.
    preemptible.sort(key=lambda j: (level(j), -j.start_time, len(j.gpu_ids), j.seq, j.id))

    def under_cap(job: PendingJob) -> bool:
        own = job.gpus if job.id in owed else 0
        return job.allocated and protected.get(job.project, 0) - own + job.gpus <= cap.get(job.project, 0)

    order = sorted(snapshot.pending, key=lambda j: (-level(j), -j.priority, j.submit_time, j.seq, j.id))
    starts: list[Start] = []
    preemptions: list[Preemption] = []
    # Job id -> what became of it this tick ("started" or why it waits).
    decided: dict[str, str] = {}
    smallest_failed: dict[tuple, int] = {}
    free = sum(len(h.free) for h in hosts)
    # First the jobs that run protected (under their project's cap), then the rest, preemptible.
    for protected_pass in (True, False):
        for job in order:
            if job.id in decided or (protected_pass and not under_cap(job)):
                continue
            shape = (job.gpus_per_host, job.topology, job.gpu_types, job.cpus, job.memory_gib)
            parts = None
            if job.gpus and job.gpus <= free and job.gpus < smallest_failed.get(shape, math.inf):
                parts = _place(job, [h for h in hosts if h.free], largest_host)
                if parts is None and not (job.cpus or job.memory_gib):
                    smallest_failed[shape] = job.gpus
            if parts is not None:
                kind = "protected" if protected_pass else "preemptible"
                starts.append(Start(job.id, _take(job, parts), job.gpu_milli if job.gpus == 1 else WHOLE_GPU_MILLI,
                                    f"priority scheduler: first hosts with room ({kind})"))
                decided[job.id] = "started"
                free -= job.gpus
                if protected_pass and job.id not in owed:
                    protected[job.project] = protected.get(job.project, 0) + job.gpus
                continue
            if job.id in owed:
                decided[job.id] = "waiting for the jobs it preempted to leave"
                continue
            victims = _victims_for(job, preemptible, hosts, largest_host) if protected_pass and job.gpus else None
            if victims is None:
                decided[job.id] = "no room" + ("" if protected_pass else " (over its project's protected cap)")
                continue
            for victim in victims:
                preemptions.append(Preemption.of(
                    victim, StopCause(Cause.JOB, job.id),
                    f"preempted by job {job.id} (priority scheduler: preemptible job)",
                    grace=grace_for(victim, policy), preemptor=job.id))
            taken = {v.id for v in victims}
            preemptible = [v for v in preemptible if v.id not in taken]
            protected[job.project] = protected.get(job.project, 0) + job.gpus
            decided[job.id] = "preempting to make room"
    pending = {}
    started = {s.job_id for s in starts}
    position = 0
    texts: dict[tuple, str] = {}
    for job in order:
        if job.id in started:
            continue
        position += 1
        why = decided.get(job.id, "no room")
        key = (job.gpus, job.gpus_per_host, job.topology, why)
        text = texts.get(key)
        if text is None:
            text = texts[key] = f"{need(job)}; {free} free; {why} (priority scheduler)"
        pending[job.id] = PendingStatus(job.id, text, position)
    return Decisions(
        starts=tuple(starts),
        preemptions=tuple(forced + preemptions),
        pending=pending,
        host_changes=tuple(drain_progress(capacity, leave_at, now=now, policy=policy)),
    )


def _take(job: PendingJob, parts: list[tuple[HostState, int]]) -> tuple[str, ...]:
    """Take the job's GPUs (and its CPU and memory, per host in proportion) from the hosts placement chose."""
    gpu_ids: list[str] = []
    for host, count in parts:
        gpu_ids += host.free[:count]
        del host.free[:count]
        if host.cpus_free is not None:
            host.cpus_free -= -(-job.cpus * count // job.gpus)
        if host.memory_free is not None:
            host.memory_free -= -(-job.memory_gib * count // job.gpus)
    return tuple(gpu_ids)


def _victims_for(job: PendingJob, candidates: list[RunningJob], hosts: list[HostState],
                 largest_host: int) -> list[RunningJob] | None:
    """The fewest preferred victims whose GPUs (with the free ones) let the job be placed, or None."""
    by_name = {h.name: h for h in hosts}
    free = sum(len(h.free) for h in hosts)
    added: list[tuple[HostState, int]] = []
    chosen: list[RunningJob] = []
    parts = None
    try:
        for victim in candidates:
            if job.gpu_types and not any(
                by_name[g.rsplit(":", 1)[0]].gpu_type in job.gpu_types
                for g in victim.gpu_ids if g.rsplit(":", 1)[0] in by_name
            ):
                continue
            gained = 0
            for gpu in victim.gpu_ids:
                host = by_name.get(gpu.rsplit(":", 1)[0])
                if host is not None:
                    host.free.append(gpu)
                    added.append((host, gpu))
                    gained += 1
            if not gained:
                continue
            chosen.append(victim)
            free += gained
            if free >= job.gpus:
                parts = _place(job, [h for h in hosts if h.free], largest_host)
                if parts is not None:
                    break
    finally:
        for host, gpu in added:
            host.free.remove(gpu)
    if parts is None:
        return None
    used_hosts = {host.name for host, _ in parts}
    return [v for v in chosen if any(g.rsplit(":", 1)[0] in used_hosts for g in v.gpu_ids)]

"""Rule 7: jobs that leave whatever waits, and how drains progress.

Jobs on a host that is down are lost at once. A job past its maximum runtime
is stopped. On a draining host, unallocated jobs leave at once and allocated
ones as each reaches its minimum runtime; when no job is left the host is
drained.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .capacity import Capacity
from .lifecycle import Cause, StopCause
from .model import (
    DOWN,
    DRAINED,
    DRAINING,
    PREEMPTING,
    UP,
    HostChange,
    JobLeave,
    Policy,
    Preemption,
    RunningJob,
    in_seq_order,
    protected_until,
)
from .reasons import format_duration, format_time, plural, requeue_note
from .reservation import grace_for


def jobs_leaving(running: tuple[RunningJob, ...], capacity: Capacity, *, now: float,
                 policy: Policy) -> tuple[list[Preemption], dict[str, float]]:
    """Preemptions for down hosts, maximum runtimes and drains; when every leaving job is gone."""
    preemptions: list[Preemption] = []
    leave_at: dict[str, float] = {}
    # Only jobs on a host that is not up (down, draining, ...) have their hosts looked at.
    not_up = {job.id for host in capacity.hosts.values() if host.state != UP for job in host.jobs} \
        if capacity.any_host_not_up else set()
    for job in in_seq_order(running):
        hosts = [host for host, _ in capacity.held[job.id]] if job.id in not_up else None
        down = next((h.name for h in hosts if h.state == DOWN), None) if hosts else None
        if down is not None:
            cause = StopCause(Cause.DOWN, down)
            preemptions.append(Preemption.of(
                job, cause, f"host {down} is down: the job is lost; {requeue_note(job, cause)}", grace=0))
            leave_at[job.id] = now
            continue
        if job.state == PREEMPTING:
            leave_at[job.id] = now if job.grace_ends is None else max(now, job.grace_ends)
            continue
        if job.max_runtime is not None and now >= job.start_time + job.max_runtime:
            grace = grace_for(job, policy)
            preemptions.append(Preemption.of(
                job, StopCause(Cause.MAX_RUNTIME), f"reached its maximum runtime of {format_duration(job.max_runtime)}",
                grace=grace))
            leave_at[job.id] = now + grace
            continue
        if not hosts:
            continue
        draining = next((h.name for h in hosts if h.state in (DRAINING, DRAINED)), None)
        if draining is None:
            continue
        grace = grace_for(job, policy)
        if not job.allocated:
            why = "unallocated jobs leave at once"
        elif now >= protected_until(job, policy):
            why = (f"its minimum runtime of {format_duration(job.min_runtime)} is over" if job.preemptions == 0 else
                   f"its protection of {format_duration(protected_until(job, policy) - job.start_time)} is over")
        else:
            continue
        cause = StopCause(Cause.DRAIN, draining)
        preemptions.append(Preemption.of(
            job, cause, f"host {draining} is draining; {why}; {requeue_note(job, cause)}", grace=grace))
        leave_at[job.id] = now + grace
    return preemptions, leave_at


def drain_progress(capacity: Capacity, leave_at: dict[str, float], *, now: float,
                   policy: Policy) -> list[HostChange]:
    """A draining host with no job left is drained; the others say when they will be.

    For a host still draining the change repeats state `draining` with the
    progress ("1 job left; leaves in 50m") as its reason, and when each job
    leaves (`HostChange.leaves`, the last first): what the host page, the API
    and the CLI show.
    """
    changes = []
    for host in capacity.hosts.values():
        if host.state != DRAINING:
            continue
        if not host.jobs:
            changes.append(HostChange(host.name, DRAINED, "no jobs left: drained, ready for repair"))
            continue
        leaves = last_first(leave(job, leave_at, now=now, policy=policy) for job in host.jobs)
        changes.append(HostChange(
            host.name, DRAINING, f"{plural(len(host.jobs), 'job')} left; leaves {format_time(leaves[0].at, now)}",
            leaves=leaves))
    return changes


def if_drained(jobs: Iterable[RunningJob], *, now: float, policy: Policy) -> tuple[JobLeave, ...]:
    """Rule 7 as a what-if: when each of a host's jobs would leave were the host drained now, the last first.

    The host page shows it before on-call drains a host; once it drains, the
    tick's own decision (`drain_progress`) is what the pages show.
    """
    jobs = tuple(jobs)
    leave_at: dict[str, float] = {}
    for job in jobs:
        if job.state == PREEMPTING:
            leave_at[job.id] = now if job.grace_ends is None else max(now, job.grace_ends)
        elif (not job.allocated or now >= protected_until(job, policy)
              or job.max_runtime is not None and now >= job.start_time + job.max_runtime):
            leave_at[job.id] = now + grace_for(job, policy)
    return last_first(leave(job, leave_at, now=now, policy=policy) for job in jobs)


def last_first(leaves: Iterable[JobLeave]) -> tuple[JobLeave, ...]:
    return tuple(sorted(leaves, key=lambda left: (-left.at, left.job_id)))


def leave(job: RunningJob, leave_at: dict[str, float], *, now: float, policy: Policy) -> JobLeave:
    """When a job on a draining host leaves, and why then; `leave_at` holds the jobs already on their way out."""
    at = leave_at.get(job.id)
    if job.state == PREEMPTING:
        why = "as it is being stopped (SIGKILL at the latest)"
    elif not job.allocated:
        why = "at once (unallocated)"
    else:
        limit = job.start_time + job.max_runtime if job.max_runtime is not None else math.inf
        protected = protected_until(job, policy)
        if at is None:
            why = ("at its maximum runtime" if limit < protected else
                   "at its minimum runtime" if job.preemptions == 0 else "at the end of its protection")
        elif limit <= now:
            why = "at its maximum runtime"
        elif protected <= now:
            why = "at once (past its minimum runtime)"
        else:
            why = "as it is being stopped (SIGKILL at the latest)"
    return JobLeave(job.id, _drain_leave_time(job, now, policy) if at is None else at, why)


def _drain_leave_time(job: RunningJob, now: float, policy: Policy) -> float:
    """A protected job on a draining host leaves when its minimum runtime ends (or its maximum runtime)."""
    leaves = protected_until(job, policy)
    if job.max_runtime is not None:
        leaves = min(leaves, job.start_time + job.max_runtime)
    return max(now, leaves) + grace_for(job, policy)

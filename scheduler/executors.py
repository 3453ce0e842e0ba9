"""What happens to running work between ticks, for both executors.

`agent`: processes run on hosts; agents report through heartbeats, and a host
that stops reporting is marked down. `simulated`: no processes; jobs advance in
accelerated time (settings.ALLOT_SIMULATION_SPEED seconds of work per second)
and stop the moment they are asked to.
"""

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from scheduler.choices import LIVE_STATES
from scheduler.core.durations import format_duration
from scheduler.core.lifecycle import Outcome
from scheduler.core.model import Policy, restart_overhead
from scheduler.models import GpuAssignment, Job
from scheduler.services import job_end_run
from topology.choices import Executor
from topology.models import AWAITING_AGENT_REASON, Host, HostEvent
from topology.services import ESCALATIONS, host_health_action

HEALTH = "system:health"
EXECUTOR = "system:executor"


def default_duration(job: Job) -> float:
    """Work a simulated job needs when its submitter gave none: 1.5 × its minimum runtime, at least 10 min."""
    duration = max(job.min_runtime * 1.5, 600)
    return min(duration, job.max_runtime) if job.max_runtime else duration


def expire_heartbeats(cluster, *, now: datetime) -> list[str]:
    """Agent hosts silent for longer than the heartbeat timeout: the health policy's action (default: down).

    A host that goes down loses its jobs this tick (resumable ones requeue).
    Each silent host is acted on once: only hosts the action would change are looked at.
    """
    if cluster.executor != Executor.AGENT:
        return []
    action = cluster.health.heartbeat_lost
    timeout = timedelta(seconds=cluster.heartbeat_timeout_seconds)
    silent = Host.objects.filter(
        Q(last_heartbeat_at__lt=now - timeout) | Q(last_heartbeat_at__isnull=True),
        domain__cluster=cluster, state__in=ESCALATIONS.get(action, ()),
    )
    names = []
    for host in silent:
        if host.last_heartbeat_at is None:
            # Never heard from: it waits for its agent, down whatever the policy says.
            reason, host_action = AWAITING_AGENT_REASON, "down"
        else:
            reason = (
                f"no heartbeat for {format_duration((now - host.last_heartbeat_at).total_seconds())} "
                f"(timeout {format_duration(cluster.heartbeat_timeout_seconds)})"
            )
            host_action = action
        HostEvent.objects.create(host=host, at=now, kind=HostEvent.Kind.HEARTBEAT_LOST, actor=HEALTH, detail=reason)
        if host_health_action(host=host, action=host_action, reason=reason, at=now):
            names.append(host.name)
    return names


@dataclass(frozen=True)
class SimulatedProgress:
    """How far a simulated job's work has come (seconds of work on the accelerated clock)."""

    needed: float
    # Work done, this run's progress included.
    done: float
    # What a stop now keeps: all of it for a job that resumes exactly, up to its last checkpoint for one that
    # declared `checkpoint_every`.
    kept: float
    # When this run's last checkpoint fell (jobs that declared `checkpoint_every`; None before the first).
    checkpoint_at: datetime | None


def simulated_progress(job: Job, *, now: datetime, policy: Policy) -> SimulatedProgress:
    """Where a simulated job stands, counted as the simulator counts a run (scheduler/sim/runs.py): a restart
    holds its GPUs for its restart overhead before it makes progress again; a resumable job that declared how
    often it checkpoints keeps its work up to its last checkpoint when stopped, any other resumes exactly."""
    speed = settings.ALLOT_SIMULATION_SPEED
    needed = job.simulated_duration or default_duration(job)
    progress = overhead = 0.0
    if job.run_started_at and job.is_live:  # an ended job keeps its last run's start, and its work is counted
        overhead = restart_overhead(job, policy) if job.restarts else 0.0
        progress = max(0.0, (now - job.run_started_at).total_seconds() * speed - overhead)
    kept, checkpoint_at = progress, None
    if job.checkpoint_every and job.resumable:
        kept = math.floor(progress / job.checkpoint_every) * job.checkpoint_every
        if kept > 0:
            checkpoint_at = job.run_started_at + timedelta(seconds=(overhead + kept) / speed)
    done = job.work_done + progress
    return SimulatedProgress(needed, min(done, needed), min(job.work_done + kept, needed), checkpoint_at)


def advance_simulated(cluster, *, now: datetime) -> int:
    """Finish simulated jobs whose work is done; stop those asked to stop; record the checkpoints of those that
    declared how often they take one, as an agent records what a job writes to $ALLOT_CHECKPOINT_FILE (the
    scheduler times fair-share preemptions by them). Returns runs ended."""
    policy = cluster.scheduling_policy()
    ended = 0
    # Only what the check reads: a 16k-GPU cluster runs about a thousand jobs a tick, and `job_end_run` reads the
    # few whose run ends again, locked.
    for job in Job.objects.filter(cluster=cluster, state__in=LIVE_STATES).only(
        "state", "run_started_at", "simulated_duration", "min_runtime", "max_runtime", "work_done", "stop_cause",
        "restarts", "restart_overhead", "checkpoint_every", "resumable", "last_checkpoint_at",
    ).order_by("pk"):
        progress = simulated_progress(job, now=now, policy=policy)
        # The end of the run and its work are one change, made only by the writer that ended the run:
        # a scheduler killed between the two would otherwise count the run's work again at the next tick.
        if job.stop_cause:
            with transaction.atomic():
                if job_end_run(job=job, outcome=Outcome.STOPPED, at=now, actor=EXECUTOR) is not None:
                    Job.objects.filter(pk=job.pk).update(work_done=progress.kept)
                    ended += 1
        elif progress.done >= progress.needed:
            with transaction.atomic():
                if job_end_run(job=job, outcome=Outcome.EXITED, exit_code=0, at=now, actor=EXECUTOR) is not None:
                    Job.objects.filter(pk=job.pk).update(work_done=progress.needed)
                    ended += 1
        elif progress.checkpoint_at is not None and (
                job.last_checkpoint_at is None or progress.checkpoint_at > job.last_checkpoint_at):
            Job.objects.filter(pk=job.pk, state__in=LIVE_STATES).update(last_checkpoint_at=progress.checkpoint_at)
    return ended


def reconcile(cluster, *, now: datetime) -> int:
    """End runs that can no longer end on their own, so no job stays live forever.

    A live job that holds no GPU (a writer died half-way) ends now; a job asked
    to stop whose agent has not reported the exit a heartbeat timeout after
    SIGKILL was due is treated as lost.
    """
    overdue = now - timedelta(seconds=cluster.heartbeat_timeout_seconds)
    holds_gpus = Exists(GpuAssignment.objects.filter(job=OuterRef("pk"), released_at__isnull=True))
    ended = 0
    for job in Job.objects.filter(cluster=cluster, state__in=LIVE_STATES).exclude(holds_gpus):
        ended += job_end_run(job=job, outcome=Outcome.LOST, at=now, actor=EXECUTOR,
                             detail="run ended by reconciliation: it held no GPU") is not None
    for job in Job.objects.filter(cluster=cluster, state__in=LIVE_STATES, stop_deadline__lt=overdue):
        ended += job_end_run(
            job=job, outcome=Outcome.LOST, at=now, actor=EXECUTOR,
            detail="its agent did not report the exit after SIGKILL was due; treated as lost",
        ) is not None
    return ended

"""What happens to running work between ticks, for both executors.

`agent`: processes run on hosts; agents report through heartbeats, and a host
that stops reporting is marked down. `simulated`: no processes; jobs advance in
accelerated time (settings.ALLOT_SIMULATION_SPEED seconds of work per second)
and stop the moment they are asked to.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from scheduler.choices import LIVE_STATES
from scheduler.core.durations import format_duration
from scheduler.core.lifecycle import Outcome
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


def advance_simulated(cluster, *, now: datetime) -> int:
    """Finish simulated jobs whose work is done; stop those asked to stop. Returns runs ended."""
    speed = settings.ALLOT_SIMULATION_SPEED
    ended = 0
    # Only what the check reads: a 16k-GPU cluster runs about a thousand jobs a tick, and `job_end_run` reads the
    # few whose run ends again, locked.
    for job in Job.objects.filter(cluster=cluster, state__in=LIVE_STATES).only(
        "run_started_at", "simulated_duration", "min_runtime", "max_runtime", "work_done", "stop_cause",
    ).order_by("pk"):
        elapsed = (now - job.run_started_at).total_seconds() * speed if job.run_started_at else 0
        needed = job.simulated_duration or default_duration(job)
        # The end of the run and its work are one change, made only by the writer that ended the run:
        # a scheduler killed between the two would otherwise count the run's work again at the next tick.
        if job.stop_cause:
            # Resumes exactly where it stopped (no checkpoint interval in the demo).
            with transaction.atomic():
                if job_end_run(job=job, outcome=Outcome.STOPPED, at=now, actor=EXECUTOR) is not None:
                    Job.objects.filter(pk=job.pk).update(work_done=min(needed, job.work_done + elapsed))
                    ended += 1
        elif job.work_done + elapsed >= needed:
            with transaction.atomic():
                if job_end_run(job=job, outcome=Outcome.EXITED, exit_code=0, at=now, actor=EXECUTOR) is not None:
                    Job.objects.filter(pk=job.pk).update(work_done=needed)
                    ended += 1
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

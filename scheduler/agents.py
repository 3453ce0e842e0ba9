"""What agents tell the server and what the server answers, one heartbeat at a time."""

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import Count, F, Max
from django.utils import timezone

from scheduler.choices import LIVE_STATES, JobState
from scheduler.models import Job, JobProcess
from scheduler.services import job_end_run
from topology.choices import GpuHealth, HostState
from topology.models import AWAITING_AGENT_REASON, Gpu, Host, HostEvent, MigInstance
from topology.services import host_health_action, record_xid

log = logging.getLogger(__name__)
AGENT = "system:agent"
# Reasons under which a host returns to service by itself when its agent reports.
RETURNS_ON_HEARTBEAT = ("no heartbeat for", AWAITING_AGENT_REASON)
MASTER_PORT_BASE = 29500
OUTPUT_TAIL_CHARS = 8000


@dataclass
class ProcessReport:
    job: int
    run: int
    rank: int
    state: str  # running | exited
    pid: int | None = None
    exit_code: int | None = None
    output_tail: str | None = None
    checkpoint_at: datetime | None = None


@dataclass
class Heartbeat:
    host: Host
    address: str = ""
    gpus: list[dict] = field(default_factory=list)  # [{index, health}]
    events: list[dict] = field(default_factory=list)  # [{kind, gpu, code, detail}]
    processes: list[ProcessReport] = field(default_factory=list)


def master_port(job_id: int) -> int:
    return MASTER_PORT_BASE + job_id % 20000


@transaction.atomic
def agent_heartbeat(beat: Heartbeat, *, now: datetime | None = None) -> dict:
    """Record what the agent reports; answer with the work it should run and the work it should stop."""
    now = now or timezone.now()
    # The host's row only (`of`): PostgreSQL would otherwise lock the joined domain and cluster rows too, and
    # every heartbeat of the cluster would wait for the one before it to commit.
    host = Host.objects.select_for_update(of=("self",)).select_related("domain__cluster").get(pk=beat.host.pk)
    updates = {"last_heartbeat_at": now}
    if beat.address:
        updates["address"] = beat.address
    Host.objects.filter(pk=host.pk).update(**updates)
    if host.state == HostState.DOWN and host.state_reason.startswith(RETURNS_ON_HEARTBEAT):
        host.set_state(HostState.UP, actor=AGENT, reason="its agent reports again", at=now)
    _record_health(host, beat, now)
    _record_processes(host, beat.processes, now)
    return heartbeat_reply(host, now=now, reported=beat.processes)


def _record_health(host: Host, beat: Heartbeat, now: datetime) -> None:
    """Keep GPU health and XID events, then apply the cluster's health policy (topology/health.py)."""
    reported = {int(gpu["index"]): gpu.get("health", GpuHealth.OK) for gpu in beat.gpus if "index" in gpu}
    for gpu_pk, index, known in Gpu.objects.filter(host=host).values_list("pk", "index", "health"):
        health = reported.get(index)
        if health in GpuHealth.values and health != known:
            Gpu.objects.filter(pk=gpu_pk).update(health=health)
            HostEvent.objects.create(host=host, at=now, kind=HostEvent.Kind.INVENTORY, actor=AGENT,
                                     detail=f"GPU {index} reported {health}")
    policy = host.domain.cluster.health
    actions: list[tuple[str, str]] = []  # (action, reason), in the order the events came
    for event in beat.events:
        if event.get("kind") == "xid":
            reason = record_xid(host=host, code=event.get("code"), gpu=event.get("gpu"),
                                detail=event.get("detail") or "", at=now, actor=AGENT)
            actions.append((policy.for_xid(event.get("code")), reason))
    # An empty list means the agent cannot see GPUs at all (no NVML, none configured): nothing to compare.
    if reported:
        _record_visible_gpus(host, set(reported), now, policy.gpus_missing, actions)
    for action, reason in actions:
        if action != "none" and host_health_action(host=host, action=action, reason=reason, at=now):
            host.refresh_from_db()


def _record_visible_gpus(host: Host, visible: set[int], now: datetime, action: str, actions: list) -> None:
    """Fewer GPUs visible than the host has: an event when that changes, and the policy's action."""
    kinds = [HostEvent.Kind.GPU_MISSING, HostEvent.Kind.INVENTORY]
    last = host.events.filter(kind__in=kinds).values_list("kind", "detail").first()
    if len(visible) >= host.gpu_count:
        if last and last[0] == HostEvent.Kind.GPU_MISSING:
            HostEvent.objects.create(host=host, at=now, kind=HostEvent.Kind.INVENTORY, actor=AGENT,
                                     detail=f"all {host.gpu_count} GPUs visible again")
        return
    missing = sorted(set(range(host.gpu_count)) - visible)
    reason = f"{len(visible)} of {host.gpu_count} GPUs visible (missing: GPU {', '.join(map(str, missing))})"
    if last != (HostEvent.Kind.GPU_MISSING, reason):
        HostEvent.objects.create(host=host, at=now, kind=HostEvent.Kind.GPU_MISSING, actor=AGENT, detail=reason)
    actions.append((action, reason))


def _record_processes(host: Host, reports: list[ProcessReport], now: datetime) -> None:
    """Record what the host's processes did. The common case, a process that runs on as it did at the last
    heartbeat, costs nothing per process: its rows are read together and its output written in one update.
    Anything else (it started, it exited, its job waits for other ranks) goes through `_record_process`."""
    if not reports:
        return
    job_ids = {report.job for report in reports}
    processes = {(p.job_id, p.run, p.rank): p for p in JobProcess.objects.filter(host=host, job_id__in=job_ids)}
    jobs = Job.objects.only("state", "restarts", "last_checkpoint_at").in_bulk(job_ids)
    steady, checkpoints = [], {}
    for report in reports:
        process = processes.get((report.job, report.run, report.rank))
        job = jobs.get(report.job)
        if (process is None or job is None or report.state != "running" or process.state != JobProcess.State.RUNNING
                or job.state not in (JobState.RUNNING, JobState.PREEMPTING) or job.restarts != report.run):
            _record_process(host, report, now)
            continue
        changed = False
        if report.output_tail is not None and process.output_tail != report.output_tail[-OUTPUT_TAIL_CHARS:]:
            process.output_tail, changed = report.output_tail[-OUTPUT_TAIL_CHARS:], True
        if report.pid is not None and process.pid != report.pid:
            process.pid, changed = report.pid, True
        if changed:
            steady.append(process)
        if report.checkpoint_at and (job.last_checkpoint_at is None or report.checkpoint_at > job.last_checkpoint_at):
            checkpoints[job.pk] = min(report.checkpoint_at, now)
    if steady:
        JobProcess.objects.bulk_update(steady, ["output_tail", "pid"])
    for job_pk, at in checkpoints.items():
        Job.objects.filter(pk=job_pk).update(last_checkpoint_at=at)


def _record_process(host: Host, report: ProcessReport, now: datetime) -> None:
    process = JobProcess.objects.filter(job_id=report.job, run=report.run, rank=report.rank, host=host).first()
    if process is None or process.state in (JobProcess.State.EXITED, JobProcess.State.LOST):
        return
    fields = {}
    if report.output_tail is not None:
        fields["output_tail"] = report.output_tail[-OUTPUT_TAIL_CHARS:]
    if report.pid is not None:
        fields["pid"] = report.pid
    if report.state == "running" and process.state == JobProcess.State.ASSIGNED:
        fields.update(state=JobProcess.State.RUNNING, started_at=now)
    elif report.state == "exited":
        fields.update(state=JobProcess.State.EXITED, exit_code=report.exit_code, ended_at=now)
    if fields:
        JobProcess.objects.filter(pk=process.pk).update(**fields)
    job = Job.objects.get(pk=report.job)
    if report.checkpoint_at and (job.last_checkpoint_at is None or report.checkpoint_at > job.last_checkpoint_at):
        Job.objects.filter(pk=job.pk).update(last_checkpoint_at=min(report.checkpoint_at, now))
    if job.restarts != report.run or job.state not in LIVE_STATES:
        return
    ranks = JobProcess.objects.filter(job=job, run=job.restarts)
    if report.state == "running":
        # Only a starting job moves; a running one costs no more queries, heartbeat after heartbeat.
        if job.state == JobState.STARTING and not ranks.exclude(state=JobProcess.State.RUNNING).exists():
            Job.objects.filter(pk=job.pk, state=JobState.STARTING).update(state=JobState.RUNNING)
        return
    if report.exit_code not in (0, None) and not job.stop_cause:
        # One rank failed: stop the others, then the job fails.
        Job.objects.filter(pk=job.pk, stop_cause="").update(
            stop_cause=f"failed: rank {report.rank} exited with {report.exit_code}",
            stop_deadline=now + timezone.timedelta(seconds=job.cluster.grace_period_seconds),
        )
    if ranks.exclude(state__in=[JobProcess.State.EXITED, JobProcess.State.LOST]).exists():
        return
    exit_code = ranks.aggregate(worst=Max("exit_code"))["worst"]
    job.refresh_from_db()
    job_end_run(job=job, outcome="exited", exit_code=exit_code, at=now, actor=f"agent:{host.name}")


def heartbeat_reply(host: Host, *, now: datetime, reported=()) -> dict:
    """Assignments the agent should be running and processes it should stop."""
    cluster = host.domain.cluster
    processes = list(
        JobProcess.objects.filter(host=host, job__state__in=LIVE_STATES)
        .exclude(state__in=[JobProcess.State.EXITED, JobProcess.State.LOST])
        .select_related("job").order_by("job_id", "rank")
    )
    current = [p for p in processes if p.run == p.job.restarts]
    assignments, stops = [], []
    job_ids = [p.job_id for p in current]
    rank_zero = _rank_zero_addresses(job_ids)
    gpus_by_job, mig_by_job = _gpu_indices(host, job_ids)
    world_sizes = _world_sizes(job_ids)
    for process in current:
        job = process.job
        if job.stop_cause:
            grace_left = max(0.0, (job.stop_deadline - now).total_seconds()) if job.stop_deadline else 0.0
            stops.append({"job": job.pk, "run": process.run, "rank": process.rank, "grace": grace_left,
                          "cause": job.stop_cause})
            continue
        assignments.append({
            "job": job.pk, "run": process.run, "rank": process.rank, "world_size": world_sizes.get(job.pk, 1),
            "gpus": gpus_by_job.get(job.pk, []), "gpu_milli": job.gpu_milli, "command": job.command,
            "master_addr": rank_zero.get(job.pk) or host.address or host.name, "master_port": master_port(job.pk),
            "restarts": job.restarts, "grace": cluster.grace_period_seconds if job.allocated
            else cluster.unallocated_grace_seconds,
            # MIG jobs: the instances to expose instead of whole GPUs (client/agent.py resolves their UUIDs).
            "mig": mig_by_job.get(job.pk, []),
        })
    # Anything the agent runs that the server no longer wants (an old run, an ended job) stops now.
    wanted = {(p.job_id, p.run, p.rank) for p in current}
    for report in reported:
        if report.state == "running" and (report.job, report.run, report.rank) not in wanted:
            stops.append({"job": report.job, "run": report.run, "rank": report.rank, "grace": 0.0,
                          "cause": "not assigned to this host any more"})
    return {
        "host": host.name, "state": host.state,  # as the heartbeat left it (its changes keep `host` current)
        "heartbeat_interval": max(1, min(10, cluster.heartbeat_timeout_seconds // 6)),
        "assignments": assignments, "stops": stops,
        # The agent tells its checkpoint times in this clock, whatever its own says.
        "server_time": now.isoformat(),
    }


def _world_sizes(job_ids) -> dict[int, int]:
    if not job_ids:  # an idle host: no query (most hosts of a busy cluster are not idle, most of a quiet one are)
        return {}
    return dict(
        JobProcess.objects.filter(job_id__in=job_ids, run=F("job__restarts"))
        .values("job_id").annotate(ranks=Count("id")).values_list("job_id", "ranks")
    )


def _rank_zero_addresses(job_ids) -> dict[int, str]:
    if not job_ids:
        return {}
    rows = JobProcess.objects.filter(job_id__in=job_ids, rank=0).values_list("job_id", "run", "job__restarts",
                                                                            "host__address", "host__name")
    return {job_id: address or name for job_id, run, restarts, address, name in rows if run == restarts}


def _gpu_indices(host: Host, job_ids) -> tuple[dict[int, list[int]], dict[int, list[dict]]]:
    """Job id → the indices of its GPUs on the host, and → its MIG instances there (one query)."""
    from scheduler.models import GpuAssignment

    indices: dict[int, list[int]] = {}
    instances: dict[int, list[dict]] = {}
    if not job_ids:
        return indices, instances
    for job_id, index, profile, start in (
        GpuAssignment.objects.filter(job_id__in=job_ids, gpu__host=host, released_at__isnull=True)
        .order_by("gpu__index").values_list("job_id", "gpu__index", "mig_instance__profile", "mig_instance__start")
    ):
        indices.setdefault(job_id, []).append(index)
        if profile:
            instances.setdefault(job_id, []).append({
                "gpu": index, "profile": profile, "start": start,
                "id": MigInstance.stable_id(host.name, index, start),
            })
    return indices, instances


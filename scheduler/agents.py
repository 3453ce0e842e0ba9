"""What agents tell the server and what the server answers, one heartbeat at a time.

A heartbeat is applied entry by entry: the view refuses a bad GPU, event or process entry by name
(scheduler/api/serializers.py) and everything else is applied. Text from a host is cleaned again here
(client/text.py: NUL → U+FFFD, escape sequences and other control characters removed, length capped):
one job's output must never stop its host's heartbeats.
"""

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.core.exceptions import ObjectDoesNotExist
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from client.text import clean_output
from scheduler.choices import LIVE_STATES, JobState
from scheduler.core.capacity import per_host_share
from scheduler.core.lifecycle import Cause, Outcome
from scheduler.core.reservation import grace_period_for
from scheduler.models import GpuAssignment, Job, JobProcess
from scheduler.services import job_end_run
from topology.choices import GpuHealth, HostState
from topology.models import AWAITING_AGENT_REASON, Gpu, Host, HostEvent, MigInstance
from topology.services import host_health_action, record_health_event, record_xid

log = logging.getLogger(__name__)
AGENT = "system:agent"
# Reasons under which a host returns to service by itself when its agent reports.
RETURNS_ON_HEARTBEAT = ("no heartbeat for", AWAITING_AGENT_REASON)
MASTER_PORT_BASE = 29500
OUTPUT_TAIL_CHARS = 8000
ERROR_CHARS = 500
# What the host records of its agent, from the heartbeat's `agent` entry.
AGENT_FACTS = {"mode": "agent_mode", "account": "agent_account", "containment": "containment",
               "notes": "containment_note"}


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
    error: str = ""  # the agent could not start it, or the kernel killed it (out of memory)

    def __post_init__(self):
        if self.output_tail is not None:
            self.output_tail = clean_output(self.output_tail, limit=OUTPUT_TAIL_CHARS)
        self.error = clean_output(self.error or "", limit=ERROR_CHARS)


@dataclass
class Heartbeat:
    host: Host
    address: str = ""
    gpus: list[dict] = field(default_factory=list)  # [{index, health, uuid?, ecc_uncorrected_volatile?, ...}]
    events: list[dict] = field(default_factory=list)  # [{kind: xid|nvml_error, gpu, code, detail}]
    processes: list[ProcessReport] = field(default_factory=list)
    agent: dict | None = None  # {mode, account, uid, containment, notes}
    refused: list[dict] = field(default_factory=list)  # entries the view refused, echoed in the reply


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
    for key, name in AGENT_FACTS.items():
        value = clean_output(str((beat.agent or {}).get(key) or ""), limit=Host._meta.get_field(name).max_length)
        if beat.agent is not None and getattr(host, name) != value:
            updates[name] = value
            setattr(host, name, value)
    Host.objects.filter(pk=host.pk).update(**updates)
    if host.state == HostState.DOWN and host.state_reason.startswith(RETURNS_ON_HEARTBEAT):
        host.set_state(HostState.UP, actor=AGENT, reason="its agent reports again", at=now)
    _record_health(host, beat, now)
    _record_processes(host, beat.processes, now)
    return heartbeat_reply(host, now=now, reported=beat.processes, refused=beat.refused)


# GPU facts NVML reports, kept on the GPU's row as they change.
NVML_FIELDS = ("uuid", "ecc_uncorrected_volatile", "retired_pages_pending", "remapped_rows_pending")


def _record_health(host: Host, beat: Heartbeat, now: datetime) -> None:
    """Keep GPU health and health events, then apply the cluster's health policy (topology/health.py)."""
    reported = {gpu["index"]: gpu for gpu in beat.gpus}
    policy = host.domain.cluster.health
    actions: list[tuple[str, str]] = []  # (action, reason), in the order the events came
    known = {gpu.index: gpu for gpu in Gpu.objects.filter(host=host).only("pk", "index", "health", *NVML_FIELDS)}
    for index, gpu in known.items():
        report = reported.get(index)
        if report is None:
            continue
        health = report.get("health", GpuHealth.OK)
        changes = {}
        if health in GpuHealth.values and health != gpu.health:
            changes["health"] = health
            HostEvent.objects.create(host=host, at=now, kind=HostEvent.Kind.INVENTORY, actor=AGENT, gpu=index,
                                     detail=f"GPU {index} reported {health}")
        for name in NVML_FIELDS:
            if name in report and report[name] != getattr(gpu, name) and not (name == "uuid" and not report[name]):
                changes[name] = report[name]
        errors = report.get("ecc_uncorrected_volatile")
        if errors and errors > (gpu.ecc_uncorrected_volatile or 0):
            reason = record_health_event(host=host, kind=HostEvent.Kind.ECC, gpu=index, at=now, actor=AGENT,
                                         detail=f"{errors} uncorrected ECC error{'s' if errors != 1 else ''} "
                                                "since the driver loaded")
            actions.append((policy.ecc_uncorrected, reason))
        pending = [what for what, name in (("retired pages", "retired_pages_pending"),
                                           ("remapped rows", "remapped_rows_pending"))
                   if report.get(name) and not getattr(gpu, name)]
        if pending:
            reason = record_health_event(host=host, kind=HostEvent.Kind.ROWS_PENDING, gpu=index, at=now, actor=AGENT,
                                         detail=f"{' and '.join(pending)} pending: takes effect at a GPU reset")
            actions.append((policy.rows_pending, reason))
        if changes:
            Gpu.objects.filter(pk=gpu.pk).update(**changes)
    for event in beat.events:
        if event["kind"] == "xid":
            reason = record_xid(host=host, code=event["code"], gpu=event.get("gpu"),
                                detail=clean_output(event.get("detail") or "", limit=500), at=now, actor=AGENT)
            actions.append((policy.for_xid(event["code"]), reason))
        elif event["kind"] == "nvml_error":
            reason = record_health_event(host=host, kind=HostEvent.Kind.NVML_ERROR, gpu=event.get("gpu"), at=now,
                                         actor=AGENT, detail=clean_output(event.get("detail") or "", limit=500))
            actions.append((policy.nvml_error, reason))
    # An empty list means the agent cannot see GPUs at all (no NVML, none configured): nothing to compare.
    if reported:
        _record_visible_gpus(host, set(reported), set(known), now, policy.gpus_missing, actions)
    for action, reason in actions:
        if action != "none" and host_health_action(host=host, action=action, reason=reason, at=now):
            host.refresh_from_db()


def _gpu_list(indices) -> str:
    return "GPU " + ", ".join(map(str, sorted(indices)))


def _record_visible_gpus(host: Host, visible: set[int], expected: set[int], now: datetime, action: str,
                         actions: list) -> None:
    """The GPUs the agent sees against the host's: those missing (the policy's action) and those it does not
    know (an inventory mismatch, recorded), compared as sets of indices; an event when that changes."""
    kinds = [HostEvent.Kind.GPU_MISSING, HostEvent.Kind.INVENTORY]
    last = host.events.filter(kind__in=kinds).values_list("kind", "detail").first()
    missing, unknown = expected - visible, visible - expected
    if not missing and not unknown:
        if last and last[0] == HostEvent.Kind.GPU_MISSING:
            HostEvent.objects.create(host=host, at=now, kind=HostEvent.Kind.INVENTORY, actor=AGENT,
                                     detail=f"all {len(expected)} GPUs visible again")
        return
    parts = ([f"missing: {_gpu_list(missing)}"] if missing else []) + (
        [f"unknown: {_gpu_list(unknown)}, not in the inventory"] if unknown else [])
    reason = f"{len(visible & expected)} of {len(expected)} GPUs visible ({'; '.join(parts)})"
    if last != (HostEvent.Kind.GPU_MISSING, reason):
        HostEvent.objects.create(host=host, at=now, kind=HostEvent.Kind.GPU_MISSING, actor=AGENT, detail=reason)
    if missing:
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
    if report.error:
        fields["error"] = report.error
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
    if (report.error or report.exit_code not in (0, None)) and not job.stop_cause:
        # One rank failed (or could not start): stop the others, then the job fails.
        # An agent's error is a whole sentence (`no such user on node-01-h01: asmith`, `rank 0 out of memory …`).
        cause = report.error or f"rank {report.rank} exited with {report.exit_code}"
        Job.objects.filter(pk=job.pk, stop_cause="").update(
            stop_cause=Cause.FAILED, stop_detail=cause[:200],
            stop_deadline=now + timezone.timedelta(seconds=job.cluster.grace_period_seconds),
        )
    if ranks.exclude(state__in=[JobProcess.State.EXITED, JobProcess.State.LOST]).exists():
        return
    exit_code = ranks.aggregate(worst=Max("exit_code"))["worst"]
    job.refresh_from_db()
    job_end_run(job=job, outcome=Outcome.EXITED, exit_code=exit_code, at=now, actor=f"agent:{host.name}")


def heartbeat_reply(host: Host, *, now: datetime, reported=(), refused=()) -> dict:
    """Assignments the agent should be running and processes it should stop.

    An assignment says whom the job runs as (`account`: the submitter's posix_user, else their username),
    where (`workdir`, empty: the account's home), with which variables of its own (`env`), within what
    memory (`memory_mib`: the job's memory request, its share for this host; 0: no limit) and with which
    peers (`hosts`, by rank). The agent enforces the cluster's `allow_root_jobs`.
    """
    cluster = host.domain.cluster
    policy = cluster.scheduling_policy()
    processes = list(
        JobProcess.objects.filter(host=host, job__state__in=LIVE_STATES)
        .exclude(state__in=[JobProcess.State.EXITED, JobProcess.State.LOST])
        .select_related("job__user__profile").order_by("job_id", "rank")
    )
    current = [p for p in processes if p.run == p.job.restarts]
    assignments, stops = [], []
    job_ids = [p.job_id for p in current]
    rank_hosts = _rank_hosts(job_ids)
    gpus_by_job, mig_by_job = _gpu_indices(host, job_ids)
    for process in current:
        job = process.job
        if job.stop_cause:
            grace_left = max(0.0, (job.stop_deadline - now).total_seconds()) if job.stop_deadline else 0.0
            stops.append({"job": job.pk, "run": process.run, "rank": process.rank, "grace": grace_left,
                          "cause": job.shown_stop_cause})
            continue
        peers = rank_hosts.get(job.pk) or [host.address or host.name]
        gpus = gpus_by_job.get(job.pk, [])
        assignments.append({
            "job": job.pk, "run": process.run, "rank": process.rank, "world_size": len(peers),
            "gpus": gpus, "gpu_milli": job.gpu_milli, "command": job.command,
            "master_addr": peers[0], "master_port": master_port(job.pk), "hosts": peers,
            "restarts": job.restarts, "grace": grace_period_for(job.allocated, policy),
            # MIG jobs: the instances to expose instead of whole GPUs (client/agent.py resolves their UUIDs).
            "mig": mig_by_job.get(job.pk, []),
            "account": _account(job.user), "workdir": job.workdir, "env": job.env or {},
            "memory_mib": per_host_share(job.memory_gib, len(gpus), job.gpus) * 1024,
        })
    # Anything the agent runs that the server no longer wants (an old run, an ended job) stops now.
    wanted = {(p.job_id, p.run, p.rank) for p in current}
    for report in reported:
        if report.state == "running" and (report.job, report.run, report.rank) not in wanted:
            stops.append({"job": report.job, "run": report.run, "rank": report.rank, "grace": 0.0,
                          "cause": "not assigned to this host any more"})
    return {
        "host": host.name, "state": host.state,  # as the heartbeat left it (its changes keep `host` current)
        "cluster": cluster.name, "allow_root_jobs": cluster.allow_root_jobs,
        "heartbeat_interval": max(1, min(10, cluster.heartbeat_timeout_seconds // 6)),
        "assignments": assignments, "stops": stops,
        # The agent tells its checkpoint times in this clock, whatever its own says.
        "server_time": now.isoformat(),
        # Entries of the heartbeat refused by name; everything else was applied.
        "refused": list(refused),
    }


def _account(user) -> str:
    """The OS account a user's jobs run as (budgets.models.UserProfile), from the row already joined."""
    try:
        return user.profile.posix_user or user.username
    except ObjectDoesNotExist:
        return user.username


def _rank_hosts(job_ids) -> dict[int, list[str]]:
    """Job id → the addresses of its current run's hosts, by rank (rank 0's is MASTER_ADDR); one query."""
    if not job_ids:  # an idle host: no query (most hosts of a busy cluster are not idle, most of a quiet one are)
        return {}
    hosts: dict[int, list[str]] = {}
    for job_id, address, name in (
        JobProcess.objects.filter(job_id__in=job_ids, run=F("job__restarts")).order_by("job_id", "rank")
        .values_list("job_id", "host__address", "host__name")
    ):
        hosts.setdefault(job_id, []).append(address or name)
    return hosts


def _gpu_indices(host: Host, job_ids) -> tuple[dict[int, list[int]], dict[int, list[dict]]]:
    """Job id → the indices of its GPUs on the host, and → its MIG instances there (one query)."""
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


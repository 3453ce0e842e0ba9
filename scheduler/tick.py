"""The tick: lock → snapshot → core.schedule → apply in one transaction → tick record.

`apply_decisions` is the only writer of scheduling decisions. Every change is
a compare-and-swap on the job's state, and the database refuses a GPU held
twice, so a tick that raced another (or crashed half-way, rolled back) leaves
nothing double-booked: the next tick starts again from what is committed.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from scheduler import core
from scheduler.choices import LIVE_STATES, EventKind, JobState
from scheduler.core import mig as mig_geometry
from scheduler.core.durations import format_duration
from scheduler.core.engine import collector_paused
from scheduler.core.lifecycle import Cause, Outcome, StopCause
from scheduler.core.measures import Sample, running_after, sample_after
from scheduler.core.model import hosts_of
from scheduler.executors import advance_simulated, expire_heartbeats, reconcile
from scheduler.history import after_tick
from scheduler.models import GpuAssignment, Job, JobEvent, JobProcess, Tick
from scheduler.notify import job_preempted, job_started
from scheduler.services import job_end_run
from scheduler.snapshot import TickInput, build_snapshot, moment, seconds
from topology.choices import Executor, HostState
from topology.models import Cluster, Gpu, Host, HostEvent, MigInstance

log = logging.getLogger(__name__)
SCHEDULER = "system:scheduler"
QUEUE_FIELDS_CHUNK = 5000  # pending jobs' rows per statement of `_write_queue_fields` on PostgreSQL


@dataclass
class TickResult:
    cluster: str
    started: int = 0
    preempted: int = 0
    pending: int = 0
    running: int = 0
    skipped: list = field(default_factory=list)  # decisions another writer made stale
    tick: Tick | None = None
    # The decisions that took effect (None: the tick rolled back), for measuring the cluster after it.
    applied: core.Decisions | None = None


def run_tick(cluster: Cluster, *, now: datetime | None = None, leader: str = "") -> TickResult:
    """One scheduling pass over `cluster`. The caller holds the leader lock."""
    began = time.perf_counter()
    now = now or timezone.now()
    expire_heartbeats(cluster, now=now)
    if cluster.executor == Executor.SIMULATED:
        advance_simulated(cluster, now=now)
    reconcile(cluster, now=now)

    # The snapshot, the decision and the writes make many short-lived objects, freed as they go: the cyclic
    # collector's passes over them cost about half of a 16k-GPU tick's snapshot and free next to nothing, so it
    # waits until the tick is written (`collector_paused`).
    with collector_paused():
        snapshot_began = time.perf_counter()
        tick_input = build_snapshot(cluster, now=now)
        decide_began = time.perf_counter()
        decisions = core.schedule(tick_input.snapshot, now=now.timestamp(), policy=cluster.scheduling_policy())
        apply_began = time.perf_counter()
        try:
            result = apply_decisions(cluster, tick_input, decisions)
        except IntegrityError as error:
            # Another writer changed the GPUs under us: nothing of this tick was kept.
            log.warning("tick on %s rolled back: %s", cluster.name, error)
            result = TickResult(cluster=cluster.name, skipped=[f"rolled back: {error}"])
    finished = time.perf_counter()
    result.tick = Tick.objects.create(
        cluster=cluster, started_at=now, duration=finished - began, snapshot_seconds=decide_began - snapshot_began,
        decide_seconds=apply_began - decide_began, apply_seconds=finished - apply_began, started=result.started,
        preempted=result.preempted, pending=result.pending, running=result.running, leader=leader,
        unit_ratios={name: ratio for name, ratio in decisions.unit_ratios.items() if ratio != float("inf")},
        queue_order=[asdict(step) for step in decisions.queue_order],
        reservations=[
            {"job": int(r.job_id), "domain": r.domain, "hosts": list(r.hosts),
             "expected_start": moment(r.expected_start).isoformat(), "reason": r.reason}
            for r in decisions.reservations
        ],
    )
    try:
        after_tick(cluster, now=now, duration=result.tick.duration, measure=_measure(tick_input, result.applied))
    except DatabaseError as error:
        # The dashboards' bookkeeping never costs a tick.
        log.warning("tick bookkeeping on %s failed: %s", cluster.name, error)
    return result


@transaction.atomic
def apply_decisions(cluster: Cluster, tick_input: TickInput, decisions: core.Decisions) -> TickResult:
    now = tick_input.now
    result = TickResult(cluster=cluster.name)
    preempted, started = [], []
    for preemption in decisions.preemptions:
        if _apply_preemption(cluster, preemption, now):
            result.preempted += 1
            preempted.append(preemption)
        else:
            result.skipped.append(f"preempt {preemption.job_id}")
    for layout in decisions.mig_layouts:
        _apply_mig_layout(tick_input, layout, now)
    for start in decisions.starts:
        if _apply_start(cluster, tick_input, start, now):
            result.started += 1
            started.append(start)
        else:
            result.skipped.append(f"start {start.job_id}")
    for change in decisions.host_changes:
        host = Host.objects.select_for_update().get(name=change.host)
        if host.state != HostState.DRAINING:
            continue  # resumed (or down) since the snapshot: the decision was for a drain that is over
        if change.state == HostState.DRAINED:
            # The on-call's (or the health policy's) reason, who and when stay on the host until resume.
            host.set_state(change.state, actor=SCHEDULER, reason=change.reason, at=now, keep_reason=True)
        else:
            _write_drain_leaves(host, change)
    _write_earmarks(tick_input, decisions, now)
    _write_queue_fields(tick_input, decisions)
    result.applied = core.Decisions(starts=tuple(started), preemptions=tuple(preempted))
    result.pending = len(decisions.pending)
    result.running = running_after(tick_input.snapshot, result.applied)
    return result


def _measure(tick_input: TickInput, applied: core.Decisions | None) -> Callable[[], Sample] | None:
    """How to measure the cluster after the tick, for the dashboard's history: from the snapshot and the
    decisions that took effect, no second read of the inventory. None when the tick rolled back (what the
    database holds is then not what the snapshot saw): the next tick takes the sample."""
    if applied is None:
        return None
    return lambda: sample_after(tick_input.snapshot, applied, total_gpus=len(tick_input.gpu_pks))


def _apply_mig_layout(tick_input: TickInput, layout: core.MigLayout, now: datetime) -> None:
    """Give a MIG GPU the layout the core chose: destroy idle instances it drops, create the new ones.

    An instance a live job holds is never destroyed: if one would be (another
    writer started a job there since the snapshot), the tick rolls back.
    """
    gpu = Gpu.objects.select_for_update().select_related("host").get(pk=tick_input.gpu_pks[layout.gpu])
    if not gpu.mig_enabled:
        raise IntegrityError(f"GPU {layout.gpu} is not in MIG mode")
    try:
        wanted = set(mig_geometry.validate_layout(layout.instances))
    except mig_geometry.MigLayoutError as error:
        raise IntegrityError(f"GPU {layout.gpu}: {error}") from None
    current = {(i.profile, i.start): i for i in MigInstance.objects.filter(gpu=gpu, destroyed_at__isnull=True)}
    dropped = [instance.pk for key, instance in current.items() if key not in wanted]
    if GpuAssignment.objects.filter(mig_instance__in=dropped, released_at__isnull=True).exists():
        raise IntegrityError(f"GPU {layout.gpu}: a new layout would destroy an instance a job holds")
    before = mig_geometry.layout_summary(list(current))
    MigInstance.objects.filter(pk__in=dropped).update(destroyed_at=now)
    MigInstance.objects.bulk_create([
        MigInstance(gpu=gpu, profile=profile, start=start, created_at=now)
        for profile, start in sorted(wanted - set(current), key=lambda i: i[1])
    ])
    HostEvent.objects.create(
        host=gpu.host, at=now, kind=HostEvent.Kind.INVENTORY, actor=SCHEDULER,
        detail=f"GPU {gpu.index} MIG layout: {mig_geometry.layout_summary(layout.instances)} (was {before}); "
               f"{layout.reason}"[:1000],
    )


def _apply_start(cluster: Cluster, tick_input: TickInput, start: core.Start, now: datetime) -> bool:
    job_pk = int(start.job_id)
    state = JobState.RUNNING if cluster.executor == Executor.SIMULATED else JobState.STARTING
    claimed = Job.objects.filter(pk=job_pk, state=JobState.PENDING).update(
        state=state, run_started_at=now, queue_position=None, pending_reason="", estimated_start=None,
        earmarked_gpus=[], run_protected_until=now + timedelta(seconds=start.protection),
    )
    if not claimed:
        return False
    Job.objects.filter(pk=job_pk, started_at__isnull=True).update(started_at=now)
    gpu_pks = [tick_input.gpu_pks[gpu_id] for gpu_id in start.gpu_ids]
    instance = None
    if start.mig_profile:
        # The one live instance of that profile at that slot; the unique constraint refuses a second holder.
        instance = MigInstance.objects.filter(gpu_id=gpu_pks[0], profile=start.mig_profile, start=start.mig_start,
                                              destroyed_at__isnull=True).first()
        if instance is None:
            raise IntegrityError(f"no {start.mig_profile} instance at slice {start.mig_start} of {start.gpu_ids[0]}")
    # The database adds their milli to each GPU (a trigger) and its check constraint refuses a GPU beyond
    # 1000 milli: an overcommit rolls the tick back.
    GpuAssignment.objects.bulk_create([
        GpuAssignment(job_id=job_pk, gpu_id=pk, milli=start.gpu_milli, assigned_at=now, mig_instance=instance)
        for pk in gpu_pks
    ])
    job = Job.objects.only("restarts").get(pk=job_pk)
    hosts = hosts_of(start.gpu_ids)
    # A simulated cluster has no agent to report its ranks started: they run from the start, as the job does.
    process_state, process_start = ((JobProcess.State.RUNNING, now) if state == JobState.RUNNING
                                    else (JobProcess.State.ASSIGNED, None))
    JobProcess.objects.bulk_create([
        JobProcess(job_id=job_pk, host_id=tick_input.host_pks[host], run=job.restarts, rank=rank,
                   state=process_state, started_at=process_start)
        for rank, host in enumerate(hosts)
    ])
    JobEvent.objects.create(
        job_id=job_pk, at=now, kind=EventKind.START, actor=SCHEDULER,
        detail=" ".join(
            f"{gpu_id}/{start.mig_profile}@{start.mig_start}" if start.mig_profile
            else gpu_id if start.gpu_milli == 1000 else f"{gpu_id}@{start.gpu_milli}" for gpu_id in start.gpu_ids
        ),
        cause=start.reason[:200],
    )
    log.info("job %s started on %s", job_pk, ", ".join(hosts), extra={"job": job_pk, "host": ",".join(hosts)})
    job_started(job_pk, hosts=hosts, at=now)
    return True


def _apply_preemption(cluster: Cluster, preemption: core.Preemption, now: datetime) -> bool:
    job_pk = int(preemption.job_id)
    cause = StopCause.parse(preemption.cause)
    if cause.kind is Cause.DOWN:
        # The host is gone and its processes with it: the run ends now.
        job = Job.objects.filter(pk=job_pk, state__in=LIVE_STATES).first()
        if job is None:
            return False
        JobEvent.objects.create(job=job, at=now, kind=EventKind.PREEMPT, actor=SCHEDULER,
                                cause=preemption.cause, detail=preemption.reason)
        Job.objects.filter(pk=job_pk).update(preemptions=F("preemptions") + 1)
        job_preempted(job_pk, reason=preemption.reason, requeue=preemption.requeue, at=now)
        return job_end_run(job=job, outcome=Outcome.LOST, at=now, actor=SCHEDULER, cause=cause) is not None
    claimed = Job.objects.filter(pk=job_pk, state__in=[JobState.STARTING, JobState.RUNNING], stop_cause="").update(
        state=JobState.PREEMPTING, stop_cause=preemption.cause,
        stop_deadline=now + timedelta(seconds=preemption.grace),
        preempted_for_id=int(preemption.preemptor) if preemption.preemptor else None,
        preemptions=F("preemptions") + 1,
    )
    if not claimed:
        return False
    JobEvent.objects.create(
        job_id=job_pk, at=now, kind=EventKind.PREEMPT, actor=SCHEDULER, cause=preemption.cause,
        detail=f"{preemption.reason} (SIGTERM now, SIGKILL after {format_duration(preemption.grace)}; "
               f"{'requeues' if preemption.requeue else 'does not requeue'})",
    )
    log.info("job %s preempted: %s", job_pk, preemption.cause, extra={"job": job_pk})
    job_preempted(job_pk, reason=preemption.reason, requeue=preemption.requeue, at=now)
    return True


def _write_drain_leaves(host: Host, change: core.HostChange) -> None:
    """Keep when each job leaves a draining host as the core decided it (rule 7), for the host page, the API
    and the CLI; only when it changed."""
    leaves = [{"job": int(left.job_id), "at": moment(left.at).isoformat(), "why": left.why} for left in change.leaves]
    if host.drain_leaves != leaves:
        Host.objects.filter(pk=host.pk).update(drain_leaves=leaves)


def _write_earmarks(tick_input: TickInput, decisions: core.Decisions, now: datetime) -> None:
    """Keep every pending job's claim on GPUs as the core left it (rule 4), and say so on its timeline."""
    started = {start.job_id for start in decisions.starts}
    drops = {drop.job_id: drop.reason for drop in decisions.earmark_drops}
    for pk in sorted(set(tick_input.earmarks) | {int(job_id) for job_id in decisions.earmarks}):
        job_id = str(pk)
        if job_id in started:
            continue  # the start cleared it
        claim = decisions.earmarks.get(job_id, ())
        stored = tick_input.earmarks.get(pk, ())
        if claim == stored:
            continue
        if not Job.objects.filter(pk=pk, state=JobState.PENDING).update(earmarked_gpus=list(claim)):
            continue
        if claim and not stored:
            detail = (f"{len(claim)} GPU{'s' if len(claim) != 1 else ''} held for it until it starts "
                      f"({_hosts_label(claim)}): its victims' and the free ones it will start on")
        elif claim:
            detail = f"GPUs held for it are now {len(claim)} ({_hosts_label(claim)})"
        else:
            detail = drops.get(job_id, "the GPUs held for it are free for others again")
        JobEvent.objects.create(job_id=pk, at=now, kind=EventKind.EARMARK, actor=SCHEDULER, detail=detail[:2000],
                                cause="dropped" if not claim else "held")


def _hosts_label(gpu_ids) -> str:
    hosts = hosts_of(gpu_ids)
    return ", ".join(hosts[:4]) + (f" and {len(hosts) - 4} more hosts" if len(hosts) > 4 else "")


def _write_queue_fields(tick_input: TickInput, decisions: core.Decisions) -> None:
    """Store position, reason and estimate on pending jobs, writing only the rows that changed.

    When usage moves, most of the queue's reasons change with it (ratios are in the text): on PostgreSQL the rows
    go in one statement per 5,000 (arrays unnested), not a round trip each."""
    rows = []
    stored = tick_input.pending_fields
    for job_id, status in decisions.pending.items():
        pk = int(job_id)
        estimate = moment(status.estimated_start)
        reason = status.reason[:1000]
        # As stored: the estimate to the microsecond, compared as `seconds` (what the snapshot read).
        if stored.get(pk) != (status.position, reason, seconds(estimate)):
            rows.append((pk, status.position, reason, estimate))
    if not rows:
        return
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for chunk in range(0, len(rows), QUEUE_FIELDS_CHUNK):
                ids, positions, reasons, estimates = zip(*rows[chunk:chunk + QUEUE_FIELDS_CHUNK], strict=True)
                cursor.execute(
                    f"UPDATE {table} SET queue_position = v.position, pending_reason = v.reason, "
                    f"estimated_start = v.estimate "
                    f"FROM unnest(%s::bigint[], %s::integer[], %s::text[], %s::timestamptz[]) "
                    f"AS v(id, position, reason, estimate) WHERE {table}.id = v.id AND {table}.state = 'pending'",
                    [list(ids), list(positions), list(reasons), list(estimates)],
                )
        else:
            # SQLite is in-process: a statement per row costs no round trip.
            cursor.executemany(
                f"UPDATE {table} SET queue_position = %s, pending_reason = %s, estimated_start = %s "
                f"WHERE id = %s AND state = 'pending'",
                [(position, reason, estimate, pk) for pk, position, reason, estimate in rows],
            )

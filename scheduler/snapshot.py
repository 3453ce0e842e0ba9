"""The only reader for scheduling: the ORM's state of one cluster as a core Snapshot.

A handful of set-based queries, whatever the number of jobs: hosts, GPUs,
units and shares, window usage from run intervals, live assignments, live
jobs, pending jobs.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import FloatField, Func
from django.utils import timezone

from budgets.models import Unit
from budgets.selectors import current_shares
from scheduler.choices import LIVE_STATES, EventKind, JobState
from scheduler.core import jobspec
from scheduler.core import model as core
from scheduler.models import GpuAssignment, Job, JobEvent
from scheduler.usage import project_usage
from topology.choices import GpuHealth
from topology.models import Domain, Gpu, Host, MigInstance

PRIORITY = jobspec.PRIORITIES
# The job table's fields (scheduler/core/jobspec.py) the core's job classes take by name, as the row stores them.
PENDING_AS_IS = jobspec.as_is(core.PendingJob)
RUNNING_AS_IS = jobspec.as_is(core.RunningJob)


def seconds(at: datetime | None) -> float | None:
    """Core time: epoch seconds."""
    return at.timestamp() if at is not None else None


def moment(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, tz=UTC) if value is not None else None


class Epoch(Func):
    """A stored moment as core time (`seconds`), computed by the database.

    Exactly `seconds()` of the datetime the ORM would give: both are the stored
    microseconds ÷ 10⁶ rounded once to a float. It spares the tick a Python
    datetime per pending job (psycopg parses timestamps in Python under Django).
    """

    output_field = FloatField()

    @property
    def convert_value(self):
        return self._convert_value_noop  # a float (or NULL) already: no converter called per row

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, template="EXTRACT(EPOCH FROM %(expressions)s)::double precision",
                           **extra)

    def as_sqlite(self, compiler, connection, **extra):
        # SQLite keeps a moment of a column as UTC text, 'YYYY-MM-DD HH:MM:SS[.ffffff]' (the ORM) or with '+00:00'
        # after it (the tick's raw writes): whole seconds from julianday (exact once rounded), the microseconds
        # from the text, one division.
        return self.as_sql(compiler, connection, template=(
            "((CAST(round((julianday(substr(%(expressions)s, 1, 19)) - 2440587.5) * 86400) AS INTEGER) * 1000000"
            " + CASE WHEN substr(%(expressions)s, 20, 1) = '.' THEN CAST(substr(%(expressions)s, 21, 6) AS INTEGER)"
            " ELSE 0 END) / 1000000.0)"
        ), **extra)


@dataclass
class TickInput:
    """A snapshot plus what the writer needs to map decisions back to rows."""

    snapshot: core.Snapshot
    now: datetime
    gpu_pks: dict[str, int]  # "host:index" → Gpu pk
    host_pks: dict[str, int]
    # job pk → (queue_position, pending_reason, estimated_start as `seconds`) as stored
    pending_fields: dict[int, tuple[int | None, str, float | None]]
    earmarks: dict[int, tuple[str, ...]]  # pending job pk → its claim on GPUs as stored (rule 4)


JOB_FIELDS = [
    "pk", "project__name", "user__username", "gpu_type", "priority", "mig_profile", "preemptions",
    *dict.fromkeys(PENDING_AS_IS + RUNNING_AS_IS),
]
# A pending job's row as the tick reads it (tuples, not dicts: a queue has 10k of them): the fields the core
# takes as stored first, then the others in `_pending_jobs`' order.
PENDING_COLUMNS = (
    *PENDING_AS_IS, "pk", "project_id", "user_id", "gpu_type", "priority", "mig_profile", "preemptions",
    "submit_time", "requeue_time", "queue_position", "pending_reason", "estimate",
)


def _running_jobs(jobs, assignments, gpu_names: dict[int, str], *, now: datetime) -> list[core.RunningJob]:
    """The live ones of `jobs` holding some of `assignments`' GPUs, as the core sees them; two queries."""
    held: dict[int, list[str]] = defaultdict(list)
    instances: dict[int, tuple[str, int]] = {}  # job pk -> the MIG instance it holds
    for job_id, gpu_pk, profile, start in (
        assignments.filter(released_at__isnull=True)
        .order_by("job_id", "gpu_id").values_list("job_id", "gpu_id", "mig_instance__profile", "mig_instance__start")
    ):
        held[job_id].append(gpu_names[gpu_pk])
        if profile:
            instances[job_id] = (profile, start)
    running = []
    for row in jobs.filter(state__in=LIVE_STATES).annotate(
        submit_time=Epoch("submitted_at"), start_time=Epoch("run_started_at"),
        last_checkpoint=Epoch("last_checkpoint_at"), grace_ends=Epoch("stop_deadline"),
    ).values(
        *JOB_FIELDS, "submit_time", "start_time", "last_checkpoint", "grace_ends", "stop_cause", "preempted_for_id"
    ).order_by("pk"):
        if not held.get(row["pk"]):
            continue  # nothing held: the writer will end it (see tick.reconcile)
        running.append(core.RunningJob(
            **{name: row[name] for name in RUNNING_AS_IS},
            id=str(row["pk"]), project=row["project__name"], gpu_ids=tuple(held[row["pk"]]),
            start_time=seconds(now) if row["start_time"] is None else row["start_time"],
            submit_time=row["submit_time"], seq=row["pk"],
            user=row["user__username"], priority=PRIORITY[row["priority"]],
            last_checkpoint=row["last_checkpoint"],
            state=core.PREEMPTING if row["stop_cause"] else core.RUNNING,
            preempted_for=str(row["preempted_for_id"]) if row["preempted_for_id"] else None,
            grace_ends=row["grace_ends"],
            mig_profile=instances[row["pk"]][0] if row["pk"] in instances else "",
            mig_start=instances[row["pk"]][1] if row["pk"] in instances else None,
            # A job being preempted already counts this preemption; its protection no longer matters.
            preemptions=row["preemptions"] - (1 if row["stop_cause"] and row["preemptions"] else 0),
        ))
    return running


# The pending jobs the last snapshot of each cluster built, by job pk: (what each was built from, the job). Building
# 10k frozen dataclasses is a third of a 16k-GPU snapshot, and a waiting job's row rarely changes from one tick to
# the next. Every row is still read each tick; a job is reused only when all it was built from is equal.
_BUILT: dict[int, dict[int, tuple[tuple, core.PendingJob]]] = {}


def _pending_jobs(jobs, unit_names: dict[int, str], *, cluster_pk: int) -> tuple[
        list[core.PendingJob], dict[int, tuple], dict[int, tuple[str, ...]]]:
    """The pending `jobs` of a cluster as the core sees them, what their queue fields hold and their claims on GPUs;
    three queries. Times come as `seconds` from the database, names from ids (no join per job), only the few claims
    are decoded, and a job whose row is as it was at the last snapshot is the job built then (`_BUILT`)."""
    usernames = dict(get_user_model().objects.filter(pk__in=jobs.values("user_id")).values_list("pk", "username"))
    earmarks = {}
    for pk, stored in jobs.exclude(earmarked_gpus=[]).values_list("pk", "earmarked_gpus").order_by("pk"):
        claim = tuple(gpu for gpu in stored or () if isinstance(gpu, str))
        if claim:
            earmarks[pk] = claim
    gpu_types: dict[str, frozenset[str]] = {}
    as_is = len(PENDING_AS_IS)
    pending = []
    pending_fields = {}
    kept, built = _BUILT.get(cluster_pk, {}), {}
    for row in jobs.annotate(
        submit_time=Epoch("submitted_at"), requeue_time=Epoch("requeued_at"), estimate=Epoch("estimated_start"),
    ).values_list(*PENDING_COLUMNS).order_by("pk"):
        pk, project_id, user_id, gpu_type, priority, mig_profile, preemptions, submit_time, requeue_time = row[as_is:-3]
        pending_fields[pk] = row[-3:]
        source = (row[:-3], unit_names[project_id], usernames[user_id], earmarks.get(pk, ()))
        before = kept.get(pk)
        if before is not None and before[0] == source:
            job = before[1]
        else:
            if gpu_type not in gpu_types:
                gpu_types[gpu_type] = frozenset(t for t in gpu_type.split("|") if t)
            fields = dict(zip(PENDING_AS_IS, row[:as_is], strict=True))
            job = core.PendingJob(
                **fields, id=str(pk), project=source[1], submit_time=submit_time, seq=pk, user=source[2],
                gpu_types=gpu_types[gpu_type], priority=PRIORITY[priority], earmarked_gpus=source[3],
                mig_profile=mig_profile if fields["gpus"] == 1 else "", preemptions=preemptions,
                requeued_at=requeue_time,
            )
        built[pk] = (source, job)
        pending.append(job)
    _BUILT[cluster_pk] = built
    return pending, pending_fields, earmarks


def running_on_host(host, *, now: datetime) -> list[core.RunningJob]:
    """The live jobs holding GPUs of one host, as the core sees them (the host page's what-if of a drain);
    three queries."""
    gpu_names = {pk: f"{host.name}:{index}" for pk, index in Gpu.objects.filter(host=host).values_list("pk", "index")}
    here = GpuAssignment.objects.filter(gpu__host=host, released_at__isnull=True)
    return _running_jobs(Job.objects.filter(pk__in=here.values("job_id")), here, gpu_names, now=now)


def build_snapshot(cluster, *, now: datetime | None = None) -> TickInput:
    """The cluster as of one moment: its queries read one view of the database, so a job an agent requeues (or a
    user submits) while they run is seen before or after, never both or neither (running and pending at once, or
    pending under a user the snapshot's user query did not see)."""
    now = now or timezone.now()
    if connection.in_atomic_block:  # the caller's transaction (a test's, or a write that reads its own changes)
        return _read_snapshot(cluster, now=now)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # Read committed would give each query its own view. (SQLite's transactions begin IMMEDIATE here,
            # config/env.py: no other writer commits until this one ends.)
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return _read_snapshot(cluster, now=now)


def _read_snapshot(cluster, *, now: datetime) -> TickInput:
    # Rows, not model instances: a 16k-GPU cluster has thousands of hosts.
    domains = list(Domain.objects.filter(cluster=cluster).order_by("name").values("pk", "name", "block__name", "kind"))
    hosts = list(Host.objects.filter(domain__cluster=cluster).order_by("domain__name", "position").values(
        "pk", "name", "domain_id", "gpu_type", "state", "cpus", "memory_gib", "fast_lane"))
    gpus_by_host: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
    gpu_pks: dict[str, int] = {}
    host_names = {host["pk"]: host["name"] for host in hosts}
    mig_gpus: dict[int, list[str]] = defaultdict(list)  # host pk -> its healthy GPUs in MIG mode
    for pk, host_id, index, health, mig_enabled in (
        Gpu.objects.filter(host__domain__cluster=cluster).order_by("host_id", "index")
        .values_list("pk", "host_id", "index", "health", "mig_enabled")
    ):
        gpu_id = f"{host_names[host_id]}:{index}"
        gpu_pks[gpu_id] = pk
        if health == GpuHealth.OK:
            gpus_by_host[host_id].append(gpu_id)
            if mig_enabled:
                mig_gpus[host_id].append(gpu_id)
    gpu_names = {pk: gpu_id for gpu_id, pk in gpu_pks.items()}
    layouts: dict[str, list[tuple[str, int]]] = defaultdict(list)
    if mig_gpus:
        for gpu_pk, profile, start in (
            MigInstance.objects.filter(gpu__host__domain__cluster=cluster, destroyed_at__isnull=True)
            .order_by("gpu_id", "start").values_list("gpu_id", "profile", "start")
        ):
            layouts[gpu_names[gpu_pk]].append((profile, start))

    domain_names = {domain["pk"]: domain["name"] for domain in domains}
    hosts_by_domain: dict[int, list[str]] = defaultdict(list)
    core_hosts = []
    for host in hosts:
        hosts_by_domain[host["domain_id"]].append(host["name"])
        core_hosts.append(core.Host(
            name=host["name"], domain=domain_names[host["domain_id"]], gpu_type=host["gpu_type"],
            gpus=tuple(gpus_by_host[host["pk"]]), state=host["state"], cpus=host["cpus"],
            memory_gib=host["memory_gib"], fast_lane=host["fast_lane"],
            mig=tuple(core.MigGpu(gpu_id, tuple(layouts[gpu_id])) for gpu_id in mig_gpus.get(host["pk"], ())),
        ))
    topology = core.Topology(
        domains=tuple(
            core.Domain(name=d["name"], hosts=tuple(hosts_by_domain[d["pk"]]), block=d["block__name"], kind=d["kind"])
            for d in domains
        ),
        hosts=tuple(core_hosts),
    )

    units = list(Unit.objects.values_list("pk", "name", "parent_id"))
    unit_names = {pk: name for pk, name, _ in units}
    shares = current_shares(cluster, now)
    ended = project_usage(cluster, now=now, include_running=False)
    core_units = tuple(
        core.Unit(
            name=name, parent=unit_names.get(parent_id), share=float(shares[pk]) if pk in shares else None,
            allocated_usage=ended[pk].allocated if pk in ended else 0.0,
            unallocated_usage=ended[pk].unallocated if pk in ended else 0.0,
        )
        for pk, name, parent_id in sorted(units, key=lambda row: row[1])
    )

    # Only live jobs' assignments: the cluster's finished jobs (its whole history) are not joined every tick.
    running = _running_jobs(Job.objects.filter(cluster=cluster),
                            GpuAssignment.objects.filter(job__cluster=cluster, job__state__in=LIVE_STATES),
                            gpu_names, now=now)
    pending, pending_fields, earmarks = _pending_jobs(Job.objects.filter(cluster=cluster, state=JobState.PENDING),
                                                      unit_names, cluster_pk=cluster.pk)

    migrations = tuple(
        seconds(at) for at in JobEvent.objects.filter(
            job__cluster=cluster, kind=EventKind.PREEMPT, cause="defrag", at__gte=now - timedelta(hours=1)
        ).order_by("at").values_list("at", flat=True)
    )
    snapshot = core.Snapshot(
        topology=topology, units=core_units, running=tuple(running), pending=tuple(pending),
        recent_defrag_migrations=migrations,
    )
    return TickInput(
        snapshot=snapshot, now=now, gpu_pks=gpu_pks, host_pks={host["name"]: host["pk"] for host in hosts},
        pending_fields=pending_fields, earmarks=earmarks,
    )

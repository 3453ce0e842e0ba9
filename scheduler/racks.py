"""Reads for the inventory pages and API: a few set-based queries each."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Prefetch
from django.utils import timezone

from scheduler.models import GpuAssignment
from topology.choices import GpuHealth, HostState
from topology.models import (
    AWAITING_AGENT_REASON,
    IN_SERVICE_STATES,
    SCHEDULABLE_STATES,
    Cluster,
    Domain,
    Gpu,
    Host,
    HostEvent,
    MigInstance,
)

# What a GPU is doing, for pages and occupancy.
ALLOCATED = "allocated"
UNALLOCATED = "unallocated"
IDLE = "idle"
UNAVAILABLE = "unavailable"
GPU_STATES = (ALLOCATED, UNALLOCATED, IDLE, UNAVAILABLE)
# Idle, on a host held for a head-of-line job (rule 5); only pages that read the reservations show it.
RESERVED = "reserved"


@dataclass
class GpuView:
    id: str
    index: int
    health: str
    state: str
    jobs: list = field(default_factory=list)  # [(job id, project, milli, allocated)]
    reserved_for: dict | None = None  # the reservation holding its host, when idle there
    mig: bool = False  # in MIG mode
    # Its MIG instances by start slot: [(profile, start, job id holding it or None)].
    mig_instances: list = field(default_factory=list)
    # The latest health event naming it (host pages): "XID 79", "NVML error", … and when; "" when none.
    mark: str = ""
    mark_at: datetime | None = None
    mark_detail: str = ""

    @property
    def mig_summary(self) -> str:
        """"3g.40gb@0 job 12, 1g.10gb@6 idle" (MIG GPUs only)."""
        if not self.mig_instances:
            return "no instances yet" if self.mig else ""
        return ", ".join(f"{profile}@{start} " + (f"job {job}" if job else "idle")
                         for profile, start, job in self.mig_instances)


@dataclass
class HostView:
    host: Host
    gpus: list[GpuView]
    reserved_for: dict | None = None

    @property
    def free_gpus(self) -> int:
        return sum(1 for gpu in self.gpus if gpu.state == IDLE) if self.host.state in SCHEDULABLE_STATES else 0

    @property
    def healthy_gpus(self) -> int:
        if self.host.state not in IN_SERVICE_STATES:
            return 0
        return sum(1 for gpu in self.gpus if gpu.health == GpuHealth.OK)


@dataclass
class DomainView:
    domain: Domain
    hosts: list[HostView]

    @property
    def total_gpus(self) -> int:
        return sum(len(h.gpus) for h in self.hosts)

    @property
    def healthy_gpus(self) -> int:
        return sum(h.healthy_gpus for h in self.hosts)

    @property
    def free_gpus(self) -> int:
        return sum(h.free_gpus for h in self.hosts)

    @property
    def counts(self) -> dict[str, int]:
        """GPUs by state: allocated, unallocated, idle, unavailable."""
        counts = dict.fromkeys(GPU_STATES, 0)
        for host in self.hosts:
            for gpu in host.gpus:
                counts[gpu.state] = counts.get(gpu.state, 0) + 1
        return counts

    @property
    def unhealthy_hosts(self) -> list[Host]:
        return [h.host for h in self.hosts if h.host.state not in IN_SERVICE_STATES]


def _live_holders(gpu_ids) -> dict[int, list]:
    holders = defaultdict(list)
    rows = (
        GpuAssignment.objects.filter(released_at__isnull=True, gpu_id__in=gpu_ids)
        .values_list("gpu_id", "job_id", "job__project__name", "milli", "job__min_runtime")
        .order_by("gpu_id", "job_id")
    )
    for gpu_id, job_id, project, milli, min_runtime in rows:
        holders[gpu_id].append((job_id, project, milli, min_runtime > 0))
    return holders


def _mig_instances(gpus) -> dict[int, list]:
    """GPU pk → its live MIG instances with their holders, for the GPUs in MIG mode (no query if none is)."""
    mig_pks = [gpu.pk for gpu in gpus if gpu.mig_enabled]
    if not mig_pks:
        return {}
    holders = dict(
        GpuAssignment.objects.filter(released_at__isnull=True, mig_instance__gpu_id__in=mig_pks)
        .values_list("mig_instance_id", "job_id")
    )
    instances: dict[int, list] = defaultdict(list)
    for pk, gpu_pk, profile, start in (
        MigInstance.objects.filter(gpu_id__in=mig_pks, destroyed_at__isnull=True).order_by("gpu_id", "start")
        .values_list("pk", "gpu_id", "profile", "start")
    ):
        instances[gpu_pk].append((profile, start, holders.get(pk)))
    return instances


def _gpu_state(host: Host, gpu: Gpu, jobs: list) -> str:
    if jobs:
        return ALLOCATED if any(allocated for *_, allocated in jobs) else UNALLOCATED
    if host.state not in SCHEDULABLE_STATES or gpu.health != GpuHealth.OK:
        return UNAVAILABLE
    return IDLE


def domain_views(cluster: Cluster, *, domain: Domain | None = None) -> list[DomainView]:
    """Every domain of the cluster (or one) with hosts and GPU states, in three queries."""
    domains = Domain.objects.filter(cluster=cluster).select_related("block").order_by("name")
    if domain is not None:
        domains = domains.filter(pk=domain.pk)
    domains = domains.prefetch_related(
        Prefetch("hosts", queryset=Host.objects.order_by("position").prefetch_related(
            Prefetch("gpus", queryset=Gpu.objects.order_by("index"))
        ))
    )
    domains = list(domains)
    gpus = [gpu for d in domains for h in d.hosts.all() for gpu in h.gpus.all()]
    holders = _live_holders([gpu.pk for gpu in gpus])
    instances = _mig_instances(gpus)
    return [
        DomainView(domain=d, hosts=[_host_view(host, host.gpus.all(), holders, instances) for host in d.hosts.all()])
        for d in domains
    ]


def cluster_summary(cluster: Cluster, views: list[DomainView] | None = None) -> dict:
    """GPU counts by state and the facts a person asks first about a cluster."""
    views = views if views is not None else domain_views(cluster)
    counts = dict.fromkeys(GPU_STATES, 0)
    for view in views:
        for state, count in view.counts.items():
            counts[state] = counts.get(state, 0) + count
    total = sum(view.total_gpus for view in views)
    healthy = sum(view.healthy_gpus for view in views)
    return {
        "total_gpus": total,
        "healthy_gpus": healthy,
        "gpus_by_state": counts,
        "domains": len(views),
        "hosts": sum(len(view.hosts) for view in views),
        "largest_free_domain": max((view.free_gpus for view in views), default=0),
        "largest_healthy_domain": max((view.healthy_gpus for view in views), default=0),
    }


def _host_view(host: Host, gpus, holders: dict[int, list], instances: dict[int, list] | None = None) -> HostView:
    instances = instances or {}
    return HostView(
        host=host,
        gpus=[
            GpuView(
                id=f"{host.name}:{gpu.index}", index=gpu.index, health=gpu.health,
                state=_gpu_state(host, gpu, holders.get(gpu.pk, [])), jobs=holders.get(gpu.pk, []),
                mig=gpu.mig_enabled, mig_instances=instances.get(gpu.pk, []),
            )
            for gpu in gpus
        ],
    )


def host_view(host: Host) -> HostView:
    gpus = list(host.gpus.order_by("index"))
    view = _host_view(host, gpus, _live_holders([gpu.pk for gpu in gpus]), _mig_instances(gpus))
    marks = gpu_health_marks(host)
    for gpu in view.gpus:
        if gpu.index in marks:
            gpu.mark, gpu.mark_at, gpu.mark_detail = marks[gpu.index]
    return view


# Health events that name a GPU, and how its row says it.
GPU_HEALTH_KINDS = {HostEvent.Kind.XID: "XID", HostEvent.Kind.NVML_ERROR: "NVML error",
                    HostEvent.Kind.ECC: "uncorrected ECC", HostEvent.Kind.ROWS_PENDING: "repair pending"}
MARK_WINDOW = timedelta(days=1)


def gpu_health_marks(host: Host, *, now: datetime | None = None) -> dict[int, tuple[str, datetime, str]]:
    """GPU index → (label, when, detail) of the latest health event naming it: since the host last came back
    into service, and within a day. Two queries."""
    now = now or timezone.now()
    since = now - MARK_WINDOW
    back_in_service = (host.events.filter(kind=HostEvent.Kind.STATE, detail__contains="→ up:")
                       .values_list("at", flat=True).first())
    if back_in_service and back_in_service > since:
        since = back_in_service
    marks: dict[int, tuple[str, datetime, str]] = {}
    for index, kind, code, at, detail in (
        host.events.filter(kind__in=list(GPU_HEALTH_KINDS), gpu__isnull=False, at__gte=since)
        .order_by("-at", "-id").values_list("gpu", "kind", "code", "at", "detail")
    ):
        if index not in marks:
            label = f"XID {code}" if kind == HostEvent.Kind.XID else GPU_HEALTH_KINDS[kind]
            marks[index] = (label, at, detail)
    return marks


def mark_reservations(views: list[DomainView], reservations: list[dict]) -> None:
    """Idle GPUs of hosts held for a head-of-line job (the latest tick's reservations) become `reserved`."""
    held = {}
    for reservation in reservations:
        for host in reservation.get("hosts", []):
            held.setdefault(host, reservation)
    for view in views:
        for host_view in view.hosts:
            reservation = held.get(host_view.host.name)
            if reservation is None:
                continue
            host_view.reserved_for = reservation
            for gpu in host_view.gpus:
                if gpu.state == IDLE:
                    gpu.state = RESERVED
                    gpu.reserved_for = reservation


OUT_OF_SERVICE = (HostState.CORDONED, HostState.DRAINING, HostState.DRAINED, HostState.DOWN)
NEEDS_REPAIR = (HostState.DRAINED, HostState.DOWN)
HEALTH_KINDS = ("xid", "gpu_missing", "heartbeat_lost")


def needs_repair_count() -> int:
    """Drained and down hosts, hosts still waiting for their first agent report aside; one query."""
    return Host.objects.filter(state__in=NEEDS_REPAIR).exclude(state_reason=AWAITING_AGENT_REASON).count()

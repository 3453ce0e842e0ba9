"""Reads for the inventory pages and API: a few set-based queries each."""

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Prefetch

from topology.choices import GpuHealth
from topology.models import HEALTHY_STATES, SCHEDULABLE_STATES, Cluster, Domain, Gpu, Host

# What a GPU is doing, for pages and occupancy.
ALLOCATED = "allocated"
UNALLOCATED = "unallocated"
IDLE = "idle"
UNAVAILABLE = "unavailable"
GPU_STATES = (ALLOCATED, UNALLOCATED, IDLE, UNAVAILABLE)


@dataclass
class GpuView:
    id: str
    index: int
    health: str
    state: str
    jobs: list = field(default_factory=list)  # [(job id, project, milli, allocated)]


@dataclass
class HostView:
    host: Host
    gpus: list[GpuView]

    @property
    def free_gpus(self) -> int:
        return sum(1 for gpu in self.gpus if gpu.state == IDLE) if self.host.state in SCHEDULABLE_STATES else 0

    @property
    def healthy_gpus(self) -> int:
        if self.host.state not in HEALTHY_STATES:
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
                counts[gpu.state] += 1
        return counts

    @property
    def unhealthy_hosts(self) -> list[Host]:
        return [h.host for h in self.hosts if h.host.state not in HEALTHY_STATES]


def _live_holders(gpu_ids) -> dict[int, list]:
    from scheduler.models import GpuAssignment

    holders = defaultdict(list)
    rows = (
        GpuAssignment.objects.filter(released_at__isnull=True, gpu_id__in=gpu_ids)
        .values_list("gpu_id", "job_id", "job__project__name", "milli", "job__min_runtime")
        .order_by("gpu_id", "job_id")
    )
    for gpu_id, job_id, project, milli, min_runtime in rows:
        holders[gpu_id].append((job_id, project, milli, min_runtime > 0))
    return holders


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
    gpu_pks = [gpu.pk for d in domains for h in d.hosts.all() for gpu in h.gpus.all()]
    holders = _live_holders(gpu_pks)
    return [
        DomainView(domain=d, hosts=[_host_view(host, host.gpus.all(), holders) for host in d.hosts.all()])
        for d in domains
    ]


def cluster_summary(cluster: Cluster, views: list[DomainView] | None = None) -> dict:
    """GPU counts by state and the facts a person asks first about a cluster."""
    views = views if views is not None else domain_views(cluster)
    counts = dict.fromkeys(GPU_STATES, 0)
    for view in views:
        for state, count in view.counts.items():
            counts[state] += count
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


def _host_view(host: Host, gpus, holders: dict[int, list]) -> HostView:
    return HostView(
        host=host,
        gpus=[
            GpuView(
                id=f"{host.name}:{gpu.index}", index=gpu.index, health=gpu.health,
                state=_gpu_state(host, gpu, holders.get(gpu.pk, [])), jobs=holders.get(gpu.pk, []),
            )
            for gpu in gpus
        ],
    )


def host_view(host: Host) -> HostView:
    gpus = list(host.gpus.order_by("index"))
    return _host_view(host, gpus, _live_holders([gpu.pk for gpu in gpus]))

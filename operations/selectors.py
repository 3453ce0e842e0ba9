"""Reads for the pages that join several apps: the budget pages' usage against entitlement, the dashboard's
consumption, the repairs list. Each reads the lower apps' selectors and models; none of them is read below."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Count, OuterRef, Q, Subquery, Sum

from budgets.lib.timeline import Period, share_at
from budgets.models import Allocation, BudgetRequest, Unit
from budgets.selectors import (
    HOURS_PER_WEEK,
    HUNDRED,
    PLOT_BUCKETS,
    PLOT_HORIZON,
    core_units,
    current_shares,
    people_by_unit,
    period_of,
    subtree_ids,
    walk_units,
)
from scheduler.core import fairshare
from scheduler.models import Job
from scheduler.racks import AWAITING_AGENT_REASON, HEALTH_KINDS, NEEDS_REPAIR, OUT_OF_SERVICE
from scheduler.selectors import drain_progress, jobs_on_hosts
from scheduler.usage import project_usage, usage_series
from topology.choices import HostState
from topology.models import Cluster, Host, HostEvent


@dataclass
class UnitBudget:
    """One unit on one cluster: its share, what it is entitled to, what it used, and what waits."""

    unit: Unit
    depth: int
    percent_of_parent: Decimal | None
    fraction_of_cluster: float
    gpu_hours_per_week: float
    entitled_gpu_hours: float  # over the fair-share window
    usage_gpu_hours: float  # allocated (charged) GPU-hours in the window, subtree included
    unallocated_gpu_hours: float  # free GPU-hours in the window: shown, never charged
    # usage / entitled (DESIGN §3 rule 2) as the scheduler computes it; None when entitled to nothing.
    ratio: float | None
    pending_gpus: int  # GPUs asked for by pending allocated jobs, subtree included
    pending_unallocated_gpus: int
    children_percent: Decimal = Decimal(0)  # what its children hold of it now
    open_requests: int = 0
    people: dict = field(default_factory=dict)

    @property
    def percent_of_cluster(self) -> float:
        return self.fraction_of_cluster * 100

    @property
    def room_percent(self) -> Decimal:
        return max(HUNDRED - self.children_percent, Decimal(0))


def pending_gpus_by_project(cluster) -> dict[int, tuple[int, int]]:
    """Project id → (allocated, unallocated) GPUs asked for by pending jobs; one grouped query."""

    rows = (
        Job.objects.pending().filter(cluster=cluster).values("project_id")
        .annotate(
            allocated=Sum("gpus", filter=Q(min_runtime__gt=0), default=0),
            unallocated=Sum("gpus", filter=Q(min_runtime=0), default=0),
        )
        .order_by()
    )
    return {row["project_id"]: (row["allocated"], row["unallocated"]) for row in rows}


def budget_tree(cluster, *, now: datetime, schedulable_gpus: int | None = None) -> list[UnitBudget]:
    """Every unit in tree order with share, entitlement, window usage, ratio and pending demand on `cluster`.

    Entitlement, usage and ratio are the scheduler's own (`scheduler.core.fairshare.UnitTree` over the
    cluster's schedulable GPUs, `Cluster.schedulable_gpus`), with running jobs counted up to `now`: the
    ratio a page shows is the one the queue is ordered by.
    """

    gpus = cluster.schedulable_gpus() if schedulable_gpus is None else schedulable_gpus
    window = cluster.window_seconds
    rows = walk_units()
    percents = current_shares(cluster, now)
    units = core_units(rows, percents, project_usage(cluster, now=now))
    fair = fairshare.UnitTree(units, set(), healthy_gpus=gpus, window=window)
    fair.add_window_usage(units, (), now=now.timestamp(), window=window)
    parents = {unit.pk: unit.parent_id for unit, _ in rows}
    pending: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for project_id, (allocated, unallocated) in pending_gpus_by_project(cluster).items():
        node = project_id
        while node is not None:
            pending[node][0] += allocated
            pending[node][1] += unallocated
            node = parents.get(node)
    children_percent: dict[int, Decimal] = defaultdict(Decimal)
    for unit, _ in rows:
        if unit.parent_id is not None and unit.pk in percents:
            children_percent[unit.parent_id] += percents[unit.pk]
    open_requests = dict(
        BudgetRequest.objects.open().filter(cluster=cluster).values("unit_id").annotate(n=Count("id"))
        .values_list("unit_id", "n").order_by()
    )
    people = people_by_unit()
    budgets = []
    for unit, depth in rows:
        node = fair.nodes[unit.name]
        budgets.append(UnitBudget(
            unit=unit, depth=depth, percent_of_parent=percents.get(unit.pk),
            fraction_of_cluster=node.share_of_cluster,
            gpu_hours_per_week=node.share_of_cluster * gpus * HOURS_PER_WEEK,
            entitled_gpu_hours=node.entitled / 3600,
            usage_gpu_hours=node.usage / 3600,
            unallocated_gpu_hours=node.unallocated_usage / 3600,
            ratio=node.ratio if node.entitled > 0 else None,
            pending_gpus=pending[unit.pk][0] if unit.pk in pending else 0,
            pending_unallocated_gpus=pending[unit.pk][1] if unit.pk in pending else 0,
            children_percent=children_percent.get(unit.pk, Decimal(0)),
            open_requests=open_requests.get(unit.pk, 0),
            people=people.get(unit.pk, {}),
        ))
    return budgets


def usage_vs_entitlement(unit: Unit, cluster, *, now: datetime, schedulable_gpus: int) -> dict:
    """The unit page's plot: GPUs used per bucket over the window (allocated, unallocated) and GPUs entitled.

    Entitlement is the unit's fraction of the cluster (its share times every
    ancestor's, as it stood at each moment) times today's schedulable GPUs; it
    runs on into scheduled changes of the next weeks.
    """

    window = cluster.window_seconds
    bucket = max(60, window // PLOT_BUCKETS)
    start = now - timedelta(seconds=window)
    projects = subtree_ids(unit)
    series = usage_series(cluster, start=start, end=now, bucket_seconds=bucket)
    count = max(1, -(-window // bucket))
    allocated, unallocated = [0.0] * count, [0.0] * count
    for project_id, buckets in series.items():
        if project_id in projects:
            for index, used in enumerate(buckets):
                allocated[index] += used.allocated / bucket
                unallocated[index] += used.unallocated / bucket
    centres = [start + timedelta(seconds=(index + 0.5) * bucket) for index in range(count)]

    chain = [unit, *unit.ancestors()]
    rows = list(
        Allocation.objects.filter(cluster=cluster, unit__in=chain)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=start))
        .filter(valid_from__lt=now + PLOT_HORIZON)
        .order_by("valid_from")
    )
    timelines: dict[int, list[Period]] = defaultdict(list)
    for row in rows:
        timelines[row.unit_id].append(period_of(row))
    future = [moment for row in rows for moment in (row.valid_from, row.valid_to)
              if moment is not None and now < moment < now + PLOT_HORIZON]
    horizon = max(future) + timedelta(days=1) if future else now
    moments = sorted({start, *(m for row in rows for m in (row.valid_from, row.valid_to)
                               if m is not None and start < m < horizon)})

    def entitled_at(at):
        fraction = 1.0
        for member in chain:
            found = share_at(timelines.get(member.pk, []), at)
            if found is None:
                return 0.0
            fraction *= float(found.share) / 100
        return fraction * schedulable_gpus

    steps = [entitled_at(moment) for moment in moments]
    return {
        "x": [moment.isoformat() for moment in centres],
        "allocated": [round(value, 3) for value in allocated],
        "unallocated": [round(value, 3) for value in unallocated],
        "entitled_x": [moment.isoformat() for moment in moments] + [horizon.isoformat()],
        "entitled": [round(value, 3) for value in steps] + [round(steps[-1], 3)],
        "now": now.isoformat(),
        "bucket_seconds": bucket,
    }


def project_consumption(cluster, *, now, schedulable_gpus: int | None = None) -> list[dict]:
    """Each project over the window: GPU-hours used (charged, and free) against GPU-hours entitled; tree order."""
    rows = budget_tree(cluster, now=now, schedulable_gpus=schedulable_gpus)
    parents = {row.unit.parent_id for row in rows}
    names = {row.unit.pk: row.unit.name for row in rows}
    return [
        {
            "project": row.unit.name, "parent": names.get(row.unit.parent_id, ""),
            "used": round(row.usage_gpu_hours, 2), "unallocated": round(row.unallocated_gpu_hours, 2),
            "entitled": round(row.entitled_gpu_hours, 2), "ratio": row.ratio,
            "pending_gpus": row.pending_gpus + row.pending_unallocated_gpus,
        }
        for row in rows if row.unit.pk not in parents
    ]


def hosts_out_of_service(*, cluster: Cluster | None = None) -> dict:
    """Every host not up, grouped for on-call: draining (with progress), needs repair, cordoned, awaiting agent.

    A fixed number of queries: the hosts (with their latest health event), and the jobs on draining ones.
    """

    latest_health = HostEvent.objects.filter(host=OuterRef("pk"), kind__in=HEALTH_KINDS).order_by("-at", "-id")
    hosts = Host.objects.filter(state__in=OUT_OF_SERVICE).select_related("domain__cluster").annotate(
        last_health=Subquery(latest_health.values("detail")[:1]),
        last_health_at=Subquery(latest_health.values("at")[:1]),
    ).order_by("state_changed_at", "name")
    if cluster is not None:
        hosts = hosts.filter(domain__cluster=cluster)
    hosts = list(hosts)
    draining = [host for host in hosts if host.state == HostState.DRAINING]
    jobs = jobs_on_hosts(draining)
    for host in draining:
        host.jobs_here = jobs.get(host.pk, [])
        host.progress = drain_progress(host.jobs_here)
    awaiting = [host for host in hosts if host.state_reason == AWAITING_AGENT_REASON]
    return {
        "draining": draining,
        "needs_repair": [host for host in hosts if host.state in NEEDS_REPAIR and host not in awaiting],
        "cordoned": [host for host in hosts if host.state == HostState.CORDONED],
        "awaiting_agent": awaiting,
    }

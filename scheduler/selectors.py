"""Reads about jobs for pages and the API; a fixed number of queries each, whatever the number of jobs."""

from collections import defaultdict
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from budgets.models import Membership, Unit
from budgets.selectors import entitled_gpu_seconds, walk_units
from scheduler.choices import LIVE_STATES, EventKind
from scheduler.core import measures as core_measures
from scheduler.core import model as core
from scheduler.core.drains import if_drained
from scheduler.core.lifecycle import Cause, StopCause
from scheduler.core.measures import (
    FRAGMENTATION_SIZES,
    Demand,
    Held,
    Measures,
    Sample,
    free_gpus_by_host,
    measure,
)
from scheduler.core.model import QUEUE_NEW, QueueStep
from scheduler.core.reasons import queue_step
from scheduler.core.reservation import grace_period_for
from scheduler.models import ClusterSample, GpuAssignment, Job, JobEvent, Tick
from scheduler.racks import domain_views
from scheduler.snapshot import moment, running_on_host
from scheduler.usage import Usage, period_usage, roll_up, usage_series
from topology.choices import GpuHealth
from topology.models import Cluster


def pending_demand(cluster) -> dict:
    """Pending jobs and the GPUs they ask for, split allocated / unallocated; one query."""
    allocated, unallocated = Q(min_runtime__gt=0), Q(min_runtime=0)
    totals = Job.objects.pending().filter(cluster=cluster).aggregate(
        jobs=Count("id"),
        allocated_gpus=Sum("gpus", filter=allocated, default=0),
        unallocated_gpus=Sum("gpus", filter=unallocated, default=0),
    )
    return {**totals, "gpus": totals["allocated_gpus"] + totals["unallocated_gpus"]}


def preemption_costs(cluster, *, now: datetime, hours: float = 24) -> dict:
    """What preemptions cost over the last `hours` (issue 18's measures, as the simulator measures them).

    Preemptions (other than a job's own maximum runtime) per job that ran in the span (mean and most of one
    job), and the share of preemptions on behalf of a job after which that job did not start within the
    plan's grace period + two ticks (`core.measures.wasted_preemptions`; only those whose deadline has passed
    are judged). Three queries.
    """

    since = now - timedelta(hours=hours)
    events = JobEvent.objects.filter(job__cluster=cluster, at__gte=since, at__lte=now)
    preempts = list(events.filter(kind=EventKind.PREEMPT).exclude(cause="max_runtime")
                    .values_list("job_id", "at", "cause", "job__min_runtime"))
    ran = set(events.filter(kind=EventKind.START).values_list("job_id", flat=True))
    ran |= set(Job.objects.filter(cluster=cluster, state__in=LIVE_STATES, run_started_at__lt=since)
               .values_list("pk", flat=True))
    ran |= {job_id for job_id, *_ in preempts}
    per_job: dict[int, int] = defaultdict(int)
    for job_id, *_ in preempts:
        per_job[job_id] += 1
    policy = cluster.scheduling_policy()
    # Preemptions on behalf of a job (cause `job:<id>`), with the grace the core gave each victim.
    on_behalf = []
    for _, at, cause, victim_min_runtime in preempts:
        try:
            stop = StopCause.parse(cause)
        except ValueError:  # not a cause the core writes (an event from before causes were typed)
            continue
        if stop is not None and stop.kind is Cause.JOB and stop.subject.isdigit():
            on_behalf.append((at.timestamp(), stop.subject, grace_period_for(victim_min_runtime > 0, policy)))
    starts: dict[str, list[float]] = defaultdict(list)
    for job_id, at in (JobEvent.objects.filter(job_id__in={int(p) for _, p, _ in on_behalf}, kind=EventKind.START,
                                               at__gte=since).order_by("at").values_list("job_id", "at")):
        starts[str(job_id)].append(at.timestamp())
    wasted = core_measures.wasted_preemptions(on_behalf, starts, tick=policy.tick, end=now.timestamp())
    return {
        "hours": hours, "preemptions": len(preempts), "jobs": len(ran),
        "per_job": len(preempts) / len(ran) if ran else 0.0, "max": max(per_job.values(), default=0),
        "on_behalf": wasted.judged, "wasted": wasted.wasted, "wasted_share": wasted.share,
    }


def latest_tick(cluster) -> Tick | None:
    return Tick.objects.filter(cluster=cluster).order_by("-started_at", "-id").first()


def live_gpu_ids(job_ids) -> dict[int, list[str]]:
    """Job id → the GPU ids it holds now.

    "host:index"; "host:index@milli" for a fraction; "host:index/profile@slot" for a MIG instance.
    """
    held = defaultdict(list)
    rows = GpuAssignment.objects.filter(job_id__in=list(job_ids), released_at__isnull=True).order_by(
        "gpu__host__name", "gpu__index"
    ).values_list("job_id", "gpu__host__name", "gpu__index", "milli", "mig_instance__profile", "mig_instance__start")
    for job_id, host, index, milli, profile, start in rows:
        if profile:
            held[job_id].append(f"{host}:{index}/{profile}@{start}")
        else:
            held[job_id].append(f"{host}:{index}" if milli == 1000 else f"{host}:{index}@{milli}")
    return dict(held)


QUEUE_STEP_FIELDS = tuple(item.name for item in fields(QueueStep))


def order_reason(stored: dict | None, project: str, first: int | None) -> str:
    """Why a project stands where it does in the queue, as the last tick's core explained it (`Tick.queue_order`);
    a project whose jobs all came after that tick waits for the next one."""
    if first is None:
        return queue_step(QueueStep(project, 0, QUEUE_NEW))
    if stored is None:
        return ""  # a tick from before the order was explained
    return queue_step(QueueStep(**{name: stored[name] for name in QUEUE_STEP_FIELDS if name in stored}))


def queue_view(cluster, *, user, limit: int = 500) -> dict:
    """The cluster's queue in fair-share order, the order as the last tick explained it, and the user's jobs."""
    tick = latest_tick(cluster)
    ratios = tick.unit_ratios if tick else {}
    explained = {step.get("project"): step for step in (tick.queue_order if tick else [])}
    jobs = Job.objects.filter(cluster=cluster).select_related("project", "user")
    pending = list(jobs.pending().order_by(F("queue_position").asc(nulls_last=True), "pk")[:limit])
    running = list(jobs.filter(state__in=LIVE_STATES).order_by("run_started_at", "pk"))
    held = live_gpu_ids(job.pk for job in running)
    for job in running:
        job.gpu_ids = held.get(job.pk, [])
        job.hosts = sorted({core.gpu_host(gpu_id) for gpu_id in job.gpu_ids})
    # Each level of a project's sort metric as the tick walked its tree (empty: no tick has ordered it yet).
    sort_paths = {name: [(unit, ratios.get(unit)) for unit in step.get("path", ())] for name, step in explained.items()}
    demand: dict[int, dict] = {}
    for job in pending:
        entry = demand.setdefault(job.project_id, {"project": job.project, "jobs": 0, "gpus": 0, "allocated": 0,
                                                   "first": None})
        entry["jobs"] += 1
        entry["gpus"] += job.gpus
        entry["allocated"] += job.allocated
        if job.queue_position is not None and (entry["first"] is None or job.queue_position < entry["first"]):
            entry["first"] = job.queue_position
        job.sort_path = sort_paths.get(job.project.name, [])
    order = [
        {"path": sort_paths.get(entry["project"].name, []), "ratio": ratios.get(entry["project"].name), **entry}
        for entry in demand.values()
    ]
    # The order the tick produced (each project where its first job stands), as the tick explained it.
    order.sort(key=lambda row: (row["first"] is None, row["first"] or 0, row["project"].name))
    for row in order:
        name = row["project"].name
        row["why"] = order_reason(explained.get(name), name, row["first"])
    return {
        "tick": tick, "pending": pending, "pending_total": jobs.pending().count(), "running": running,
        "order": order, "mine": [job for job in [*running, *pending] if job.user_id == user.pk],
        "reservations": tick.reservations if tick else [],
    }


# ---------------------------------------------------------------- measures (DESIGN §5), live


def measures_input(views) -> tuple[core.Topology, list[Held], int]:
    """The pure measures' inputs from the inventory pages' domain views (no query of its own)."""
    domains, hosts, held, total = [], [], [], 0
    for view in views:
        names = []
        for host_view in view.hosts:
            host = host_view.host
            names.append(host.name)
            total += len(host_view.gpus)
            hosts.append(core.Host(
                name=host.name, domain=view.domain.name, gpu_type=host.gpu_type,
                gpus=tuple(gpu.id for gpu in host_view.gpus if gpu.health == GpuHealth.OK), state=host.state,
                fast_lane=host.fast_lane,
            ))
            for gpu in host_view.gpus:
                held.extend(Held(gpu.id, milli, allocated) for _, _, milli, allocated in gpu.jobs)
        domains.append(core.Domain(view.domain.name, tuple(names), kind=view.domain.kind))
    return core.Topology(tuple(domains), tuple(hosts)), held, total


def cluster_measures(cluster, views=None) -> Measures:
    """GPU states and fragmentation now, by the same definition as the simulator (scheduler/core/measures.py)."""
    views = views if views is not None else domain_views(cluster)
    topology, held, total = measures_input(views)
    return measure(topology, held, total_gpus=total)


def cluster_sample(cluster, views=None) -> Sample:
    """The cluster now, read from the database, as the tick samples it for the history from its snapshot and
    decisions (`core.measures.sample_after`): the same pure measures, the queue's demand, the live jobs."""
    pending = pending_demand(cluster)
    return Sample(cluster_measures(cluster, views), Demand(pending["jobs"], pending["gpus"], pending["allocated_gpus"]),
                  Job.objects.filter(cluster=cluster, state__in=LIVE_STATES).count())


def free_by_domain(views) -> list[dict]:
    """Each domain now: free whole GPUs (what fragmentation counts), in use, unavailable."""
    topology, held, _ = measures_input(views)
    free = free_gpus_by_host(topology, {item.gpu_id for item in held})
    rows = []
    for view in views:
        counts = view.counts
        rows.append({
            "domain": view.domain.name, "total": view.total_gpus,
            "free": sum(free.get(h.host.name, 0) for h in view.hosts),
            "in_use": counts["allocated"] + counts["unallocated"], "unavailable": counts["unavailable"],
        })
    return rows


# ---------------------------------------------------------------- the dashboard's history

def chart_time(moment: datetime) -> str:
    """A moment as the charts draw it: in the site's time zone (the one every page labels), no offset (Plotly
    would read one in the browser's zone)."""
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S")


RANGES = {"1h": 3600, "6h": 6 * 3600, "24h": 86400, "3d": 3 * 86400}
MAX_POINTS = 360


def range_seconds(cluster, name: str) -> int:
    """A range from the selector: 1h, 6h, 24h, 3d, or `window` (the cluster's fair-share window)."""
    if name == "window":
        return cluster.window_seconds
    return min(RANGES.get(name, RANGES["24h"]), cluster.window_seconds)


def sample_series(cluster, *, now, seconds: int, points: int = MAX_POINTS) -> dict:
    """Samples of the last `seconds`, averaged into at most `points` buckets (the worst tick kept); one query."""
    start = now - timedelta(seconds=seconds)
    rows = list(
        ClusterSample.objects.filter(cluster=cluster, at__gt=start, at__lte=now).order_by("at").values_list(
            "at", "allocated", "unallocated", "idle", "unavailable", "free_gpus", "largest_placeable", "stranded",
            "pending_gpus", "pending_allocated_gpus", "tick_seconds_mean", "tick_seconds_max", "ticks",
        )
    )
    bucket = max(settings.ALLOT_SAMPLE_SECONDS, -(-seconds // points))
    groups: dict[int, list] = {}
    for row in rows:
        groups.setdefault(int((row[0] - start).total_seconds() // bucket), []).append(row)
    sizes = sorted({int(k) for row in rows for k in row[7]}) or list(FRAGMENTATION_SIZES)
    series = {
        "x": [], "allocated": [], "unallocated": [], "idle": [], "unavailable": [], "healthy": [], "free": [],
        "largest_placeable": [], "pending_gpus": [], "pending_allocated_gpus": [], "tick_mean": [], "tick_max": [],
        "stranded": {str(k): [] for k in sizes},
    }

    def mean(values):
        return round(sum(values) / len(values), 3)

    for index in sorted(groups):
        members = groups[index]
        series["x"].append(chart_time(max(member[0] for member in members)))
        for position, key in enumerate(("allocated", "unallocated", "idle", "unavailable"), start=1):
            series[key].append(mean([member[position] for member in members]))
        series["healthy"].append(round(series["allocated"][-1] + series["unallocated"][-1] + series["idle"][-1], 3))
        series["free"].append(mean([member[5] for member in members]))
        series["largest_placeable"].append(min(member[6] for member in members))
        for k in sizes:
            series["stranded"][str(k)].append(mean([member[7].get(str(k), 0.0) for member in members]))
        series["pending_gpus"].append(mean([member[8] for member in members]))
        series["pending_allocated_gpus"].append(mean([member[9] for member in members]))
        ticks = sum(member[12] for member in members)
        series["tick_mean"].append(
            round(sum(member[10] * member[12] for member in members) / ticks, 4) if ticks else None)
        series["tick_max"].append(round(max(member[11] for member in members), 4))
    series["bucket_seconds"] = bucket
    return series


def project_usage_series(cluster, *, now, seconds: int, points: int = 120) -> dict:
    """GPUs held per project over the range (allocated and free together), from run intervals; one query."""
    bucket = max(60, -(-seconds // points))
    start = now - timedelta(seconds=seconds)
    series = usage_series(cluster, start=start, end=now, bucket_seconds=bucket)
    names = dict(Unit.objects.filter(pk__in=list(series)).values_list("pk", "name"))
    count = max(1, -(-seconds // bucket))
    projects = {
        names[pk]: [round((used.allocated + used.unallocated) / bucket, 3) for used in buckets]
        for pk, buckets in sorted(series.items(), key=lambda item: names[item[0]])
    }
    # Start where the first GPU was held, as the sampled charts do, not hours of nothing before it.
    first = min((next((i for i, value in enumerate(values) if value), count) for values in projects.values()),
                default=count)
    first = min(first, count - 1)
    return {
        "x": [chart_time(start + timedelta(seconds=(index + 0.5) * bucket)) for index in range(first, count)],
        "projects": {name: values[first:] for name, values in projects.items()},
        "bucket_seconds": bucket,
    }


# ---------------------------------------------------------------- jobs on hosts, drains

# A job on a draining host the scheduler has not looked at since the drain began.
UNDECIDED = "the scheduler decides when at its next tick"


@dataclass
class HostJob:
    """A live job on a host: its contract's protection end and, on a draining host, when it leaves as the
    scheduler decided it (rule 7; None: not decided yet)."""

    job: Job
    gpus_here: int
    protected_until: datetime | None
    leaves_at: datetime | None = None
    leaves_why: str = ""


def _last_first(rows: list[HostJob]) -> None:
    # Those not decided yet first, then the last to leave.
    rows.sort(key=lambda row: (row.leaves_at is None, row.leaves_at or datetime.min.replace(tzinfo=UTC), row.job.pk),
              reverse=True)


def jobs_on_hosts(hosts) -> dict[int, list[HostJob]]:
    """Host id → the live jobs holding its GPUs, with when each leaves a drain as the tick stored the core's
    decision (`Host.drain_leaves`), the last to leave first; two queries whatever the number."""
    hosts = list(hosts)
    counts: dict[tuple[int, int], int] = defaultdict(int)
    for host_id, job_id in GpuAssignment.objects.filter(
        released_at__isnull=True, gpu__host__in=hosts
    ).values_list("gpu__host_id", "job_id"):
        counts[(host_id, job_id)] += 1
    jobs = {
        job.pk: job for job in Job.objects.filter(pk__in={job_id for _, job_id in counts}, state__in=LIVE_STATES)
        .select_related("project", "user")
    }
    planned = {host.pk: host.planned_leaves() for host in hosts}
    result: dict[int, list[HostJob]] = defaultdict(list)
    for (host_id, job_id), gpus in counts.items():
        job = jobs.get(job_id)
        if job is None:
            continue
        leaves_at, why = planned[host_id].get(job_id, (None, ""))
        result[host_id].append(HostJob(job, gpus, job.protected_until if job.allocated else None, leaves_at, why))
    for rows in result.values():
        _last_first(rows)
    return dict(result)


@dataclass
class DrainProgress:
    jobs_left: int
    # When the last job leaves and why then (None: the scheduler has yet to decide for some job).
    last_leaves_at: datetime | None = None
    last_why: str = ""

    @property
    def done(self) -> bool:
        return self.jobs_left == 0


def drain_progress(host_jobs: list[HostJob]) -> DrainProgress:
    """"2 jobs left; the last leaves by 14:05 at its minimum runtime" (the page formats the time), as the
    scheduler decided it."""
    if not host_jobs:
        return DrainProgress(0)
    if any(row.leaves_at is None for row in host_jobs):
        return DrainProgress(len(host_jobs), None, UNDECIDED)
    last = max(host_jobs, key=lambda row: (row.leaves_at, row.job.pk))
    return DrainProgress(len(host_jobs), last.leaves_at, last.leaves_why)


def drain_preview(host, host_jobs: list[HostJob], *, now: datetime) -> DrainProgress:
    """Were `host` drained now: when each of its jobs would leave, set on their rows, and when the last would.

    The core's rule 7 as a what-if (`scheduler.core.drains.if_drained`) on the jobs as the snapshot reads them;
    once the host drains, the tick's decision replaces it (`jobs_on_hosts`).
    """
    policy = host.domain.cluster.scheduling_policy()
    leaves = {int(left.job_id): left
              for left in if_drained(running_on_host(host, now=now), now=now.timestamp(), policy=policy)}
    for row in host_jobs:
        left = leaves.get(row.job.pk)
        if left is not None:
            row.leaves_at, row.leaves_why = moment(left.at), left.why
    _last_first(host_jobs)
    return drain_progress(host_jobs)


# ---------------------------------------------------------------- history (sacct) and usage reports (sreport)


class UnknownName(ValueError):
    """A filter names a unit, user or cluster that does not exist: {field: message}."""

    def __init__(self, field: str, message: str):
        self.errors = {field: [message]}
        super().__init__(message)


def _subtree(roots: set[int]) -> set[int]:
    children: dict[int | None, list[int]] = defaultdict(list)
    for pk, parent_id in Unit.objects.values_list("pk", "parent_id"):
        children[parent_id].append(pk)
    found, stack = set(), list(roots)
    while stack:
        pk = stack.pop()
        if pk not in found:
            found.add(pk)
            stack.extend(children[pk])
    return found


def job_history(filters: dict, *, user):
    """Jobs as HistoryForm's cleaned `filters` ask, newest first: live in [since, until), of the given states,
    cluster, project, unit (its whole subtree), user; `mine`; `my_projects` (every unit the user belongs to,
    and those under it)."""
    jobs = Job.objects.select_related("cluster", "project__parent", "user")
    if filters.get("state"):
        jobs = jobs.filter(state__in=filters["state"])
    if filters.get("since"):
        jobs = jobs.filter(Q(ended_at__isnull=True) | Q(ended_at__gte=filters["since"]))
    if filters.get("until"):
        jobs = jobs.filter(submitted_at__lt=filters["until"])
    if filters.get("cluster"):
        jobs = jobs.filter(cluster__name=filters["cluster"])
    if filters.get("project"):
        jobs = jobs.filter(project__name=filters["project"])
    if filters.get("unit"):
        unit = Unit.objects.filter(name=filters["unit"]).first()
        if unit is None:
            raise UnknownName("unit", f"no unit named {filters['unit']!r}")
        jobs = jobs.filter(project_id__in=_subtree({unit.pk}))
    if filters.get("user"):
        jobs = jobs.filter(user__username=filters["user"])
    if filters.get("mine"):
        jobs = jobs.filter(user=user)
    if filters.get("my_projects"):
        roots = set(Membership.objects.filter(user=user).values_list("unit_id", flat=True))
        jobs = jobs.filter(project_id__in=_subtree(roots))
    return jobs.order_by("-pk")


def usage_report(*, since: datetime, until: datetime, cluster=None, unit: Unit | None = None) -> list[dict]:
    """GPU-hours per unit (its subtree) and per user in [since, until), allocated (charged) and unallocated
    (free), against the unit's entitlement over the span (its share of the cluster as it stood at each moment,
    times the cluster's schedulable GPUs now, `Cluster.schedulable_gpus`): one entry per cluster, units in tree
    order. The same run intervals as the fair share (`scheduler.usage`) and the same share timelines as the unit
    page (`budgets.selectors`)."""
    clusters = [cluster] if cluster is not None else list(Cluster.objects.order_by("name"))
    tree = walk_units()
    parents = {row.pk: row.parent_id for row, _ in tree}
    names = {row.pk: row.name for row, _ in tree}
    wanted = _subtree({unit.pk}) if unit is not None else set(parents)
    top_depth = min((depth for row, depth in tree if row.pk in wanted), default=0)
    usernames = dict(get_user_model().objects.values_list("pk", "username"))
    report = []
    for each in clusters:
        gpus = each.schedulable_gpus()
        by_project_user = period_usage(each, start=since, end=until)
        by_unit_user: dict[tuple[int, int], Usage] = defaultdict(Usage)
        for (project_id, user_id), used in by_project_user.items():
            node = project_id
            while node is not None:
                by_unit_user[(node, user_id)].allocated += used.allocated
                by_unit_user[(node, user_id)].unallocated += used.unallocated
                node = parents.get(node)
        projects: dict[int, Usage] = defaultdict(Usage)
        for (project_id, _), used in by_project_user.items():
            projects[project_id].allocated += used.allocated
            projects[project_id].unallocated += used.unallocated
        totals = roll_up(dict(projects), parents)
        entitled = entitled_gpu_seconds(each, start=since, end=until, schedulable_gpus=gpus)
        rows = []
        for row, depth in tree:
            if row.pk not in wanted:
                continue
            used = totals.get(row.pk, Usage())
            entitled_hours = entitled.get(row.pk, 0.0) / 3600
            users = sorted(((user_id, spent) for (unit_id, user_id), spent in by_unit_user.items()
                            if unit_id == row.pk), key=lambda item: (-(item[1].allocated + item[1].unallocated),
                                                                      usernames.get(item[0], "")))
            rows.append({
                "unit": row.name, "parent": names.get(row.parent_id), "depth": depth - top_depth,
                "allocated_gpu_hours": round(used.allocated / 3600, 3),
                "unallocated_gpu_hours": round(used.unallocated / 3600, 3),
                "entitled_gpu_hours": round(entitled_hours, 3),
                "percent_of_entitlement": (round(100 * used.allocated / 3600 / entitled_hours, 1)
                                           if entitled_hours > 0 else None),
                "users": [{"user": usernames.get(user_id, str(user_id)),
                           "allocated_gpu_hours": round(spent.allocated / 3600, 3),
                           "unallocated_gpu_hours": round(spent.unallocated / 3600, 3)} for user_id, spent in users],
            })
        report.append({"cluster": each.name, "schedulable_gpus": gpus, "healthy_gpus": each.gpu_counts()["healthy"],
                       "units": rows})
    return report

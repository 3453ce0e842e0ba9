"""`/metrics`: Prometheus text, computed per scrape from a few grouped queries (none per job or per host).

Counters come from rows that only grow (job and host events, the tick
histogram), so they behave as Prometheus expects across scheduler restarts.
"""

import hmac
import platform
from collections import defaultdict
from datetime import timedelta
from importlib import metadata

from django.conf import settings
from django.db.models import Count, F, Q, Sum
from django.http import HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)

from budgets.models import Unit
from budgets.selectors import unit_shares
from scheduler.choices import LIVE_STATES, EventKind, JobState
from scheduler.history import TICK_BUCKETS
from scheduler.models import ClusterSample, GpuAssignment, Job, JobEvent, Tick, TickHistogram
from topology.choices import GpuHealth, HostState
from topology.models import Cluster, Gpu, Host, HostEvent

# The classic text format, which every Prometheus reads (generate_latest writes it).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREEMPTION_CAUSES = {
    "job": Q(cause__startswith="job:"),
    "drain": Q(cause__startswith="drain:"),
    "down": Q(cause__startswith="down:"),
    "defrag": Q(cause="defrag"),
    "max_runtime": Q(cause="max_runtime"),
}
# Seconds from submission to first start (Prometheus buckets: le).
WAIT_BUCKETS = (10, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600, 3 * 86400, 7 * 86400)
ENDS = {"completed": JobState.COMPLETED, "failed": JobState.FAILED, "cancelled": JobState.CANCELLED,
        "preempted": JobState.PREEMPTED}
# Why a job waits, from the text the core wrote (scheduler/core/engine.py `_reason`), first match wins.
REASON_KINDS = (
    ("preempting", ("preempting ",)),
    ("preempted_leaving", ("waiting for the jobs it preempted",)),
    ("defragmenting", ("being moved out of",)),
    ("never_fits", ("the largest healthy host", "the cluster has ", "no MIG GPU")),
    ("unallocated", ("runs unallocated",)),
    ("no_allocation", ("has no allocation on this cluster",)),
    ("entitled", ("entitled to keep their GPUs",)),
    ("reservation", ("held for job", "reserved")),
    ("fair_share", ("waiting behind project",)),
)


def reason_kind(reason: str) -> str:
    """A pending job's reason as one of a few kinds, for `allot_pending_*_by_reason` ("no_room" otherwise)."""
    if not reason:
        return "not_yet_ticked"
    for kind, markers in REASON_KINDS:
        if any(marker in reason for marker in markers):
            return kind
    return "no_room"


def build_version() -> str:
    try:
        return metadata.version("allot")
    except metadata.PackageNotFoundError:
        return "unknown"


class AllotCollector:
    """Every metric of every cluster, one scrape at a time."""

    def collect(self):
        clusters = {cluster.pk: cluster for cluster in Cluster.objects.order_by("name")}
        names = {pk: cluster.name for pk, cluster in clusters.items()}
        yield from self._gpus(names)
        yield from self._units(clusters)
        yield from self._jobs()
        yield from self._pending_reasons()
        yield from self._waits()
        yield from self._job_counters(names)
        yield from self._job_gpus()
        yield from self._ticks(clusters)
        yield from self._preemptions(names)
        yield from self._hosts(names)
        yield from self._xids()
        yield from self._build()

    @staticmethod
    def _build():
        import django

        info = InfoMetricFamily("allot_build", "The running Allot: version, Python, Django.")
        info.add_metric([], {"version": build_version(), "python": platform.python_version(),
                             "django": django.get_version()})
        yield info

    @staticmethod
    def _units(clusters):
        """Per unit (projects and every unit above them): GPUs held now, allocated and unallocated, and the GPUs
        its share entitles it to (share of the cluster × schedulable GPUs, `Cluster.schedulable_gpus`)."""

        parents = dict(Unit.objects.values_list("pk", "parent_id"))
        names = dict(Unit.objects.values_list("pk", "name"))
        in_use = GaugeMetricFamily("allot_unit_gpus_in_use", "GPUs held by the unit's jobs now, subtree included "
                                   "(fractions in milli-GPU precision).", labels=["cluster", "unit", "allocation"])
        entitled = GaugeMetricFamily("allot_unit_entitled_gpus", "GPUs the unit's share entitles it to: its "
                                     "fraction of the cluster × its schedulable GPUs (healthy, on hosts that take "
                                     "jobs).", labels=["cluster", "unit"])
        held = defaultdict(lambda: [0, 0])  # (cluster id, unit id) -> [allocated milli, unallocated milli]
        for cluster_id, project_id, allocated, milli in (
            GpuAssignment.objects.filter(released_at__isnull=True)
            .annotate(cluster_id=F("job__cluster_id"), project_id=F("job__project_id"),
                      allocated=Q(job__min_runtime__gt=0))
            .values_list("cluster_id", "project_id", "allocated").annotate(milli=Sum("milli")).order_by()
        ):
            unit = project_id
            while unit is not None:
                held[(cluster_id, unit)][0 if allocated else 1] += milli
                unit = parents.get(unit)
        for cluster in clusters.values():
            gpus = cluster.schedulable_gpus()
            for row in unit_shares(cluster, gpus):
                allocated, unallocated = held.get((cluster.pk, row.unit.pk), (0, 0))
                in_use.add_metric([cluster.name, names[row.unit.pk], "allocated"], allocated / 1000)
                in_use.add_metric([cluster.name, names[row.unit.pk], "unallocated"], unallocated / 1000)
                entitled.add_metric([cluster.name, names[row.unit.pk]],
                                    round(row.fraction_of_cluster * gpus, 3))
        yield in_use
        yield entitled

    @staticmethod
    def _pending_reasons():
        jobs = GaugeMetricFamily("allot_pending_jobs_by_reason", "Jobs waiting to start, by why they wait.",
                                 labels=["cluster", "reason"])
        gpus = GaugeMetricFamily("allot_pending_gpus_by_reason", "GPUs asked for by waiting jobs, by why they wait.",
                                 labels=["cluster", "reason"])
        counts = defaultdict(lambda: [0, 0])
        for cluster, reason, count, asked in (
            Job.objects.filter(state=JobState.PENDING).values_list("cluster__name", "pending_reason")
            .annotate(count=Count("id"), asked=Sum("gpus")).order_by()
        ):
            row = counts[(cluster, reason_kind(reason))]
            row[0] += count
            row[1] += asked or 0
        for (cluster, kind), (count, asked) in sorted(counts.items()):
            jobs.add_metric([cluster, kind], count)
            gpus.add_metric([cluster, kind], asked)
        yield jobs
        yield gpus

    @staticmethod
    def _waits():
        """Submission to first start of every job that started, by class (allocated or not) and priority."""
        histogram = HistogramMetricFamily("allot_job_wait_seconds", "Seconds from submission to first start.",
                                          labels=["cluster", "class", "priority"])
        waited = F("started_at") - F("submitted_at")
        buckets = {f"le_{bound}": Count("id", filter=Q(started_at__lte=F("submitted_at") + timedelta(seconds=bound)))
                   for bound in WAIT_BUCKETS}
        for row in (
            Job.objects.filter(started_at__isnull=False).annotate(allocated=Q(min_runtime__gt=0))
            .values("cluster__name", "allocated", "priority")
            .annotate(count=Count("id"), total=Sum(waited), **buckets)
            .order_by("cluster__name", "allocated", "priority")
        ):
            points = [(str(bound), row[f"le_{bound}"]) for bound in WAIT_BUCKETS] + [("+Inf", row["count"])]
            total = row["total"]
            seconds = total.total_seconds() if isinstance(total, timedelta) else float(total or 0) / 1e6
            histogram.add_metric([row["cluster__name"], "allocated" if row["allocated"] else "unallocated",
                                  row["priority"]], points, max(0.0, seconds))
        yield histogram

    @staticmethod
    def _job_counters(names):
        starts = CounterMetricFamily("allot_job_starts", "Job runs started (a requeued job starts again).",
                                     labels=["cluster"])
        ends = CounterMetricFamily("allot_job_ends", "Jobs that ended, by outcome.", labels=["cluster", "outcome"])
        started = dict(JobEvent.objects.filter(kind=EventKind.START).values("job__cluster_id")
                       .annotate(n=Count("id")).values_list("job__cluster_id", "n").order_by())
        ended = {
            row["cluster_id"]: row
            for row in Job.objects.values("cluster_id").annotate(
                **{outcome: Count("id", filter=Q(state=state)) for outcome, state in ENDS.items()}).order_by()
        }
        for cluster_id, name in names.items():
            starts.add_metric([name], started.get(cluster_id, 0))
            row = ended.get(cluster_id, {})
            for outcome in ENDS:
                ends.add_metric([name, outcome], row.get(outcome, 0))
        yield starts
        yield ends

    @staticmethod
    def _job_gpus():
        """One series per GPU a live job holds, to join with DCGM's exporter on `UUID` (or `Hostname`, `gpu`):
        `DCGM_FI_DEV_GPU_UTIL * on(UUID) group_left(job, project) allot_job_gpu_info`."""
        info = GaugeMetricFamily("allot_job_gpu_info", "1 for each GPU (or share of one) a live job holds.",
                                 labels=["cluster", "job", "project", "user", "Hostname", "gpu", "UUID", "milli"])
        for cluster, job, project, user, host, index, uuid, milli in (
            GpuAssignment.objects.filter(released_at__isnull=True)
            .values_list("job__cluster__name", "job_id", "job__project__name", "job__user__username",
                         "gpu__host__name", "gpu__index", "gpu__uuid", "milli")
            .order_by("job__cluster__name", "job_id", "gpu__host__name", "gpu__index")
        ):
            info.add_metric([cluster, str(job), project, user, host, str(index), uuid, str(milli)], 1)
        yield info

    @staticmethod
    def _gpus(names):
        """GPUs by state, as DESIGN §5 and scheduler/core/measures.py define them."""
        held = defaultdict(lambda: [0, 0])  # cluster id -> [allocated milli, unallocated milli]
        for cluster_id, allocated, milli in (
            GpuAssignment.objects.filter(released_at__isnull=True)
            .annotate(cluster_id=F("job__cluster_id"), allocated=Q(job__min_runtime__gt=0))
            .values_list("cluster_id", "allocated").annotate(milli=Sum("milli")).order_by()
        ):
            held[cluster_id][0 if allocated else 1] += milli
        totals = {
            row["host__domain__cluster_id"]: row
            for row in Gpu.objects.values("host__domain__cluster_id").annotate(
                total=Count("id"),
                idle_milli=Sum(1000 - F("allocated_milli"),
                               filter=Q(health=GpuHealth.OK, host__state=HostState.UP), default=0),
            ).order_by()
        }
        gpus = GaugeMetricFamily("allot_gpus", "GPUs by what they do now (fractions in milli-GPU precision).",
                                 labels=["cluster", "state"])
        for cluster_id, name in names.items():
            row = totals.get(cluster_id, {"total": 0, "idle_milli": 0})
            allocated, unallocated = (milli / 1000 for milli in held[cluster_id])
            idle = max(0, row["idle_milli"]) / 1000
            unavailable = max(0.0, row["total"] - allocated - unallocated - idle)
            for state, value in (("allocated", allocated), ("unallocated", unallocated), ("idle", idle),
                                 ("unavailable", unavailable)):
                gpus.add_metric([name, state], value)
        yield gpus
        # Whole free GPUs per NVLink domain (the cluster page's bar chart): healthy, on an up host, unheld.
        domains = GaugeMetricFamily("allot_domain_free_gpus", "Whole GPUs free in each NVLink domain.",
                                    labels=["cluster", "domain"])
        for cluster_id, domain, free in (
            Gpu.objects.values_list("host__domain__cluster_id", "host__domain__name")
            .annotate(free=Count("id", filter=Q(health=GpuHealth.OK, host__state=HostState.UP, allocated_milli=0)))
            .order_by("host__domain__cluster_id", "host__domain__name")
        ):
            if cluster_id in names:
                domains.add_metric([names[cluster_id], domain], free)
        yield domains

    @staticmethod
    def _jobs():
        pending_jobs = GaugeMetricFamily("allot_pending_jobs", "Jobs waiting to start.",
                                         labels=["cluster", "project", "allocation"])
        pending_gpus = GaugeMetricFamily("allot_pending_gpus", "GPUs asked for by jobs waiting to start.",
                                         labels=["cluster", "project", "allocation"])
        for row in (
            Job.objects.filter(state=JobState.PENDING)
            .annotate(allocated=Q(min_runtime__gt=0))
            .values("cluster__name", "project__name", "allocated")
            .annotate(jobs=Count("id"), gpus=Sum("gpus")).order_by("cluster__name", "project__name", "allocated")
        ):
            labels = [row["cluster__name"], row["project__name"], "allocated" if row["allocated"] else "unallocated"]
            pending_jobs.add_metric(labels, row["jobs"])
            pending_gpus.add_metric(labels, row["gpus"] or 0)
        yield pending_jobs
        yield pending_gpus
        running = GaugeMetricFamily("allot_running_jobs", "Jobs holding GPUs (starting, running or being stopped).",
                                    labels=["cluster", "project"])
        for cluster, project, count in (
            Job.objects.filter(state__in=LIVE_STATES).values_list("cluster__name", "project__name")
            .annotate(count=Count("id")).order_by("cluster__name", "project__name")
        ):
            running.add_metric([cluster, project], count)
        yield running

    @staticmethod
    def _ticks(clusters):
        histogram = HistogramMetricFamily("allot_tick_duration_seconds", "Scheduling tick duration, lock to commit.",
                                          labels=["cluster"])
        for row in TickHistogram.objects.filter(cluster_id__in=clusters).select_related("cluster").order_by(
            "cluster__name"
        ):
            counts = list(row.buckets) + [0] * (len(TICK_BUCKETS) + 1 - len(row.buckets))
            cumulative, buckets = 0, []
            for bound, count in zip([*map(str, TICK_BUCKETS), "+Inf"], counts, strict=False):
                cumulative += count
                buckets.append((bound, cumulative))
            histogram.add_metric([row.cluster.name], buckets, row.sum_seconds)
        yield histogram

        ratio = GaugeMetricFamily("allot_unit_usage_ratio",
                                  "Allocated GPU time used ÷ entitled over the window, per unit, at the last tick.",
                                  labels=["cluster", "unit"])
        last_tick = GaugeMetricFamily("allot_last_tick_timestamp_seconds", "When the last tick started.",
                                      labels=["cluster"])
        stranded = GaugeMetricFamily("allot_stranded_ratio",
                                     "Free GPUs no job of `size` GPUs in one NVLink domain could use ÷ free GPUs.",
                                     labels=["cluster", "size"])
        largest = GaugeMetricFamily("allot_largest_placeable_gpus",
                                    "GPUs of the largest one-domain job that could start now.", labels=["cluster"])
        for cluster in clusters.values():
            tick = Tick.objects.filter(cluster=cluster).order_by("-started_at", "-id").only(
                "started_at", "unit_ratios").first()
            if tick is not None:
                last_tick.add_metric([cluster.name], tick.started_at.timestamp())
                for unit, value in sorted(tick.unit_ratios.items()):
                    ratio.add_metric([cluster.name, unit], value)
            sample = ClusterSample.objects.filter(cluster=cluster).order_by("-at").only(
                "stranded", "largest_placeable").first()
            if sample is not None:
                for size, value in sorted(sample.stranded.items(), key=lambda item: int(item[0])):
                    stranded.add_metric([cluster.name, size], value)
                largest.add_metric([cluster.name], sample.largest_placeable)
        yield from (ratio, last_tick, stranded, largest)

    @staticmethod
    def _preemptions(names):
        preemptions = CounterMetricFamily("allot_preemptions", "Preemptions by cause: job (fair share), drain, "
                                          "down, defrag, max_runtime.", labels=["cluster", "cause"])
        rows = {
            row["job__cluster_id"]: row
            for row in JobEvent.objects.filter(kind=EventKind.PREEMPT).values("job__cluster_id").annotate(
                **{cause: Count("id", filter=condition) for cause, condition in PREEMPTION_CAUSES.items()},
                all=Count("id"),
            ).order_by()
        }
        for cluster_id, name in names.items():
            row = rows.get(cluster_id, {})
            for cause in PREEMPTION_CAUSES:
                preemptions.add_metric([name, cause], row.get(cause, 0))
            other = row.get("all", 0) - sum(row.get(cause, 0) for cause in PREEMPTION_CAUSES)
            if other:
                preemptions.add_metric([name, "other"], other)
        yield preemptions

    @staticmethod
    def _hosts(names):
        host_state = GaugeMetricFamily("allot_host_state", "1 for the state each host is in, 0 for the others.",
                                       labels=["cluster", "host", "state"])
        hosts = GaugeMetricFamily("allot_hosts", "Hosts by state.", labels=["cluster", "state"])
        heartbeat = GaugeMetricFamily("allot_host_last_heartbeat_timestamp_seconds",
                                      "When the host's agent last reported.", labels=["cluster", "host"])
        counts = {(name, state): 0 for name in names.values() for state in HostState.values}
        for cluster_id, host, state, last in Host.objects.values_list(
            "domain__cluster_id", "name", "state", "last_heartbeat_at"
        ).order_by("domain__cluster__name", "name"):
            cluster = names[cluster_id]
            counts[(cluster, state)] += 1
            for value in HostState.values:
                host_state.add_metric([cluster, host, value], 1 if value == state else 0)
            if last is not None:
                heartbeat.add_metric([cluster, host], last.timestamp())
        for (cluster, state), count in counts.items():
            hosts.add_metric([cluster, state], count)
        yield from (host_state, hosts, heartbeat)

    @staticmethod
    def _xids():
        xids = CounterMetricFamily("allot_xid_events", "NVIDIA XID errors reported by hosts' agents.",
                                   labels=["cluster", "host", "xid"])
        for cluster, host, code, count in (
            HostEvent.objects.filter(kind=HostEvent.Kind.XID)
            .values_list("host__domain__cluster__name", "host__name", "code").annotate(count=Count("id"))
            .order_by("host__domain__cluster__name", "host__name", "code")
        ):
            xids.add_metric([cluster, host, str(code) if code is not None else "unknown"], count)
        yield xids


def metrics_text() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AllotCollector())
    return generate_latest(registry)


def metrics_view(request):
    """Prometheus text format; when METRICS_TOKEN is set, only for `Authorization: Bearer <token>`."""
    token = settings.METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "")
        if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            response = HttpResponse("metrics need `Authorization: Bearer <METRICS_TOKEN>`\n", status=401,
                                    content_type="text/plain; charset=utf-8")
            response["WWW-Authenticate"] = 'Bearer realm="allot metrics"'
            return response
    return HttpResponse(metrics_text(), content_type=CONTENT_TYPE)

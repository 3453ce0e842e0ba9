from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from budgets.permissions import is_oncall
from operations.selectors import hosts_out_of_service, project_consumption
from scheduler.models import Job
from scheduler.racks import (
    GPU_HEALTH_KINDS,
    MARK_WINDOW,
    cluster_summary,
    domain_views,
    gpu_health_marks,
    host_view,
    mark_reservations,
)
from scheduler.selectors import (
    chart_time,
    cluster_measures,
    drain_preview,
    drain_progress,
    free_by_domain,
    jobs_on_hosts,
    latest_tick,
    pending_demand,
    preemption_costs,
    project_usage_series,
    queue_view,
    range_seconds,
    sample_series,
)
from topology.choices import HostState
from topology.health import xid_advice, xid_meaning
from topology.models import Cluster, Domain, Host, HostEvent
from topology.services import ALREADY, TRANSITIONS, HostActionError, host_cordon, host_drain, host_resume

HOST_ACTIONS = {"cordon": host_cordon, "drain": host_drain, "resume": host_resume}
ONCALL_ONLY = "Only on-call engineers (group oncall) may cordon, drain or resume hosts."
EVENTS_SHOWN = 200


@login_required
def cluster_list(request):
    clusters = [(cluster, cluster_summary(cluster)) for cluster in Cluster.objects.all()]
    return render(request, "topology/cluster_list.html", {"clusters": clusters})


@login_required
def cluster_detail(request, name):
    """The cluster dashboard: the numbers now (refreshed in place), the charts, the policy, the domains."""
    cluster = get_object_or_404(Cluster, name=name)
    views = domain_views(cluster)
    measures = cluster_measures(cluster, views)
    context = {
        "cluster": cluster, "domains": views, "summary": cluster_summary(cluster, views),
        "states": measures.states, "fragmentation": measures.fragmentation, "pending": pending_demand(cluster),
        "tick": latest_tick(cluster), "free_by_domain": free_by_domain(views),
        "ranges": ["1h", "6h", "24h", "3d", "window"], "range": _range(request),
        "health_rows": cluster.health.describe(),
        "preemption_costs": preemption_costs(cluster, now=timezone.now()),
    }
    if request.htmx:
        return render(request, "topology/_cluster_live.html", context)
    return render(request, "topology/cluster_detail.html", context)


def _range(request) -> str:
    wanted = request.GET.get("range", "24h")
    return wanted if wanted in ("1h", "6h", "24h", "3d", "window") else "24h"


@login_required
def cluster_dashboard_data(request, name):
    """The charts' data for one range, as JSON (the page fetches it again every 30 s)."""
    cluster = get_object_or_404(Cluster, name=name)
    now = timezone.now()
    seconds = range_seconds(cluster, _range(request))
    views = domain_views(cluster)
    every = settings.ALLOT_SAMPLE_SECONDS
    return JsonResponse({
        "now": now.isoformat(),
        "range_seconds": seconds,
        # What the charts draw, in the pages' time zone: the whole chosen range, and when the next sample is due.
        "zone": settings.TIME_ZONE,
        "range_start": chart_time(now - timedelta(seconds=seconds)),
        "range_end": chart_time(now),
        "sample_seconds": every,
        "next_sample": timezone.localtime(now + timedelta(seconds=every)).strftime("%H:%M"),
        "samples": sample_series(cluster, now=now, seconds=seconds),
        "domains": free_by_domain(views),
        "largest_placeable": cluster_measures(cluster, views).fragmentation.largest_placeable,
        "consumption": project_consumption(cluster, now=now),
        "window_seconds": cluster.window_seconds,
        "by_project": project_usage_series(cluster, now=now, seconds=seconds),
    })


def _job_facts(views) -> dict:
    """Job id → what the rack shows on hover (name, user, contract, protection end); one query."""
    ids = {job_id for view in views for h in view.hosts for gpu in h.gpus for job_id, *_ in gpu.jobs}
    return {job.pk: job for job in Job.objects.filter(pk__in=ids).select_related("user", "project")}


def _mark_gpu_health(view, domain: Domain) -> None:
    """GPUs a recent health event names (an XID, an NVML error, …) carry its mark on the rack, as on the host
    page: one query for the domain, then the host page's two for each host with such an event."""
    since = timezone.now() - MARK_WINDOW
    marked_hosts = set(HostEvent.objects.filter(host__domain=domain, kind__in=list(GPU_HEALTH_KINDS),
                                                gpu__isnull=False, at__gte=since).values_list("host_id", flat=True))
    for tray in view.hosts:
        if tray.host.pk not in marked_hosts:
            continue
        marks = gpu_health_marks(tray.host)
        for gpu in tray.gpus:
            if gpu.index in marks:
                gpu.mark, gpu.mark_at, gpu.mark_detail = marks[gpu.index]


@login_required
def domain_detail(request, name, domain):
    """The rack: trays × GPUs coloured by what they do, reserved hosts marked, each GPU's job on hover."""
    cluster = get_object_or_404(Cluster, name=name)
    domain = get_object_or_404(Domain, cluster=cluster, name=domain)
    (view,) = domain_views(cluster, domain=domain)
    tick = latest_tick(cluster)
    reservations = [r for r in (tick.reservations if tick else []) if r.get("domain") == domain.name
                    or set(r.get("hosts", [])) & {h.host.name for h in view.hosts}]
    mark_reservations([view], reservations)
    _mark_gpu_health(view, domain)
    jobs = _job_facts([view])
    for tray in view.hosts:
        for gpu in tray.gpus:
            gpu.job_rows = [(jobs.get(job_id), project, milli, allocated)
                            for job_id, project, milli, allocated in gpu.jobs]
    in_rack: dict[int, dict] = {}
    for tray in view.hosts:
        for gpu in tray.gpus:
            for job, _, milli, _ in gpu.job_rows:
                if job is not None:
                    row = in_rack.setdefault(job.pk, {"job": job, "gpus": 0, "hosts": set()})
                    row["gpus"] += milli / 1000
                    row["hosts"].add(tray.host.name)
    jobs_here = sorted(in_rack.values(), key=lambda row: (-row["gpus"], row["job"].pk))
    context = {"cluster": cluster, "view": view, "reservations": reservations, "counts": view.counts,
               "jobs_here": jobs_here}
    if request.htmx:
        return render(request, "topology/_rack.html", context)
    return render(request, "topology/domain_detail.html", context)


def host_context(request, host: Host) -> dict:
    now = timezone.now()
    events = list(host.events.all()[:EVENTS_SHOWN])
    jobs = jobs_on_hosts([host]).get(host.pk, [])
    actions = [
        action for action in ("cordon", "drain", "resume")
        if host.state in TRANSITIONS[action][0] and host.state not in ALREADY[action]
    ]
    timeline = {"now": now.isoformat(), "events": [
        {"at": event.at.isoformat(), "kind": event.get_kind_display(), "detail": event.detail, "actor": event.actor}
        for event in events
    ]}
    xids = sorted({event.code for event in events if event.kind == "xid" and event.code is not None})
    policy = host.domain.cluster.health
    return {
        "host": host, "view": host_view(host), "events": events, "jobs": jobs,
        # When its jobs leave, as the scheduler decided it; before a drain, the core's rule as a what-if.
        "progress": drain_progress(jobs) if host.state == HostState.DRAINING else None,
        "preview": drain_preview(host, jobs, now=now) if host.state in (HostState.UP, HostState.CORDONED) and jobs
        else None,
        "can_act": is_oncall(request.user), "actions": actions, "now": now,
        "timeline": timeline,
        "xids": [(code, xid_meaning(code), xid_advice(code), policy.for_xid(code)) for code in xids],
        "heartbeat_age": (now - host.last_heartbeat_at).total_seconds() if host.last_heartbeat_at else None,
    }


@login_required
def host_detail(request, name):
    host = get_object_or_404(Host.objects.select_related("domain__cluster", "domain__block"), name=name)
    context = host_context(request, host)
    if request.htmx:
        return render(request, "topology/_host_live.html", context)
    return render(request, "topology/host_detail.html", context)


@login_required
@require_POST
def host_action(request, name, action):
    """Cordon, drain or resume from the host page: on-call only, a reason required."""
    host = get_object_or_404(Host, name=name)
    if action not in HOST_ACTIONS:
        raise PermissionDenied(f"unknown action {action!r}")
    if not is_oncall(request.user):
        raise PermissionDenied(ONCALL_ONLY)
    try:
        result = HOST_ACTIONS[action](host=host, actor=request.user, reason=request.POST.get("reason", ""))
    except HostActionError as error:
        messages.error(request, f"{action.capitalize()} refused: "
                                + (f"reason {error.message}" if error.field == "reason" else error.message))
    else:
        (messages.success if result.changed else messages.info)(request, result.message)
    return redirect("host-detail", name=host.name)


@login_required
def repairs(request):
    """Hosts out of service, for on-call: draining (and what blocks them), needing repair, cordoned."""
    context = {**hosts_out_of_service(), "can_act": is_oncall(request.user)}
    template = "topology/_repairs_body.html" if request.htmx else "topology/repairs.html"
    return render(request, template, context)


@login_required
def queue_home(request):
    """The queue of the cluster the user last submitted to, else the first cluster."""
    last = Job.objects.filter(user=request.user).order_by("-pk").values_list("cluster__name", flat=True).first()
    name = last or Cluster.objects.order_by("name").values_list("name", flat=True).first()
    if name is None:
        return redirect("cluster-list")
    return redirect("queue", name=name)


@login_required
def queue(request, name):
    """The cluster's queue in fair-share order, with the order explained; refreshes in place."""
    cluster = get_object_or_404(Cluster, name=name)
    context = {"cluster": cluster, **queue_view(cluster, user=request.user)}
    template = "scheduler/_queue_body.html" if request.htmx else "scheduler/queue.html"
    return render(request, template, context)

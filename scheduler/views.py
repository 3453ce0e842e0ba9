from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from budgets.selectors import posix_account
from scheduler.api.views import command_visibility
from scheduler.executors import default_duration
from scheduler.models import Job
from scheduler.selectors import live_gpu_ids, queue_view
from scheduler.services import can_cancel, job_cancel
from topology.models import Cluster


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


def _where(gpu_ids) -> list[tuple[str, str]]:
    """(host, its GPUs: "0-3", "0,2", or "2@500" for a fraction) for the job page."""
    by_host: dict[str, list[str]] = {}
    for gpu_id in gpu_ids:
        host, index = gpu_id.rsplit(":", 1)
        by_host.setdefault(host, []).append(index)
    rows = []
    for host, indices in sorted(by_host.items()):
        numbers = [int(index) for index in indices if index.isdigit()]
        whole_run = len(numbers) == len(indices) > 2 and numbers == list(range(numbers[0], numbers[0] + len(numbers)))
        rows.append((host, f"{numbers[0]}-{numbers[-1]}" if whole_run else ",".join(indices)))
    return rows


def _simulated_work(job) -> dict | None:
    """How far a simulated job's work has come (the demo's accelerated clock)."""
    if job.cluster.executor != "simulated":
        return None
    needed = job.simulated_duration or default_duration(job)
    done = job.work_done
    if job.is_live and job.run_started_at:
        done += (timezone.now() - job.run_started_at).total_seconds() * settings.ALLOT_SIMULATION_SPEED
    return {"done": min(done, needed), "needed": needed, "speed": settings.ALLOT_SIMULATION_SPEED}


@login_required
def job_detail(request, pk):
    job = get_object_or_404(Job.objects.select_related("cluster", "project", "user", "preempted_for"), pk=pk)
    gpu_ids = live_gpu_ids([job.pk]).get(job.pk, [])
    context = {
        "job": job,
        "events": job.events.order_by("at", "id"),
        "gpu_ids": gpu_ids,
        "where": _where(gpu_ids),
        "hosts": sorted({gpu_id.split(":")[0] for gpu_id in gpu_ids}),
        "pending_total": Job.objects.pending().filter(cluster=job.cluster).count() if job.state == "pending" else 0,
        "work": _simulated_work(job),
        "processes": job.processes.filter(run=job.restarts).select_related("host").order_by("rank"),
        "show_command": command_visibility(request.user)(job),
        "account": posix_account(job.user),
        "can_cancel": can_cancel(request.user, job) and not job.is_final and job.stop_cause != "cancel",
    }
    template = "scheduler/_job_body.html" if request.htmx else "scheduler/job_detail.html"
    return render(request, template, context)


@login_required
@require_POST
def job_cancel_view(request, pk):
    job = get_object_or_404(Job, pk=pk)
    if not can_cancel(request.user, job):
        raise PermissionDenied(f"Only {job.user.username} or a manager of {job.project.name} may cancel job {job.pk}.")
    if job.is_final:
        messages.error(request, f"Job {job.pk} already ended ({job.state}).")
    else:
        job = job_cancel(job=job, actor=request.user, reason=request.POST.get("reason", "")[:500])
        messages.success(request, f"Job {job.pk} " + ("cancelled." if job.is_final else "is being stopped."))
    return redirect("job-detail", pk=job.pk)

import csv
from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_POST
from rest_framework.exceptions import ValidationError as DRFValidationError

from budgets.models import Membership, Unit
from budgets.selectors import posix_account
from scheduler.api.serializers import job_request
from scheduler.api.views import command_visibility
from scheduler.core import jobspec
from scheduler.core.durations import format_duration, parse_cli_duration
from scheduler.core.lifecycle import Cause
from scheduler.core.model import hosts_of
from scheduler.executors import simulated_progress
from scheduler.forms import HistoryForm, UsageForm
from scheduler.models import Job
from scheduler.selectors import UnknownName, job_history, live_gpu_ids
from scheduler.services import JobError, SubmitRefused, can_cancel, job_cancel, job_submit
from topology.models import Cluster


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
    progress = simulated_progress(job, now=timezone.now(), policy=job.cluster.scheduling_policy())
    return {"done": progress.done, "needed": progress.needed, "speed": settings.ALLOT_SIMULATION_SPEED}


def _simulated_ranks(job, processes) -> dict | None:
    """A simulated run's ranks in one line (hosts and states): none of them prints anything to show."""
    if job.cluster.executor != "simulated" or not processes or any(
            process.output_tail or process.error for process in processes):
        return None
    return {"hosts": [process.host.name for process in processes],
            "states": sorted({process.state for process in processes})}


# The job table's fields the job page shows in words of its own; any other one not at its default is in
# "Also asks".
JOB_PAGE_SHOWS = ("cluster", "project", "gpus", "gpus_per_host", "gpu_type", "gpu_milli", "mig_profile", "topology",
                  "cpus", "memory_gib", "min_runtime", "max_runtime", "resumable", "name", "simulated_duration",
                  "command", "workdir", "env")


@login_required
def job_detail(request, pk):
    job = get_object_or_404(Job.objects.select_related("cluster", "project", "user", "preempted_for"), pk=pk)
    gpu_ids = live_gpu_ids([job.pk]).get(job.pk, [])
    asked = request.GET.get("run", "")
    run = int(asked) if asked.isdigit() and int(asked) <= job.restarts else job.restarts
    processes = list(job.processes.filter(run=run).select_related("host").order_by("rank"))
    context = {
        "job": job,
        "events": job.events.order_by("at", "id"),
        "gpu_ids": gpu_ids,
        "where": _where(gpu_ids),
        "hosts": hosts_of(gpu_ids),
        "pending_total": Job.objects.pending().filter(cluster=job.cluster).count() if job.state == "pending" else 0,
        "work": _simulated_work(job),
        "processes": processes,
        "simulated_ranks": _simulated_ranks(job, processes),
        "run": run,
        "runs": list(range(job.restarts + 1)),
        "show_command": command_visibility(request.user)(job),
        "account": posix_account(job.user),
        "can_cancel": can_cancel(request.user, job) and not job.is_final and job.stop_cause != Cause.CANCEL,
        "also": jobspec.also_asked({spec.name: getattr(job, spec.name) for spec in jobspec.SUBMIT},
                                   shown=JOB_PAGE_SHOWS),
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


# ---------------------------------------------------------------- history, usage, submit


HISTORY_ROWS = 200  # a page of the Jobs page; the CSV has the whole selection
CSV_COLUMNS = ["id", "name", "cluster", "project", "user", "state", "gpus", "gpu_milli", "mig_profile", "min_runtime",
               "max_runtime", "resumable", "submitted_at", "started_at", "ended_at", "elapsed_seconds", "exit_code",
               "preemptions", "restarts", "reason"]


def _elapsed(job) -> int | None:
    if not job.started_at:
        return None
    return int(((job.ended_at or timezone.now()) - job.started_at).total_seconds())


def _csv_response(filename: str, header: list[str], rows) -> HttpResponse:
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    writer.writerow(header)
    writer.writerows(rows)
    return response


@login_required
def job_history_view(request):
    """Every job asked for (mine over the last week unless the filters say otherwise), newest first; a job id
    from the navigation bar's search goes to its page; `format=csv` exports the whole selection."""
    wanted = request.GET.get("id", "").strip().lstrip("#")
    if wanted:
        if wanted.isdigit() and len(wanted) < 19 and Job.objects.filter(pk=int(wanted)).exists():
            return redirect("job-detail", pk=int(wanted))
        messages.error(request, f"No job {wanted[:40]}: job ids are whole numbers; the jobs below are yours.")
    params = request.GET.copy()
    params.pop("id", None)
    params.pop("format", None)
    asked_page = params.pop("page", ["1"])[-1]
    page = int(asked_page) if asked_page.isdigit() and 0 < int(asked_page) < 100000 else 1
    if not any(value for value in params.values()):
        params.update({"mine": "on", "since": (timezone.localdate() - timedelta(days=7)).isoformat()})
    form = HistoryForm(params)
    jobs, total = [], 0
    if form.is_valid():
        try:
            selection = job_history(form.cleaned_data, user=request.user)
        except UnknownName as error:
            for field, problems in error.errors.items():
                form.add_error(field, problems)
        else:
            if request.GET.get("format") == "csv":
                return _csv_response("allot-jobs.csv", CSV_COLUMNS, (
                    [job.pk, job.name, job.cluster.name, job.project.name, job.user.username, job.state, job.gpus,
                     job.gpu_milli, job.mig_profile, job.min_runtime, job.max_runtime or "", job.resumable,
                     job.submitted_at.isoformat(), job.started_at.isoformat() if job.started_at else "",
                     job.ended_at.isoformat() if job.ended_at else "", _elapsed(job) or "",
                     "" if job.exit_code is None else job.exit_code, job.preemptions, job.restarts,
                     job.failure_reason or job.shown_stop_cause or job.pending_reason]
                    for job in selection.iterator(chunk_size=1000)))
            total = selection.count()
            first = (page - 1) * HISTORY_ROWS
            jobs = [(job, _elapsed(job)) for job in selection[first:first + HISTORY_ROWS]]
    query = params.urlencode()
    first = (page - 1) * HISTORY_ROWS
    return render(request, "scheduler/history.html", {
        "form": form, "jobs": jobs, "total": total, "query": query, "page": page,
        "first": first + 1, "last": first + len(jobs),
        "previous_page": page - 1 if page > 1 else None,
        "next_page": page + 1 if first + len(jobs) < total else None,
        "clusters": Cluster.objects.order_by("name").values_list("name", flat=True),
        "zone": timezone.get_current_timezone_name(),
    })


@login_required
def usage_view(request):
    """GPU-hours used by unit and by user over a chosen period, against entitlement; `format=csv` exports it."""
    params = request.GET.copy()
    params.pop("format", None)
    form = UsageForm(params)
    report = form.report() if form.is_valid() else None
    if report and request.GET.get("format") == "csv":
        rows = []
        for cluster in report["clusters"]:
            for unit in cluster["units"]:
                rows.append([cluster["cluster"], unit["unit"], unit["parent"] or "", "", unit["allocated_gpu_hours"],
                             unit["unallocated_gpu_hours"], unit["entitled_gpu_hours"],
                             "" if unit["percent_of_entitlement"] is None else unit["percent_of_entitlement"]])
                rows += [[cluster["cluster"], unit["unit"], unit["parent"] or "", user["user"],
                          user["allocated_gpu_hours"], user["unallocated_gpu_hours"], "", ""] for user in unit["users"]]
        return _csv_response("allot-usage.csv", ["cluster", "unit", "parent", "user", "allocated_gpu_hours",
                                                 "unallocated_gpu_hours", "entitled_gpu_hours",
                                                 "percent_of_entitlement"], rows)

    if report:
        # The page leaves out units with nothing to show on a cluster (no share there, nothing run): a cluster
        # without allocations would list every unit of the org as zeros. The CSV keeps every row.
        for cluster in report["clusters"]:
            cluster["shown"] = [unit for unit in cluster["units"] if unit["allocated_gpu_hours"]
                                or unit["unallocated_gpu_hours"] or unit["entitled_gpu_hours"]]
    return render(request, "scheduler/usage.html", {
        "form": form, "report": report, "query": params.urlencode(),
        "since": parse_datetime(report["since"]) if report else None,
        "until": parse_datetime(report["until"]) if report else None,
        "clusters": Cluster.objects.order_by("name").values_list("name", flat=True),
        "units": Unit.objects.order_by("name").values_list("name", flat=True),
        "zone": timezone.get_current_timezone_name(),
    })


# The Submit page's fields: the job table's (scheduler/core/jobspec.py) that have a label, in its order.
FORM_FIELDS = tuple(spec for spec in jobspec.SUBMIT if spec.label)
SUBMIT_FIELDS = tuple(spec.name for spec in FORM_FIELDS)
DURATION_FIELDS = tuple(spec.name for spec in FORM_FIELDS if spec.kind == jobspec.SECONDS)
# What an empty form starts with, besides the table's defaults.
FORM_START = {"gpus": 1, "min_runtime": "1h"}


def _prefill(job) -> dict:
    """A job's contract as the Submit form's values (durations as `allot` prints them)."""
    values = {}
    for spec in FORM_FIELDS:
        value = getattr(job, spec.name)
        if spec.kind == jobspec.NAME:
            value = value.name
        elif spec.kind == jobspec.MAP:
            value = "\n".join(f"{name}={text}" for name, text in (value or {}).items())
        elif value is None:
            value = ""
        elif spec.kind == jobspec.SECONDS:
            value = format_duration(value)
        values[spec.name] = value
    return values


def _submission(post) -> tuple[dict, dict[str, list[str]]]:
    """The form's text as the API's body: durations as Slurm users type them, env as NAME=VALUE lines."""
    data, errors = {}, {}
    for spec in FORM_FIELDS:
        field, value = spec.name, post.get(spec.name, "")
        if spec.kind == jobspec.BOOL:
            data[field] = bool(value)
        elif spec.kind == jobspec.MAP:
            env = {}
            for number, line in enumerate(value.splitlines(), 1):
                if line.strip():
                    name, equals, rest = line.partition("=")
                    if not equals or not name.strip():
                        errors.setdefault(field, []).append(f"line {number}: expected NAME=VALUE")
                    env[name.strip()] = rest
            data[field] = env
        elif spec.kind == jobspec.SECONDS:
            if value.strip():
                try:
                    data[field] = parse_cli_duration(value)
                except ValueError as error:
                    errors[field] = [str(error)]
            elif spec.required:
                errors[field] = [f"required: {spec.hint or 'e.g. 2h, 90 (minutes), 02:30:00'}"]
        elif spec.kind == jobspec.TEXT:
            data[field] = value if spec.verbatim else value.strip()
        elif value.strip():
            data[field] = value.strip()
    return data, errors


def _form(values: dict, errors: dict, options: dict) -> list[dict]:
    """Each field of the Submit page as its template draws it: the input, its value and its errors."""
    rows = []
    for spec in FORM_FIELDS:
        value = values.get(spec.name)
        if value in (None, "") and not spec.required and spec.default is not None:
            value = spec.default
        if spec.kind in (jobspec.INT, jobspec.SECONDS, jobspec.TEXT) and not spec.choices:
            widget = "textarea" if spec.multiline else "number" if spec.kind == jobspec.INT else "text"
        else:
            widget = {jobspec.BOOL: "checkbox", jobspec.MAP: "textarea"}.get(spec.kind, "select")
        choices = options.get(spec.name, spec.choices)
        rows.append({
            "spec": spec, "widget": widget, "id": "f-" + spec.name.replace("_", "-"),
            "value": "" if value is None else str(value), "errors": errors.get(spec.name, []),
            "checked": bool(value) and value != "False", "options": choices,
            # A select's empty choice: none of the offered values (a MIG profile), or nothing to choose from.
            "blank": spec.placeholder if spec.kind == jobspec.TEXT or not choices else None,
            "wide": spec.verbatim or spec.kind == jobspec.MAP,
            "size": 10 if spec.kind == jobspec.SECONDS else 60 if spec.verbatim else None,
            "cols": 90 if spec.multiline else 60,
        })
    return rows


def _flatten(errors) -> dict[str, list[str]]:
    flat = {}
    for field, problems in (errors.items() if isinstance(errors, dict) else [("non_field_errors", errors)]):
        if isinstance(problems, dict):
            problems = [f"{key}: {' '.join(map(str, value if isinstance(value, list) else [value]))}"
                        for key, value in problems.items()]
        flat[field] = [str(problem) for problem in (problems if isinstance(problems, list) else [problems])]
    return flat


@login_required
def job_submit_view(request):
    """Submit from the browser (or resubmit: `?from=<job>` prefills its contract), through the API's boundary:
    the same serializer, the same service, the same messages."""
    values = dict(FORM_START)
    source = None
    errors: dict[str, list[str]] = {}
    if request.method == "POST":
        values = request.POST.dict()
        data, errors = _submission(request.POST)
        if not errors:
            try:
                job = job_submit(user=request.user, request=job_request(data))
            except DRFValidationError as error:
                errors = _flatten(error.detail)
            except JobError as error:
                errors = error.errors
            except SubmitRefused as error:
                errors = {"project": [str(error)]}
            else:
                messages.success(request, f"Submitted job {job.pk}.")
                return redirect("job-detail", pk=job.pk)
    elif request.GET.get("from", "").isdigit():
        source = Job.objects.select_related("cluster", "project", "user").filter(pk=int(request.GET["from"])).first()
        if source is None or source.user_id != request.user.pk:
            raise Http404("You can resubmit only your own jobs.")
        values = _prefill(source)
    roots = set(Membership.objects.filter(user=request.user).values_list("unit_id", flat=True))
    projects = [unit.name for unit in Unit.objects.projects().order_by("name")
                if unit.pk in roots or (unit.parent_id in roots)]
    clusters = [(name, name) for name in Cluster.objects.order_by("name").values_list("name", flat=True)]
    form = _form(values, errors, {"cluster": clusters, "project": [(name, name) for name in projects]})
    return render(request, "scheduler/submit.html", {
        "values": values, "errors": errors, "source": source, "projects": projects, "form": form,
        "other_errors": {field: problems for field, problems in errors.items() if field not in SUBMIT_FIELDS},
    })

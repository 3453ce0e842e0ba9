"""Job workflows: submit, cancel, and the end of a run. Keyword-only, atomic, every change recorded."""

from dataclasses import field as dataclass_field
from dataclasses import make_dataclass
from datetime import datetime

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from budgets.models import Unit
from budgets.permissions import is_member, manages
from budgets.selectors import share_of_cluster
from client.execution import ENV_NAME, RESERVED_NAMES, RESERVED_PREFIXES
from config.text import forbidden_in
from scheduler.choices import FINAL_STATES, LIVE_STATES, EventKind, JobState, Topology
from scheduler.core import jobspec
from scheduler.core.durations import format_duration
from scheduler.core.lifecycle import Cause, Outcome, StopCause, end_of_run
from scheduler.core.mig import PROFILES as MIG_PROFILES
from scheduler.models import GpuAssignment, Job, JobEvent, JobProcess
from scheduler.notify import job_ended
from topology.models import Cluster, Gpu, Host
from topology.spec import SUBMIT_ALLOCATED

# A job's own environment: bounded, so that it fits in every heartbeat reply that carries it.
MAX_ENV_VARIABLES = 256
MAX_ENV_NAME_LENGTH = 255
MAX_ENV_VALUE_LENGTH = jobspec.FIELD["env"].max_length
MAX_ENV_TOTAL = 65536
CONTROL_CHARACTERS = {chr(code) for code in (*range(0x20), 0x7F)}


class JobError(Exception):
    """A request refused; `errors` maps each field to its messages (the API's 400 body)."""

    def __init__(self, errors: dict[str, list[str]]):
        self.errors = errors
        super().__init__("; ".join(f"{field}: {' '.join(messages)}" for field, messages in errors.items()))


def _request_field(spec: jobspec.JobField) -> tuple:
    if spec.required:
        return spec.name, spec.annotation
    if spec.kind == jobspec.MAP:
        return spec.name, spec.annotation, dataclass_field(default_factory=dict)
    return spec.name, spec.annotation, dataclass_field(default=spec.default)


JobRequest = make_dataclass(
    "JobRequest", [_request_field(spec) for spec in jobspec.SUBMIT], kw_only=True,
    namespace={"__module__": __name__, "__doc__": "A submission, as the API, the Submit page and the CLI send it "
               "(durations in seconds): the job table's fields (scheduler/core/jobspec.py), by keyword."},
)


def env_problems(env) -> list[str]:
    """What is wrong with a job's `env` (each message names the variable and the limit)."""
    if env is None:
        return []
    if not isinstance(env, dict):
        return ["must be an object of NAME: VALUE"]
    problems = []
    if len(env) > MAX_ENV_VARIABLES:
        problems.append(f"at most {MAX_ENV_VARIABLES} variables; got {len(env)}")
    total = 0
    for name, value in env.items():
        shown = repr(name[:40]) if isinstance(name, str) else repr(name)
        if not isinstance(name, str) or not ENV_NAME.match(name):
            problems.append(f"{shown} is not a variable name (letters, digits and _, not starting with a digit)")
            continue
        if len(name) > MAX_ENV_NAME_LENGTH:
            problems.append(f"{shown}…: names are at most {MAX_ENV_NAME_LENGTH} characters")
            continue
        if name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES):
            problems.append(f"{name} is set by the agent for every job (HOME, USER, CUDA_VISIBLE_DEVICES, the "
                            "torchrun variables, ALLOT_* and PET_*): it cannot be given")
            continue
        if not isinstance(value, str):
            problems.append(f"{name}: the value must be text")
            continue
        if "\x00" in value:
            problems.append(f"{name}: the value contains a NUL character")
        if len(value) > MAX_ENV_VALUE_LENGTH:
            problems.append(f"{name}: the value is {len(value)} characters; at most {MAX_ENV_VALUE_LENGTH}")
        total += len(name) + len(value)
    if total > MAX_ENV_TOTAL:
        problems.append(f"{total} characters in all; at most {MAX_ENV_TOTAL}")
    return problems


def workdir_problems(workdir: str) -> list[str]:
    """Beyond the table's bounds (its length): absolute, one line."""
    if not workdir:
        return []
    if not workdir.startswith("/"):
        return [f"must be an absolute path (from /); got {workdir[:100]!r}"]
    if CONTROL_CHARACTERS & set(workdir):
        return ["must not contain control characters (NUL, newline, …)"]
    return []


def _host_limits(cluster: Cluster) -> dict:
    hosts = Host.objects.filter(domain__cluster=cluster)
    return {
        "gpu_types": sorted(set(hosts.values_list("gpu_type", flat=True))),
        **hosts.aggregate(max_gpus_per_host=Max("gpu_count"), max_cpus=Max("cpus"), max_memory=Max("memory_gib")),
    }


def job_validate(*, user, request: JobRequest) -> tuple[Cluster, Unit]:
    """Every check of DESIGN.md §7, each error naming its field and the limit."""
    errors: dict[str, list[str]] = {}

    def refuse(field: str, message: str):
        errors.setdefault(field, []).append(message)

    # Each field's kind and bounds (the job table's); names, shown on pages and terminals, hold no controls and
    # no bidi overrides (whatever path the job came by); nothing that could not be stored is looked up.
    for spec in jobspec.SUBMIT:
        value = getattr(request, spec.name)
        problem = jobspec.problem(spec, value)
        if problem is None and spec.kind in (jobspec.TEXT, jobspec.NAME) and not spec.verbatim:
            problem = forbidden_in(value)
            problem = f"{problem}; remove it" if problem else None
        if problem:
            refuse(spec.name, problem)
    cluster = Cluster.objects.filter(name=request.cluster).first() if "cluster" not in errors else None
    if cluster is None and "cluster" not in errors:
        refuse("cluster", f"no cluster named {request.cluster!r}")
    project = Unit.objects.filter(name=request.project).first() if "project" not in errors else None
    if project is None and "project" not in errors:
        refuse("project", f"no project named {request.project!r}")
    elif project.children.exists():
        names = ", ".join(project.children.order_by("name").values_list("name", flat=True))
        refuse("project", f"{project.name} is not a project (jobs are charged to a unit with no children: {names})")
    elif not is_member(user, project):
        refuse("project", f"you are not a member of {project.name}; ask one of its managers to add you")

    if request.gpu_milli < 1000 and request.gpus != 1 and not errors.keys() & {"gpu_milli", "gpus"}:
        refuse("gpu_milli", "a fraction of a GPU is only for a 1-GPU job")
    if request.mig_profile and "mig_profile" not in errors:
        if request.mig_profile not in MIG_PROFILES:
            refuse("mig_profile", f"{request.mig_profile!r} is not a MIG profile; one of {', '.join(MIG_PROFILES)}")
        elif request.gpus != 1:
            refuse("mig_profile", f"a MIG instance is a slice of one GPU: gpus must be 1, got {request.gpus}")
        elif request.gpu_milli != 1000:
            refuse("mig_profile", f"a MIG instance and a fraction of a GPU (gpu_milli {request.gpu_milli}) "
                                  "exclude each other: ask for one of them")
    if (request.gpus_per_host and not errors.keys() & {"gpus", "gpus_per_host"}
            and request.gpus % request.gpus_per_host):
        refuse("gpus_per_host", f"{request.gpus} GPUs do not split evenly into hosts of {request.gpus_per_host}")
    if (request.max_runtime is not None and not errors.keys() & {"min_runtime", "max_runtime"}
            and request.max_runtime < max(request.min_runtime, 1)):
        refuse("max_runtime", f"must be at least the minimum runtime ({format_duration(request.min_runtime)})")
    for message in workdir_problems(request.workdir):
        refuse("workdir", message)
    for message in env_problems(request.env):
        refuse("env", message)

    if cluster is not None:
        if request.min_runtime > cluster.max_min_runtime_seconds:
            refuse(
                "min_runtime",
                f"{format_duration(request.min_runtime)} is over the cap of {cluster.name}: "
                f"{format_duration(cluster.max_min_runtime_seconds)}",
            )
        if cluster.executor == "agent" and not request.command.strip():
            refuse("command", "required: the agent runs this command on the job's hosts")
        limits = _host_limits(cluster)
        wanted_types = [t for t in request.gpu_type.split("|") if t]
        unknown = [t for t in wanted_types if t not in limits["gpu_types"]]
        if unknown:
            refuse("gpu_type", f"{cluster.name} has no {', '.join(unknown)} GPUs "
                               f"(it has {', '.join(limits['gpu_types'])})")
        if request.mig_profile in MIG_PROFILES and not errors.get("mig_profile"):
            mig_types = _mig_gpu_types(cluster)
            allowed = [t for t in wanted_types if t in mig_types] if wanted_types else mig_types
            if not mig_types:
                refuse("mig_profile", f"{cluster.name} has no GPU in MIG mode")
            elif not allowed and not unknown:
                refuse("mig_profile", f"{cluster.name} has no {request.gpu_type} GPU in MIG mode "
                                      f"(its MIG GPUs are {', '.join(mig_types)})")
        total = cluster.gpu_counts()["total"]
        if request.gpus > total:
            refuse("gpus", f"{request.gpus} is more than {cluster.name} has ({total})")
        elif request.topology == Topology.DOMAIN and request.gpus > cluster.largest_domain_capacity():
            refuse(
                "gpus",
                f"a domain job needs all its GPUs in one NVLink domain; the largest domain of {cluster.name} "
                f"holds {cluster.largest_domain_capacity()}",
            )
        per_host = limits["max_gpus_per_host"] or 1
        if request.gpus_per_host and request.gpus_per_host > per_host:
            refuse("gpus_per_host", f"no host of {cluster.name} has more than {per_host} GPUs")
        # CPUs and memory are per job, split evenly over the hosts it spans.
        hosts_needed = -(-max(request.gpus, 1) // (request.gpus_per_host or per_host))
        for field, asked, per_host_limit in (
            ("cpus", request.cpus, limits["max_cpus"]), ("memory_gib", request.memory_gib, limits["max_memory"]),
        ):
            if per_host_limit and asked > per_host_limit * hosts_needed:
                refuse(field, f"{asked} is more than {hosts_needed} host(s) of {cluster.name} have "
                              f"({per_host_limit} per host)")
        if project is not None and not errors.get("project") and request.min_runtime > 0:
            if share_of_cluster(project, cluster) <= 0:
                refuse(
                    "min_runtime",
                    f"{project.name} has no allocation on {cluster.name}: submit with min_runtime 0 to run "
                    "unallocated (free, preemptible at any time), or ask for a budget",
                )
    if errors:
        raise JobError(errors)
    submit_allowed(cluster=cluster, project=project)
    return cluster, project


class SubmitRefused(PermissionDenied):
    """The cluster's policy (`submit:` in its file) does not take jobs from this project: a 403."""


def submit_allowed(*, cluster: Cluster, project: Unit) -> None:
    """Refuse (403, naming the rule) a project the cluster's `submit:` policy leaves out."""
    rule = cluster.submit_policy
    if rule == SUBMIT_ALLOCATED:
        if share_of_cluster(project, cluster) <= 0:
            raise SubmitRefused(f"{cluster.name} takes jobs only from units with an allocation on it (cluster policy "
                                f"`{cluster.submit_rule}`); {project.name} has none: ask for a budget")
    elif isinstance(rule, list):
        chain = {project.name, *(unit.name for unit in project.ancestors())}
        if not chain & set(rule):
            raise SubmitRefused(f"{cluster.name} takes jobs only from {', '.join(rule)} and the units under them "
                                f"(cluster policy `{cluster.submit_rule}`); {project.name} is not one of them")


def _mig_gpu_types(cluster: Cluster) -> list[str]:
    return sorted(set(Gpu.objects.filter(host__domain__cluster=cluster, mig_enabled=True)
                      .values_list("host__gpu_type", flat=True)))


@transaction.atomic
def job_submit(*, user, request: JobRequest, at: datetime | None = None) -> Job:
    cluster, project = job_validate(user=user, request=request)
    at = at or timezone.now()
    stored = {spec.name: getattr(request, spec.name) for spec in jobspec.SUBMIT if spec.kind != jobspec.NAME}
    job = Job.objects.create(
        **{**stored, "env": request.env or {}}, cluster=cluster, project=project, user=user, submitted_at=at,
        pending_reason="waiting for the next scheduling tick",
    )
    contract = (
        f"allocated: protected for {format_duration(job.min_runtime)}" if job.allocated
        else "unallocated: free, preemptible at any time"
    )
    asks = f"a {job.mig_profile} MIG instance" if job.mig_profile else f"{job.gpus} GPU{'s' if job.gpus != 1 else ''}"
    JobEvent.objects.create(
        job=job, at=at, kind=EventKind.SUBMIT, actor=user.get_username(),
        detail=f"{asks} on {cluster.name} for {project.name}; {contract}"
        f"{'; resumable' if job.resumable else ''}",
    )
    return job


def can_cancel(user, job: Job) -> bool:
    return job.user_id == user.pk or user.is_superuser or manages(user, job.project)


@transaction.atomic
def job_cancel(*, job: Job, actor, reason: str = "", at: datetime | None = None) -> Job:
    """Cancel: a pending job ends at once; a live one is stopped (SIGTERM, grace, SIGKILL) first."""
    at = at or timezone.now()
    who = actor.get_username() if hasattr(actor, "get_username") else str(actor)
    detail = f"cancelled by {who}" + (f": {reason}" if reason else "")
    if Job.objects.filter(pk=job.pk, state=JobState.PENDING).update(
        state=JobState.CANCELLED, ended_at=at, queue_position=None, pending_reason="", estimated_start=None,
        earmarked_gpus=[],
    ):
        JobEvent.objects.create(job=job, at=at, kind=EventKind.CANCEL, actor=who, cause=Cause.CANCEL, detail=detail)
    elif Job.objects.filter(pk=job.pk, state__in=LIVE_STATES).exclude(stop_cause=Cause.CANCEL).update(
        stop_cause=Cause.CANCEL, stop_detail="",
        stop_deadline=at + timezone.timedelta(seconds=job.cluster.grace_period_seconds),
    ):
        JobEvent.objects.create(
            job=job, at=at, kind=EventKind.CANCEL, actor=who, cause=Cause.CANCEL,
            detail=f"{detail}; stopping its processes",
        )
    job.refresh_from_db()
    return job


def release_gpus(job: Job, *, at: datetime, hosts=None) -> int:
    """Let go of the job's live GPUs (on `hosts` only, when given); the database keeps each GPU's milli in step."""
    live = GpuAssignment.objects.filter(job=job, released_at__isnull=True)
    if hosts is not None:
        live = live.filter(gpu__host__in=hosts)
    return live.update(released_at=at)


@transaction.atomic
def job_end_run(*, job: Job, outcome: Outcome, at: datetime, actor: str, cause: StopCause | None = None,
                detail: str = "", exit_code: int | None = None) -> Job | None:
    """End the current run of a live job and do what `core.lifecycle.end_of_run` decides becomes of it.

    `outcome` is what happened to the processes: `exited` (with `exit_code`),
    `stopped` (for the job's stop cause), or `lost` (its host went down).
    `cause`, when given, is why instead of the job's own stop cause (a host down).
    Returns None when another writer got there first (compare-and-swap).
    """
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.state not in LIVE_STATES:
        return None
    outcome = Outcome(outcome)
    stop = cause or job.stop
    end = end_of_run(outcome, stop, job.resumable, exit_code)
    state, kind = JobState(end.state), EventKind(end.event)
    run_seconds = (at - job.run_started_at).total_seconds() if job.run_started_at else 0

    release_gpus(job, at=at)
    unfinished = [JobProcess.State.ASSIGNED, JobProcess.State.RUNNING]
    JobProcess.objects.filter(job=job, run=job.run, state__in=unfinished).update(
        state=JobProcess.State.LOST if outcome == Outcome.LOST else JobProcess.State.EXITED, ended_at=at
    )
    updates = {
        "state": state, "stop_cause": "", "stop_detail": "", "stop_deadline": None, "preempted_for": None,
        "exit_code": exit_code,
    }
    if state == JobState.FAILED:
        updates["failure_reason"] = end.failure_reason[:500]
    if end.requeue:
        updates.update(
            restarts=F("restarts") + 1, run_started_at=None, run_protected_until=None,
            pending_reason="requeued; waiting for the next tick",
        )
        if end.backs_off:
            updates["requeued_at"] = at  # an unallocated job backs off from here (`core.model.backoff`)
    else:
        updates.update(ended_at=at)
    Job.objects.filter(pk=job.pk).update(**updates)
    written = str(stop) if stop else ""
    summary = detail or {
        JobState.COMPLETED: f"finished after {format_duration(run_seconds)}",
        JobState.CANCELLED: "stopped after cancel",
        JobState.PENDING: f"requeued with its original submit time after {format_duration(run_seconds)} "
                          f"({written or 'host lost'})",
        JobState.PREEMPTED: f"preempted and not resumable: stopped for good ({written})",
        JobState.FAILED: f"failed: {end.failure_reason}"
                         + (f", exit code {exit_code}" if exit_code is not None else ""),
    }[state]
    JobEvent.objects.create(job=job, at=at, kind=kind, actor=actor, cause=written[:200], detail=summary)
    if state in FINAL_STATES:
        job_ended(job.pk, summary=summary, at=at)
    job.refresh_from_db()
    return job

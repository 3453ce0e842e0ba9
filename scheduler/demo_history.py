"""A week of history for the demo, written once by `manage.py demo` on a fresh database.

Without it the demo opens on an empty window: every usage ratio is 0 %, the
dashboards have one point and the what-if has nothing to replay. This packs
a week of ended jobs (debug runs, single-host and rack-scale training,
unallocated sweeps) onto the demo cluster's healthy GPUs, each at the first
moment GPUs were free for it after it was submitted, and keeps what the live
system would have kept of them: the jobs, their events, GPU assignments
(which fair share, usage pages and the what-if read) and a dashboard sample
every quarter of an hour, measured by the same pure measures as the tick's.

Projects use their entitlement unevenly (`APPETITE`), so the queue's ratios
differ from the first page load. Jobs that started before `now` and have not
ended are left running (their work goes on in real time), so the demo opens
on a busy cluster: new submissions queue behind them with estimated starts.
"""

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction

from budgets.choices import Role
from budgets.models import Allocation, Membership, Unit
from scheduler.choices import EventKind, JobState
from scheduler.core.durations import format_duration
from scheduler.core.measures import Held, measure
from scheduler.core.model import hosts_of, shield
from scheduler.models import ClusterSample, GpuAssignment, Job, JobEvent, JobProcess
from scheduler.racks import domain_views
from scheduler.selectors import measures_input
from topology.choices import HostState
from topology.models import Gpu

HISTORY_ACTOR = "system:scheduler"
SAMPLE_EVERY = timedelta(minutes=15)
DAYS = 7
# Of the cluster's GPU time, how much allocated work and how much unallocated the week asks for.
ALLOCATED_LOAD = 0.58
UNALLOCATED_LOAD = 0.12
# How much of its entitlement each project asks for, relative to the others (1: its share exactly).
APPETITE = {"olmo": 1.4, "tulu": 0.9, "safety": 0.45, "molmo": 1.1, "pixmo": 0.65}

# (weight, name, gpus choices, topology, min_runtime choices, run seconds range, resumable): the live
# demo's job kinds, at the lengths they have on a real cluster.
HISTORY_SHAPES = [
    (5, "debug", [1, 2, 4], "any", [600, 900], (600, 3600), False),
    (4, "finetune", [4, 8], "any", [3600, 7200], (3600, 6 * 3600), True),
    (2, "pretrain", [16, 32, 64], "domain", [2 * 3600, 4 * 3600], (3 * 3600, 10 * 3600), True),
]
SWEEP = (3, "sweep", [1, 4, 8], "any", [0], (1800, 4 * 3600), True)


@dataclass
class Planned:
    project: Unit
    user: object
    kind: str
    gpus: int
    topology: str
    min_runtime: int
    seconds: int
    resumable: bool
    submitted: datetime
    start: datetime | None = None
    end: datetime | None = None
    gpu_ids: list[str] = field(default_factory=list)


def _entitlements(cluster, projects: list[Unit], now: datetime) -> dict[int, float]:
    """Project id → its fraction of the cluster (its share times its ancestors')."""
    shares = {
        unit_id: float(percent) / 100
        for unit_id, percent in Allocation.objects.current(now).filter(cluster=cluster)
        .values_list("unit_id", "share_percent")
    }
    fractions = {}
    for project in projects:
        fraction = shares.get(project.pk, 0.0)
        for ancestor in project.path()[:-1]:
            fraction *= shares.get(ancestor.pk, 0.0)
        fractions[project.pk] = fraction
    return fractions


def _busy_hours(rng: random.Random, start: datetime, span: float) -> datetime:
    """A submit time in [start, start + span): weekdays' working hours twice as busy as nights."""
    while True:
        at = start + timedelta(seconds=rng.uniform(0, span))
        busy = 8 <= at.hour < 20 and at.weekday() < 5
        if busy or rng.random() < 0.5:
            return at


class Packer:
    """GPUs of the healthy hosts, each free from some moment: a job takes the earliest ones that fit it."""

    def __init__(self, domains: list[tuple[str, list[tuple[str, str, list[str]]]]], start: datetime):
        # domain name → [(host name, GPU type, [GPU ids])]; GPU id → free from.
        self.domains = domains
        self.free_at = {gpu: start for _, hosts in domains for _, _, gpus in hosts for gpu in gpus}

    def place(self, job: Planned, *, gpu_type: str = "") -> None:
        best = None
        for _, hosts in self.domains:
            hosts = [(name, gpus) for name, kind, gpus in hosts if not gpu_type or kind == gpu_type]
            if not hosts:
                continue
            host_size = len(hosts[0][1])
            if job.gpus <= host_size and job.topology == "any":
                for _, gpus in hosts:
                    chosen = sorted(gpus, key=self.free_at.__getitem__)[:job.gpus]
                    best = self._better(best, job, chosen)
            elif job.gpus % host_size == 0 and job.gpus // host_size <= len(hosts):
                # Whole hosts of one NVLink domain, the ones free first.
                by_free = sorted(hosts, key=lambda host: max(self.free_at[gpu] for gpu in host[1]))
                chosen = [gpu for _, gpus in by_free[:job.gpus // host_size] for gpu in gpus]
                best = self._better(best, job, chosen)
        if best is None:
            return
        start, chosen = best
        job.start, job.end, job.gpu_ids = start, start + timedelta(seconds=job.seconds), chosen
        for gpu in chosen:
            self.free_at[gpu] = job.end

    def _better(self, best, job: Planned, chosen: list[str]):
        start = max([job.submitted, *(self.free_at[gpu] for gpu in chosen)])
        return (start, chosen) if best is None or start < best[0] else best


def plan_week(cluster, *, now: datetime, seed: int = 5) -> list[Planned]:
    """The week's jobs, placed; those started before `now` are kept (the ones not ended by then still run)."""
    rng = random.Random(seed)
    members: dict[int, list] = {}
    projects: dict[int, Unit] = {}
    for membership in (Membership.objects.filter(role=Role.MEMBER, unit__children__isnull=True)
                       .select_related("user", "unit").order_by("unit__name", "user__username")):
        members.setdefault(membership.unit_id, []).append(membership.user)
        projects[membership.unit_id] = membership.unit
    views = domain_views(cluster)
    domains = []
    for view in views:
        hosts = [(hv.host.name, hv.host.gpu_type, [gpu.id for gpu in hv.gpus if gpu.health == "ok"])
                 for hv in view.hosts if hv.host.state == HostState.UP]
        hosts = [host for host in hosts if host[2]]
        if hosts:
            domains.append((view.domain.name, hosts))
    capacity = sum(len(gpus) for _, hosts in domains for _, _, gpus in hosts) * DAYS * 86400
    start = now - timedelta(days=DAYS)
    span = (now - start).total_seconds() - 3600
    entitled = _entitlements(cluster, list(projects.values()), now)
    asks = {pk: entitled.get(pk, 0) * APPETITE.get(unit.name, 1.0) for pk, unit in projects.items()}
    total_ask = sum(asks.values()) or 1.0
    gpu_types = {kind for _, hosts in domains for _, kind, _ in hosts}
    planned: list[Planned] = []
    for pk in sorted(projects):
        project = projects[pk]
        for shapes, load in ((HISTORY_SHAPES, ALLOCATED_LOAD * asks[pk] / total_ask),
                             ([SWEEP], UNALLOCATED_LOAD / len(projects))):
            wanted = capacity * load
            while wanted > 0:
                _, kind, gpus_choices, topology, min_runtimes, (low, high), resumable = rng.choices(
                    shapes, [shape[0] for shape in shapes])[0]
                job = Planned(
                    project=project, user=rng.choice(members[pk]), kind=kind, gpus=rng.choice(gpus_choices),
                    topology=topology, min_runtime=rng.choice(min_runtimes), seconds=rng.randrange(low, high, 60),
                    resumable=resumable, submitted=_busy_hours(rng, start, span),
                )
                planned.append(job)
                wanted -= job.gpus * job.seconds
    packer = Packer(domains, start)
    for job in sorted(planned, key=lambda job: job.submitted):
        packer.place(job, gpu_type="GB200" if job.topology == "domain" and "GB200" in gpu_types else "")
    # Runs begun by now: those that ended are history; the others are still running when the demo opens.
    return [job for job in planned if job.start is not None and job.start <= now - timedelta(minutes=1)]


def _outcome(rng: random.Random, job: Planned, now: datetime) -> tuple[str, datetime | None, int | None, str]:
    """How the run ended: most finish; a few fail or are cancelled by their owner part-way. Not ended by `now`:
    still running (the simulated executor finishes it when its work is done, in real time)."""
    draw = rng.random()
    if job.end > now:
        return JobState.RUNNING, None, None, ""
    if draw < 0.04:
        return JobState.FAILED, job.end, 1, "exited with code 1"
    if draw < 0.07:
        return JobState.CANCELLED, job.start + (job.end - job.start) * rng.uniform(0.2, 0.9), None, ""
    return JobState.COMPLETED, job.end, 0, ""


@transaction.atomic
def seed_history(cluster, *, now: datetime, seed: int = 5) -> int:
    """Write the week (once: a cluster with any job already has history). Returns jobs written (ended and
    still running)."""
    if Job.objects.filter(cluster=cluster).exists():
        return 0
    rng = random.Random(seed + 1)
    plan = sorted(plan_week(cluster, now=now, seed=seed), key=lambda job: (job.submitted, job.start))
    gpu_pks, host_pks = {}, {}
    for pk, host, index, host_pk in Gpu.objects.filter(host__domain__cluster=cluster).values_list(
            "pk", "host__name", "index", "host_id"):
        gpu_pks[f"{host}:{index}"] = pk
        host_pks[host] = host_pk
    jobs, ends = [], []
    policy = cluster.scheduling_policy()
    for job in plan:
        state, ended, exit_code, failure = _outcome(rng, job, now)
        ends.append((state, ended, exit_code, failure))
        jobs.append(Job(
            cluster=cluster, project=job.project, user=job.user, name=f"{job.kind}-{job.project.name}-{job.gpus}g",
            command=f"python {'train' if job.kind != 'sweep' else 'sweep'}.py --gpus {job.gpus}",
            gpus=job.gpus, topology=job.topology, gpu_type="GB200" if job.topology == "domain" else "",
            min_runtime=job.min_runtime, resumable=job.resumable, state=state, submitted_at=job.submitted,
            started_at=job.start, run_started_at=job.start,
            # A first run: shielded for its minimum runtime, as the tick's Start says (`core.model.shield`).
            run_protected_until=job.start + timedelta(seconds=shield(job.min_runtime, 0, policy)) if job.min_runtime
            else None,
            ended_at=ended, exit_code=exit_code, failure_reason=failure, simulated_duration=job.seconds,
            work_done=(ended - job.start).total_seconds() if ended else 0,
        ))
    Job.objects.bulk_create(jobs, batch_size=500)
    if jobs and jobs[0].pk is None:  # a backend that does not return keys: read them back in order
        pks = list(Job.objects.filter(cluster=cluster).order_by("pk").values_list("pk", flat=True))
        for row, pk in zip(jobs, pks, strict=True):
            row.pk = pk
    events, assignments, processes = [], [], []
    for row, job, (state, ended, exit_code, failure) in zip(jobs, plan, ends, strict=True):
        contract = (f"allocated: protected for {format_duration(job.min_runtime)}" if job.min_runtime
                    else "unallocated: free, preemptible at any time")
        events.append(JobEvent(
            job=row, at=job.submitted, kind=EventKind.SUBMIT, actor=job.user.get_username(),
            detail=f"{job.gpus} GPU{'s' if job.gpus != 1 else ''} on {cluster.name} for {job.project.name}; "
                   f"{contract}{'; resumable' if job.resumable else ''}",
        ))
        events.append(JobEvent(job=row, at=job.start, kind=EventKind.START, actor=HISTORY_ACTOR,
                               detail=" ".join(job.gpu_ids)))
        ran = format_duration(((ended or now) - job.start).total_seconds())
        if state == JobState.RUNNING:
            pass
        elif state == JobState.COMPLETED:
            events.append(JobEvent(job=row, at=ended, kind=EventKind.FINISH, actor="system:executor",
                                   detail=f"finished after {ran}"))
        elif state == JobState.FAILED:
            events.append(JobEvent(job=row, at=ended, kind=EventKind.FAIL, actor="system:executor",
                                   detail=f"failed: {failure}, exit code {exit_code}"))
        else:
            events.append(JobEvent(job=row, at=ended, kind=EventKind.CANCEL, actor=job.user.get_username(),
                                   cause="cancel", detail="cancelled by its owner"))
            events.append(JobEvent(job=row, at=ended, kind=EventKind.STOP, actor="system:executor", cause="cancel",
                                   detail="stopped after cancel"))
        for gpu in job.gpu_ids:
            assignments.append(GpuAssignment(job=row, gpu_id=gpu_pks[gpu], assigned_at=job.start,
                                             released_at=ended))
        # One rank per host, numbered as a tick numbers them (`hosts_of`).
        hosts = hosts_of(job.gpu_ids)
        processes.extend(
            JobProcess(job=row, host_id=host_pks[host], run=0, rank=rank,
                       state=JobProcess.State.EXITED if ended else JobProcess.State.RUNNING,
                       exit_code=exit_code, started_at=job.start, ended_at=ended)
            for rank, host in enumerate(hosts)
        )
    JobEvent.objects.bulk_create(events, batch_size=1000)
    GpuAssignment.objects.bulk_create(assignments, batch_size=1000)
    JobProcess.objects.bulk_create(processes, batch_size=1000)
    _samples(cluster, plan, ends, now=now)
    # The org's shares held all week: reports over the week (usage against entitlement) count them from its
    # start, not from the minute the demo loaded them.
    Allocation.objects.filter(cluster=cluster, valid_from__gt=now - timedelta(days=DAYS)).update(
        valid_from=now - timedelta(days=DAYS))
    return len(jobs)


def _samples(cluster, plan: list[Planned], ends: list, *, now: datetime) -> None:
    """A dashboard sample every quarter hour of the week, from what the week's jobs held at that moment."""
    topology, _, total = measures_input(domain_views(cluster))
    at = now - timedelta(days=DAYS) + SAMPLE_EVERY
    samples = []
    runs = sorted(((job.start, end[1] or job.end, job) for job, end in zip(plan, ends, strict=True)),
                  key=lambda run: run[0])
    by_submit = sorted(plan, key=lambda job: job.submitted)
    running: list = []
    waiting: list[Planned] = []
    started = submitted = 0
    while at < now:
        # Sweep forward: runs begun by `at` join, ended ones leave; submissions likewise wait until they start.
        while started < len(runs) and runs[started][0] <= at:
            running.append(runs[started])
            started += 1
        while submitted < len(by_submit) and by_submit[submitted].submitted <= at:
            waiting.append(by_submit[submitted])
            submitted += 1
        running = [run for run in running if run[1] > at]
        waiting = [job for job in waiting if job.start > at]
        held = [Held(gpu, 1000, job.min_runtime > 0) for _, _, job in running for gpu in job.gpu_ids]
        measures = measure(topology, held, total_gpus=total)
        states, fragmentation = measures.states, measures.fragmentation
        samples.append(ClusterSample(
            cluster=cluster, at=at, total_gpus=states.total, allocated=round(states.allocated, 3),
            unallocated=round(states.unallocated, 3), idle=round(states.idle, 3),
            unavailable=round(states.unavailable, 3), free_gpus=fragmentation.free_gpus,
            largest_placeable=fragmentation.largest_placeable,
            stranded={str(k): round(value, 4) for k, value in fragmentation.stranded.items()},
            pending_jobs=len(waiting), pending_gpus=sum(job.gpus for job in waiting),
            pending_allocated_gpus=sum(job.gpus for job in waiting if job.min_runtime), running_jobs=len(running),
        ))
        at += SAMPLE_EVERY
    ClusterSample.objects.bulk_create(samples, batch_size=500)

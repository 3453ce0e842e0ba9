"""The what-if's readers: the live state of a cluster at one moment `now`, as both sides' inputs.

What the simulation starts from, all read at one moment `now`:

- the cluster's topology, host states and policy, units and their shares now,
  running and pending jobs: `scheduler.snapshot.build_snapshot`, the tick's
  own reader;
- the fair-share window's ended runs as usage history, so ratios start where
  they are and slide out as the simulated week goes on;
- running jobs as the initial state (their start, GPUs and protection);
- the pending queue, arriving at once with their real submit times (their
  waits include the time already waited);
- the last 7 days' submissions replayed 7 days later (the same offsets into
  the week): the next week is assumed to look like the last one.

How long jobs run (the database knows only what happened): a finished job
took what it actually ran; a job that has not finished takes its declared
maximum runtime, else the median of its project's finished jobs in the
window, else the cluster's median, else `DEFAULT_DURATION`. A running job
needs that minus what it has run; one that has already run longer is assumed
to need one more such duration. Every count is in the assumptions stored with
the result, in words too.

Every arrival of the window and every pending job is replayed, none left
out: the simulator calls the scheduler only when a decision could change
(`scheduler.core.quiet`), so a busy week takes seconds; the simulated
scheduler decides at most every `DECISION_SECONDS`. The same arrivals a few
minutes later (`CONTROL_SHIFT`) are the control run's (`comparison`).

What a cached result is valid for: `state_key` (the share tried, the snapshot
hour and a digest of the cluster's shares).
"""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Sum
from django.utils import timezone

from budgets.models import Allocation, BudgetRequest
from scheduler.choices import FINAL_STATES, JobState
from scheduler.core import PREEMPTING, jobspec
from scheduler.core import Unit as CoreUnit
from scheduler.core import model as core_model
from scheduler.models import GpuAssignment, Job
from scheduler.sim import Cluster as SimCluster
from scheduler.sim import InitialRun, InitialState, SimJob, UsageInterval
from scheduler.snapshot import PRIORITY, build_snapshot

DAY = 86400
HORIZON = 7 * DAY
# The arrival pattern replayed: the submissions of this many seconds before now.
REPLAY_WINDOW = 7 * DAY
# When no job of the window has finished: one hour.
DEFAULT_DURATION = 3600
# The simulated scheduler decides at most this often: the same decisions batched (a wait can come out up to
# a minute longer).
DECISION_SECONDS = 60
# The control run (noise): the replayed arrivals this much later.
CONTROL_SHIFT = 300
POLICY = "allot"

# Job id prefixes in the simulation: where each job came from.
RUNNING, QUEUED, REPLAYED = "running-", "queued-", "replay-"
# The job table's fields (scheduler/core/jobspec.py) SimJob takes by name: from the core's jobs, and from rows.
PENDING_AS_IS = jobspec.as_is(core_model.PendingJob, SimJob)
RUNNING_AS_IS = jobspec.as_is(core_model.RunningJob, SimJob)
STORED_AS_IS = jobspec.as_is(SimJob)


@dataclass(frozen=True)
class WhatIfInputs:
    """Both sides of a what-if, ready to simulate: the same cluster, jobs and start; two sets of shares."""

    cluster: SimCluster
    without: tuple[CoreUnit, ...]
    with_change: tuple[CoreUnit, ...]
    jobs: tuple[SimJob, ...]
    # The same week for the control run (noise): arrivals a few minutes later.
    control_jobs: tuple[SimJob, ...]
    initial: InitialState
    # (unit name, its role: requesting, sibling or parent), in the order the page shows them.
    affected: tuple[tuple[str, str], ...]
    assumptions: dict


@dataclass(frozen=True)
class Replay:
    """Last week's submissions as the next week's arrivals."""

    jobs: list[SimJob]
    # The control run's: every arrival CONTROL_SHIFT later.
    control_jobs: list[SimJob]
    replayable: int  # submitted and not cancelled before running
    never_ran: int
    submitted: int


class Durations:
    """How long a job runs, from the jobs that finished in the window (see the module docstring)."""

    def __init__(self, finished: dict[str, list[float]], *, default: float = DEFAULT_DURATION):
        self.by_project = {project: statistics.median(sorted(values))
                           for project, values in sorted(finished.items()) if values}
        every = sorted(value for values in finished.values() for value in values)
        self.cluster = statistics.median(every) if every else None
        self.default = default

    def estimate(self, project: str, max_runtime: float | None) -> tuple[float, str]:
        """(seconds, which rule gave them)."""
        if max_runtime:
            return float(max_runtime), "max_runtime"
        if project in self.by_project:
            return self.by_project[project], "project_median"
        if self.cluster is not None:
            return self.cluster, "cluster_median"
        return float(self.default), "default"


def _merged_seconds(intervals: list[tuple[datetime, datetime]]) -> float:
    """Seconds covered by the intervals (a run's GPUs may be written a moment apart: overlaps count once)."""
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += (current_end - current_start).total_seconds()
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += (current_end - current_start).total_seconds()
    return total


def finished_run_seconds(cluster, *, since: datetime) -> dict[int, tuple[str, float]]:
    """Job id → (project, seconds it held GPUs, over all its runs), for jobs that ended since `since`.

    One grouped query over the runs; jobs with no GPUs count from their last start to their end.
    """
    runs: dict[int, list[tuple[datetime, datetime]]] = {}
    for job_id, assigned, released in (
        GpuAssignment.objects.filter(job__cluster=cluster, job__state__in=FINAL_STATES, job__ended_at__gte=since,
                                     released_at__isnull=False)
        .values_list("job_id", "assigned_at", "released_at").distinct().order_by()
    ):
        runs.setdefault(job_id, []).append((assigned, released))
    seconds = {}
    for job_id, project, gpus, started, ended in (
        Job.objects.filter(cluster=cluster, state__in=FINAL_STATES, ended_at__gte=since, started_at__isnull=False)
        .values_list("pk", "project__name", "gpus", "run_started_at", "ended_at").order_by("pk")
    ):
        if job_id in runs:
            ran = _merged_seconds(runs[job_id])
        elif not gpus and started and ended:
            ran = (ended - started).total_seconds()
        else:
            continue
        if ran > 0:
            seconds[job_id] = (project, ran)
    return seconds


def usage_history(cluster, *, now: datetime) -> tuple[UsageInterval, ...]:
    """The window's ended runs as the simulator's history (times in seconds from `now`)."""
    since = now - timedelta(seconds=cluster.window_seconds)
    rows = (
        GpuAssignment.objects.filter(job__cluster=cluster, released_at__gt=since, released_at__lte=now,
                                     assigned_at__lt=now)
        .values("job_id", "job__project__name", "job__min_runtime", "assigned_at", "released_at")
        .annotate(milli=Sum("milli"))
        .order_by("assigned_at", "job_id")
    )
    history = []
    for row in rows:
        start = max(row["assigned_at"], since)
        history.append(UsageInterval(
            project=row["job__project__name"], gpus=row["milli"] / 1000,
            start=(start - now).total_seconds(), end=(row["released_at"] - now).total_seconds(),
            allocated=row["job__min_runtime"] > 0,
        ))
    return tuple(history)


def shares_digest(cluster, at: datetime) -> str:
    """A short fingerprint of every share on the cluster at `at` (part of the cache key)."""
    rows = sorted(
        (unit_id, str(share)) for unit_id, share in
        Allocation.objects.current(at).filter(cluster=cluster).values_list("unit_id", "share_percent")
    )
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:12]


def state_key(budget_request: BudgetRequest, share: Decimal, now: datetime) -> tuple[str, datetime]:
    """What a cached result is valid for: the share tried, the snapshot hour and the cluster's shares then."""
    hour = now.replace(minute=0, second=0, microsecond=0)
    digest = shares_digest(budget_request.cluster, now)
    return f"{share:.2f}|{hour:%Y%m%dT%H}|{digest}", hour


def _human(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _fmt_share(value: float | None) -> str:
    if value is None:
        return "none"
    return f"{value:g} %"


def build_inputs(budget_request: BudgetRequest, *, share: Decimal, now: datetime) -> WhatIfInputs:
    """Read the live state of the request's cluster at `now` and make both sides of the what-if."""
    cluster_row = budget_request.cluster
    subject = budget_request.unit.name
    tick_input = build_snapshot(cluster_row, now=now)
    snapshot = tick_input.snapshot
    zero = now.timestamp()
    live_policy = cluster_row.scheduling_policy()
    policy = replace(live_policy, tick=max(live_policy.tick, DECISION_SECONDS))
    total_gpus = len(tick_input.gpu_pks)
    cluster = SimCluster(cluster_row.name, snapshot.topology, policy, total_gpus)
    schedulable_gpus = core_model.schedulable_gpus(snapshot.topology.hosts)
    notes: list[str] = []

    # Shares: now, and with the request's unit at the share tried. Usage comes from the history below.
    without = tuple(replace(unit, allocated_usage=0.0, unallocated_usage=0.0) for unit in snapshot.units)
    by_name = {unit.name: unit for unit in without}
    unit = by_name[subject]
    with_change = tuple(replace(u, share=float(share)) if u.name == subject else u for u in without)
    siblings = sorted(u.name for u in without if u.parent == unit.parent and u.name != subject)
    children_with = sum((u.share or 0.0) for u in with_change if u.parent == unit.parent)
    affected = ((subject, "requesting"), *((name, "sibling") for name in siblings),
                *(((unit.parent, "parent"),) if unit.parent else ()))
    of_what = f"of {unit.parent}" if unit.parent else f"of {cluster_row.name}"
    notes.append(f"Without the change {subject} keeps {_fmt_share(unit.share)} {of_what}; with it, "
                 f"{subject} has {_fmt_share(float(share))} from the first moment to the last, and every other "
                 "share stays as it is now.")
    if children_with > 100 + 1e-9:
        notes.append(f"With the change the children of {unit.parent or cluster_row.name} would hold "
                     f"{children_with:g} %: over 100 %, since the siblings keep their shares here. An approval "
                     "would have to take the room from them.")
    if budget_request.starts_at and budget_request.starts_at > now or budget_request.ends_at:
        notes.append("The request's own period is not modelled: the change applies over the whole week.")

    # Durations, from what finished in the window.
    window_start = now - timedelta(seconds=REPLAY_WINDOW)
    ran = finished_run_seconds(cluster_row, since=min(window_start, now - timedelta(seconds=policy.window)))
    finished: dict[str, list[float]] = {}
    for project, seconds in ran.values():
        finished.setdefault(project, []).append(seconds)
    durations = Durations(finished)
    sources = {"finished_actual": 0, "max_runtime": 0, "project_median": 0, "cluster_median": 0, "default": 0}

    initial_runs, skipped_running = _initial_runs(snapshot, zero=zero, policy=policy, durations=durations,
                                                  sources=sources)
    pending = sorted(snapshot.pending, key=lambda j: (j.submit_time, j.seq))
    queued = [_queued(job, zero=zero, durations=durations, sources=sources) for job in pending]
    replay = _arrivals(cluster_row, now=now, since=window_start, ran=ran, durations=durations, sources=sources)
    jobs = queued + replay.jobs

    history = usage_history(cluster_row, now=now)
    initial = InitialState(running=tuple(initial_runs), history=history)

    # In words, for the page.
    notes.append(f"Starts from the cluster at {timezone.localtime(now):%Y-%m-%d %H:%M %Z}: {len(initial_runs)} "
                 f"running and {len(pending)} pending jobs, {schedulable_gpus} schedulable GPUs, and the "
                 f"fair-share usage of the last {policy.window / DAY:g} days.")
    if skipped_running:
        notes.append(f"{skipped_running} running job(s) on GPUs now out of service are left out.")
    left_out = f" {replay.never_ran} that never ran are left out." if replay.never_ran else ""
    notes.append(f"Arrivals: the {replay.replayable} jobs submitted in the last 7 days (from "
                 f"{timezone.localtime(window_start):%Y-%m-%d %H:%M}) arrive again 7 days later, at the same "
                 f"offsets into the week.{left_out}")
    notes.append(f"Chance: the week without the change is played once more with every arrival "
                 f"{CONTROL_SHIFT // 60} minutes later; how far each number moves then is the noise a difference "
                 "must exceed (≈ in the table).")
    notes.append(
        "Durations: a finished job runs what it actually ran; one not finished runs its maximum runtime, else "
        "the median of its project's finished jobs, else the cluster's median"
        + (f" ({_human(durations.cluster)})" if durations.cluster is not None else "")
        + f", else {DEFAULT_DURATION / 3600:g} h; a running job that has already run longer needs one more. "
        + "Counts: " + ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in sources.items() if count)
        + "."
    )
    notes.append(f"The scheduler is simulated deciding every {policy.tick:g} s (live: every {live_policy.tick:g} s), "
                 "which batches the same decisions; a wait may come out up to that much longer. Preempting jobs "
                 "leave at the end of their grace period and are not requeued. Usage ratio: the "
                 "allocated GPU-hours a unit's projects use over the 7 days ÷ its share of the cluster's "
                 "schedulable GPU-hours then; p90 wait: of its allocated jobs pending now or arriving, submit to "
                 "first start (so far, for those that never start).")
    assumptions = {
        "horizon_seconds": HORIZON,
        "horizon_days": HORIZON / DAY,
        "snapshot_at": now.isoformat(),
        "policy": POLICY,
        "decision_seconds": policy.tick,
        "cluster": cluster_row.name,
        "schedulable_gpus": schedulable_gpus,
        "total_gpus": total_gpus,
        "running_jobs": len(initial_runs),
        "running_jobs_left_out": skipped_running,
        "pending_jobs": len(pending),
        "pending_jobs_left_out": 0,
        "arrivals": {
            "from": window_start.isoformat(), "to": now.isoformat(), "shifted_by_seconds": REPLAY_WINDOW,
            "submitted": replay.submitted, "never_ran": replay.never_ran, "replayable": replay.replayable,
            "replayed": len(replay.jobs),
        },
        "history": {"window_seconds": policy.window, "usage_intervals": len(history)},
        "control": {"shift_seconds": CONTROL_SHIFT},
        "durations": {
            **sources,
            "default_seconds": DEFAULT_DURATION,
            "cluster_median_seconds": durations.cluster,
            "project_median_seconds": {name: round(value, 3) for name, value in durations.by_project.items()},
            "running_overran": "one more estimate",
        },
        "shares": {
            "unit": subject, "parent": unit.parent, "without": unit.share, "with": float(share),
            "siblings": {name: by_name[name].share for name in siblings},
            "children_total_with": round(children_with, 4),
        },
        "notes": notes,
    }
    return WhatIfInputs(cluster=cluster, without=without, with_change=with_change, jobs=tuple(jobs),
                        control_jobs=tuple(queued + replay.control_jobs), initial=initial, affected=affected,
                        assumptions=assumptions)


def _initial_runs(snapshot, *, zero: float, policy, durations: Durations, sources: dict) -> tuple[list, int]:
    """Running jobs as the simulation's initial state; and how many were left out (on GPUs out of service)."""
    known_gpus = {gpu for host in snapshot.topology.hosts for gpu in host.gpus}
    shapes = {pk: (gpus, per_host, gpu_type) for pk, gpus, per_host, gpu_type in Job.objects.filter(
        pk__in=[int(job.id) for job in snapshot.running]).values_list("pk", "gpus", "gpus_per_host", "gpu_type")}
    runs = []
    skipped = 0
    for job in sorted(snapshot.running, key=lambda j: (j.start_time, j.seq)):
        if any(gpu not in known_gpus for gpu in job.gpu_ids) or int(job.id) not in shapes:
            skipped += 1  # on a GPU taken out of service: it is ending anyway
            continue
        gpus, per_host, gpu_type = shapes[int(job.id)]
        elapsed = max(0.0, zero - job.start_time)
        if job.state == PREEMPTING:
            remaining = max(float(policy.tick), (job.grace_ends or zero) - zero)
        elif job.max_runtime:
            remaining = max(float(policy.tick), job.max_runtime - elapsed)
            sources["max_runtime"] += 1
        else:
            estimate, source = durations.estimate(job.project, None)
            sources[source] += 1
            remaining = estimate - elapsed if estimate > elapsed else estimate  # overran: one more estimate
        sim_job = SimJob(
            **{name: getattr(job, name) for name in RUNNING_AS_IS},
            id=f"{RUNNING}{job.id}", submit=min(job.submit_time, job.start_time) - zero, project=job.project,
            gpus=gpus if job.gpu_ids else 0, duration=elapsed + remaining, user=job.user, gpus_per_host=per_host,
            gpu_types=frozenset(t for t in gpu_type.split("|") if t), priority=job.priority, seq=job.seq,
        )
        if job.gpu_ids and len(job.gpu_ids) != gpus:
            sim_job = replace(sim_job, gpus=len(job.gpu_ids), gpus_per_host=None)
        runs.append(InitialRun(sim_job, start=-elapsed, gpu_ids=job.gpu_ids, gpu_milli=job.gpu_milli, host=job.host))
    return runs, skipped


def _queued(job, *, zero: float, durations: Durations, sources: dict) -> SimJob:
    """A pending job, arriving at the start with its real submit time (its wait so far counts)."""
    estimate, source = durations.estimate(job.project, job.max_runtime)
    sources[source] += 1
    return SimJob(
        **{name: getattr(job, name) for name in PENDING_AS_IS},
        id=f"{QUEUED}{job.id}", submit=job.submit_time - zero, project=job.project, duration=estimate, user=job.user,
        gpu_types=job.gpu_types, priority=job.priority, seq=job.seq,
    )


def _arrivals(cluster, *, now: datetime, since: datetime, ran: dict, durations: Durations, sources: dict) -> Replay:
    """The submissions of [since, now), each arriving `now - since` later."""
    submitted = list(
        Job.objects.filter(cluster=cluster, submitted_at__gte=since, submitted_at__lt=now)
        .values("pk", "project__name", "user__username", "gpu_type", "priority", "state", "submitted_at",
                "run_started_at", *STORED_AS_IS)
        .order_by("submitted_at", "pk")
    )
    replayable = []
    never_ran = 0
    for row in submitted:
        if row["state"] in FINAL_STATES:
            if row["pk"] not in ran:
                never_ran += 1  # cancelled (or failed) before it ever ran: no demand to replay
                continue
            replayable.append((row, ran[row["pk"]][1], "finished_actual"))
            continue
        estimate, source = durations.estimate(row["project__name"], row["max_runtime"])
        if row["state"] != JobState.PENDING and row["run_started_at"] is not None:
            estimate = max(estimate, (now - row["run_started_at"]).total_seconds())  # it has run that long
        replayable.append((row, estimate, source))
    jobs = _replayed(replayable, since=since)
    control = _replayed(replayable, since=since, shift=CONTROL_SHIFT)
    for _, _, source in replayable:
        sources[source] += 1
    return Replay(jobs=jobs, control_jobs=control, replayable=len(replayable),
                  never_ran=never_ran, submitted=len(submitted))


def _replayed(arrivals: list, *, since: datetime, shift: float = 0.0) -> list[SimJob]:
    """Arrivals as jobs of the simulated week: submitted `now - since` later (plus `shift`, within the week)."""
    jobs = []
    for row, duration, _ in arrivals:
        submit = (row["submitted_at"] - since).total_seconds()
        jobs.append(SimJob(
            **{**{name: row[name] for name in STORED_AS_IS}, "max_runtime": row["max_runtime"] or None},
            id=f"{REPLAYED}{row['pk']}", submit=submit + shift if submit + shift < HORIZON else submit,
            project=row["project__name"], duration=duration, user=row["user__username"],
            gpu_types=frozenset(t for t in row["gpu_type"].split("|") if t), priority=PRIORITY[row["priority"]],
            seq=row["pk"],
        ))
    return jobs

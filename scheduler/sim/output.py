"""What `simulate` writes (FORMATS.md): summary.json, events.csv, jobs.csv, report.html; and the `Result` it
writes them from, with its summary (`summarise`).

Other programs read these files, so their columns and keys follow FORMATS.md
exactly; extra keys are only ever added. Every file is a function of the
inputs alone (same inputs, same bytes) except `wall_seconds` in summary.json.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from scheduler.core import measures
from scheduler.core import model as core

from .inputs import Cluster
from .measures import CLASSES, HOUR, Tracker, percentile, wait_summary
from .runs import COMPLETED, FAILED, PENDING, PREEMPTED, PREEMPTING, RUNNING, WAITING, Run

EVENT_COLUMNS = ("time", "job_id", "event", "detail")
JOB_COLUMNS = ("job_id", "project", "class", "submit", "first_start", "end", "state", "wait", "preemptions", "gpus")


@dataclass
class Result:
    """Everything a simulation produced (`engine.Simulation.run`); summed up and written to files here."""

    policy: str
    cluster: Cluster
    units: tuple[core.Unit, ...]
    runs: list[Run]
    events: list[tuple[float, str, str, str]]
    tracker: Tracker
    end: float
    wall_seconds: float
    core_calls: int
    core_seconds: float
    decisions: int
    # Large job id -> (first reached the head, began its last stretch at the head), for those started.
    large_heads: dict[str, tuple[float, float]]
    host_states: dict[str, str]
    # Every preemption on behalf of a job: (when, preemptor, victim, grace).
    preemptions_for: list[tuple[float, str, str, float]] = field(default_factory=list)
    summary: dict = field(default_factory=dict)


def number(value: float | None) -> str:
    """Seconds as written in the CSV files: integers plain, others to the millisecond."""
    if value is None:
        return ""
    if value == int(value):
        return str(int(value))
    return f"{value:.3f}"


def _round(value: float | None, places: int = 6) -> float | None:
    return None if value is None else round(value, places)


def job_state(run) -> str:
    return RUNNING if run.state == PREEMPTING else run.state


def waits(result: Result) -> dict[str, list[float]]:
    """Wait of every submitted job by class: first start − submit, or so far for jobs not started (a lower bound)."""
    by_class: dict[str, list[float]] = {name: [] for name in (*CLASSES, "all")}
    for run in result.runs:
        if run.state == WAITING:
            continue
        start = run.first_start if run.first_start is not None else result.end
        wait = max(0.0, start - run.job.submit)
        by_class[run.klass].append(wait)
        by_class["all"].append(wait)
    return by_class


def held_and_lost(result: Result) -> dict[str, tuple[float, float, float]]:
    """Per project: (GPU-seconds held, lost, of which restart overhead) over the run.

    Lost is what was held and not kept: the restart overhead a restarted run spent before making progress and,
    for runs that ended without finishing, the work since their last checkpoint (all of a run that keeps
    nothing). Runs still going at the end count what they held so far and the overhead they already spent
    (the work since their last checkpoint is not lost yet).
    """
    totals: dict[str, list[float]] = {}
    end = result.end
    for run in result.runs:
        held, lost, overhead = run.held, run.lost, run.overhead_lost
        if run.running is not None and run.job.gpus:
            held += run.amount * max(0.0, end - run.start)
            spent = run.amount * max(0.0, min(end, run.progress_from) - run.start)
            lost += spent
            overhead += spent
        if held or lost:
            entry = totals.setdefault(run.job.project, [0.0, 0.0, 0.0])
            entry[0] += held
            entry[1] += lost
            entry[2] += overhead
    return {project: (v[0], v[1], v[2]) for project, v in sorted(totals.items())}


def goodput(result: Result) -> dict:
    """GPU-seconds of work kept ÷ GPU-seconds held (lost work and restart overhead count against it).

    Overall, per project, for allocated and unallocated jobs apart, and the worst project with an allocation
    (projects that run unallocated work only are shown per project but are not the worst: their jobs are
    preemptible by contract).
    """
    per = held_and_lost(result)
    held = sum(v[0] for v in per.values())
    lost = sum(v[1] for v in per.values())
    projects = {project: _round((h - lo) / h) for project, (h, lo, _) in per.items() if h > 0}
    allocated = {p: v for p, v in projects.items() if p in result.tracker.shares} or projects
    worst = min(allocated.items(), key=lambda item: (item[1], item[0])) if allocated else (None, None)
    classes = {True: [0.0, 0.0], False: [0.0, 0.0]}
    end = result.end
    for run in result.runs:
        h, lo = run.held, run.lost
        if run.running is not None and run.job.gpus:
            h += run.amount * max(0.0, end - run.start)
            lo += run.amount * max(0.0, min(end, run.progress_from) - run.start)
        classes[run.job.allocated][0] += h
        classes[run.job.allocated][1] += lo
    by_class = {("allocated" if key else "unallocated"): _round((h - lo) / h) if h else None
                for key, (h, lo) in classes.items()}
    return {"overall": _round((held - lost) / held) if held else None, "worst": worst[1],
            "worst_project": worst[0], **by_class, "per_project": projects}


def preemptions_per_job(result: Result) -> dict:
    """Preemptions each submitted job went through (mean, p99, max), allocated and unallocated jobs apart."""
    counts = {"allocated": [], "unallocated": []}
    for run in result.runs:
        if run.state != WAITING:
            counts["allocated" if run.job.allocated else "unallocated"].append(run.preemptions)
    counts["all"] = counts["allocated"] + counts["unallocated"]
    return {name: {"mean": _round(sum(values) / len(values)) if values else None,
                   "p99": percentile(values, 99), "max": max(values, default=None), "jobs": len(values)}
            for name, values in counts.items()}


def wasted_preemptions(result: Result) -> dict:
    """Preemptions on behalf of a job after which that job did not start within the plan's grace + two ticks
    (`core.measures.wasted_preemptions`, as the cluster dashboard measures it). A preemption whose deadline falls
    after the end of the run is not judged (`undecided`); `share` is the wasted ones over those judged.
    """
    measured = measures.wasted_preemptions(
        ((when, preemptor, grace) for when, preemptor, _victim, grace in result.preemptions_for),
        {run.job.id: run.starts for run in result.runs}, tick=result.cluster.policy.tick, end=result.end)
    return {"share": _round(measured.share), "wasted": measured.wasted, "on_behalf": measured.judged,
            "undecided": measured.undecided}


def summarise(result: Result) -> dict:
    tracker = result.tracker
    elapsed = max(0.0, result.end - tracker.start)
    seconds = tracker.gpu_seconds()
    held = seconds["allocated"] + seconds["unallocated"]
    healthy = held + seconds["idle"]
    everything = tracker.total_gpus * elapsed
    submitted = [run for run in result.runs if run.state != WAITING]
    states = {name: 0 for name in (COMPLETED, PREEMPTED, FAILED, RUNNING, PENDING)}
    for run in submitted:
        states[job_state(run)] += 1
    by_class = waits(result)
    unstarted = {name: 0 for name in by_class}
    for run in submitted:
        if run.first_start is None:
            unstarted[run.klass] += 1
            unstarted["all"] += 1
    owed = tracker.owed_delivered()
    policy = result.cluster.policy
    lost_by_project = held_and_lost(result)
    bound = policy.max_min_runtime + policy.grace_period + policy.tick
    large = [run for run in submitted if run.klass == "large"]
    # From first reaching the head of the queue, and from the start of the last stretch there, to starting.
    from_first = {job_id: run.first_start - heads[0]
                  for job_id, run, heads in ((r.job.id, r, result.large_heads.get(r.job.id)) for r in large) if heads}
    from_last = {job_id: run.first_start - heads[1]
                 for job_id, run, heads in ((r.job.id, r, result.large_heads.get(r.job.id)) for r in large) if heads}
    at_head_waiting = [run for run in large if run.first_start is None and run.head is not None]
    summary = {
        "policy": result.policy,
        "sim_seconds": _round(elapsed, 3),
        "wall_seconds": round(result.wall_seconds, 3),
        "jobs": len(submitted),
        "completed": states[COMPLETED],
        "availability": _round(healthy / everything if everything else 0.0),
        "occupancy": _round(held / healthy if healthy else 0.0),
        "allocated_occupancy": _round(seconds["allocated"] / healthy if healthy else 0.0),
        "unallocated_occupancy": _round(seconds["unallocated"] / healthy if healthy else 0.0),
        "owed_delivered": {
            "overall": _round(owed["overall"]),
            "worst": _round(owed["worst"]),
            "worst_project": owed["worst_project"],
            "per_project": {name: _round(value) for name, value in owed["per_project"].items() if value is not None},
            # Projects with an allocation that asked for nothing allocated: owed nothing.
            "no_demand": sorted(name for name, value in owed["per_project"].items() if value is None),
            "gpu_hours": {name: {key: round(value, 3) for key, value in detail.items()}
                          for name, detail in owed["gpu_hours"].items()},
        },
        "wait_seconds": {name: {key: (_round(value, 3) if key != "count" else value)
                                for key, value in wait_summary(values).items()} | {"unstarted": unstarted[name]}
                         for name, values in by_class.items()},
        "preemptions": sum(run.preemptions for run in result.runs),
        "lost_gpu_hours": round(sum(lost for _, lost, _ in lost_by_project.values()) / HOUR, 3),
        "stranded": {k: _round(v) for k, v in tracker.stranded(elapsed).items()},
        # Beyond FORMATS.md's keys.
        "cluster": result.cluster.name,
        "total_gpus": tracker.total_gpus,
        "workload_jobs": len(result.runs),
        "states": states,
        "demand_ratio": _round(seconds["demand"] / (seconds["up"] or 1.0)),
        "gpu_hours": {key: round(value / HOUR, 3) for key, value in seconds.items()},
        "large_jobs": {
            "jobs": len(large),
            "started": sum(1 for run in large if run.first_start is not None),
            "bound_seconds": bound,
            "max_wait_from_head": _round(max(from_first.values()), 3) if from_first else None,
            "over_bound": sorted(job_id for job_id, wait in from_first.items() if wait > bound + 1e-6),
            "max_wait_from_last_head": _round(max(from_last.values()), 3) if from_last else None,
            "over_bound_from_last_head": sorted(job_id for job_id, wait in from_last.items() if wait > bound + 1e-6),
            "at_head_not_started": sorted(run.job.id for run in at_head_waiting),
            "at_head_waited_so_far": _round(max((result.end - run.head for run in at_head_waiting), default=0.0), 3),
            # Rule 5's bound is over a stretch at the head: a job that a less-served unit's job displaced from
            # the head starts a new stretch when it gets back. Jobs still waiting at the end, in their stretch.
            "at_head_over_bound": sorted(run.job.id for run in at_head_waiting
                                         if run.tenure is not None and result.end - run.tenure > bound + 1e-6),
        },
        "core_calls": result.core_calls,
        "events": len(result.events),
        # What preemptions cost (issue 18): lost_gpu_hours above includes the restart overhead.
        "preemptions_per_job": preemptions_per_job(result),
        "wasted_preemptions": wasted_preemptions(result),
        "goodput": goodput(result),
        "restart_overhead_gpu_hours": round(sum(v[2] for v in lost_by_project.values()) / HOUR, 3),
        "restart_overhead_seconds": policy.restart_overhead,
    }
    return summary


def write_summary(result: Result, directory: Path) -> None:
    with open(directory / "summary.json", "w", encoding="utf-8") as handle:
        json.dump(result.summary, handle, indent=2, sort_keys=False)
        handle.write("\n")


def write_events(result: Result, directory: Path) -> None:
    with open(directory / "events.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(EVENT_COLUMNS)
        writer.writerows((number(when), job_id, event, detail) for when, job_id, event, detail in result.events)


def job_rows(result: Result) -> list[tuple]:
    rows = []
    for run in result.runs:
        if run.state == WAITING:
            continue
        wait = run.first_start - run.job.submit if run.first_start is not None else None
        rows.append((
            run.job.id, run.job.project, run.klass, number(run.job.submit), number(run.first_start),
            number(run.end), job_state(run), number(wait), run.preemptions, run.job.gpus,
        ))
    return rows


def write_jobs(result: Result, directory: Path) -> None:
    with open(directory / "jobs.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(JOB_COLUMNS)
        writer.writerows(job_rows(result))


def write_all(result: Result, directory: str | Path, *, report: bool = True) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_summary(result, directory)
    write_events(result, directory)
    write_jobs(result, directory)
    if report:
        from .report import write_report

        write_report(result, directory / "report.html")
    return directory

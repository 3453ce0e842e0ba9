"""Rule 8: the texts people read. Pure formatting: times are relative to `now`."""

from __future__ import annotations

import math

from .durations import format_duration
from .fairshare import UnitNode
from .model import DOMAIN, WHOLE_GPU_MILLI, PendingJob, RunningJob


def format_time(when: float, now: float) -> str:
    """A time as seen from the tick: `now` or `in 1h20m` (the tick rewrites reasons every few seconds)."""
    return "now" if when <= now else f"in {format_duration(when - now)}"


def format_percent(ratio: float) -> str:
    """A usage ratio as every page, reason and CLI line writes it: a percent with the digits that tell small
    ones apart (0.04 %, 3.5 %, 42 %); ∞ % for a unit entitled to nothing."""
    if math.isinf(ratio):
        return "∞ %"
    value = ratio * 100
    if value == 0 or value >= 10:
        return f"{value:.0f} %"
    return f"{value:.2f} %" if value < 1 else f"{value:.1f} %"


def format_ratio(ratio: float) -> str:
    """The same as `format_percent`: one unit for usage ratios everywhere."""
    return format_percent(ratio)


def window_label(window: float) -> str:
    if window % 86400 == 0:
        return f"{int(window // 86400)}-day"
    return f"{format_duration(window)}"


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def job_list(ids: list[str], limit: int = 5) -> str:
    shown = ", ".join(ids[:limit])
    return shown if len(ids) <= limit else f"{shown} and {len(ids) - limit} more"


def gpu_types_label(gpu_types: frozenset[str]) -> str:
    return f" of type {' or '.join(sorted(gpu_types))}" if gpu_types else ""


def need(job: PendingJob) -> str:
    """What the job asks for: "needs one 64-GPU NVLink domain"."""
    types = gpu_types_label(job.gpu_types)
    if job.gpus == 0:
        return f"needs {job.cpus} CPUs and {job.memory_gib} GiB on one host"
    if job.gpus == 1 and job.mig_profile:
        return f"needs a {job.mig_profile} MIG instance{types}"
    if job.gpus == 1 and job.gpu_milli < WHOLE_GPU_MILLI:
        return f"needs {job.gpu_milli} milli-GPU{types}"
    per_host = job.gpus_per_host
    if per_host is not None and per_host < job.gpus:
        where = " in one NVLink domain" if job.topology == DOMAIN else ""
        return f"needs {job.gpus // per_host} hosts × {per_host} GPUs{types}{where}"
    if job.topology == DOMAIN:
        return f"needs one {job.gpus}-GPU NVLink domain{types}"
    return f"needs {plural(job.gpus, 'GPU')}{types}"


def preempted_for_job(preemptor: PendingJob, victim: RunningJob, sides: tuple[UnitNode, UnitNode] | None,
                      window: float) -> str:
    if sides is None:
        return (f"preempted by job {preemptor.id} of project {preemptor.project}: unallocated jobs "
                f"(minimum runtime 0) give way to allocated work at once")
    gainer_side, loser_side = sides
    budget = f"{window_label(window)} budget"
    if gainer_side.name == preemptor.project and loser_side.name == victim.project:
        return (f"preempted by job {preemptor.id} of project {preemptor.project}, which had used "
                f"{format_percent(gainer_side.ratio)} of its {budget} against your {format_percent(loser_side.ratio)}")
    return (f"preempted by job {preemptor.id} of project {preemptor.project}: its unit {gainer_side.name} had "
            f"used {format_percent(gainer_side.ratio)} of its {budget} against "
            f"{format_percent(loser_side.ratio)} for your unit {loser_side.name}")


def requeue_note(job: RunningJob) -> str:
    return "requeued with its original submit time" if job.resumable else "stopped (not resumable)"


def no_allocation(project: str) -> str:
    return f"project {project} has no allocation on this cluster"

"""Rule 8: the texts people read. Pure formatting: times are relative to `now`."""

from __future__ import annotations

import math

from . import model
from .durations import format_duration
from .fairshare import UnitNode
from .lifecycle import EndState, StopCause, end_of_stop
from .model import DOMAIN, WHOLE_GPU_MILLI, PendingJob, QueueStep, RunningJob


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


def requeue_note(job: RunningJob, cause: StopCause) -> str:
    """What the stop makes of the job, as the end-of-run table says (`lifecycle.end_of_stop`)."""
    end = end_of_stop(cause, job.resumable)
    if end.requeue:
        return "requeued with its original submit time"
    return "not resumable: it fails" if end.state is EndState.FAILED else "stopped (not resumable)"


def no_allocation(project: str) -> str:
    return f"project {project} has no allocation on this cluster"


def queue_step(step: QueueStep) -> str:
    """Why a project's jobs stand after the previous project's in the queue (`QueueStep`), as the queue page
    says it."""
    kind, ahead, here = step.kind, step.ahead, step.here
    if kind == model.QUEUE_FIRST:
        return "first: its units are the least served of those with allocated jobs waiting"
    if kind == model.QUEUE_FIRST_UNALLOCATED:
        return "only unallocated jobs wait: they share idle GPUs in fair-share order of free usage"
    if kind == model.QUEUE_AFTER_ALLOCATED:
        return "only unallocated jobs (minimum runtime 0) wait here: they come after all allocated work"
    if kind == model.QUEUE_BOTH_UNALLOCATED:
        return "both wait unallocated: the project that used less free GPU time goes first"
    if kind == model.QUEUE_NEW:
        return "submitted since the last tick: placed at the next one"
    if kind == model.QUEUE_NEITHER_ALLOCATED:
        return f"neither {ahead} nor {here} has an allocation here; ties go by name"
    if kind == model.QUEUE_NO_ALLOCATION:
        return f"{here} has no allocation on this cluster: its jobs come after allocated units'"
    if kind == model.QUEUE_AHEAD_NO_ALLOCATION:
        return f"the order of the last tick ({ahead} has no allocation here)"
    if kind == model.QUEUE_LESS_SERVED:
        return (f"{ahead} has used {format_percent(step.ahead_ratio)} of its budget, "
                f"{here} {format_percent(step.here_ratio)}: the less-served sibling goes first")
    if kind == model.QUEUE_EQUAL_RATIOS:
        return (f"{ahead} and {here} have both used {format_percent(step.here_ratio)}: "
                f"the larger share goes first, then the name")
    if kind == model.QUEUE_CHARGED:
        return (f"{here} started jobs in the last tick (each start charges its units for its minimum runtime), "
                f"so {ahead} ({format_percent(step.ahead_ratio)} at the start of the tick) now comes first")
    if kind == model.QUEUE_SAME_UNITS:
        return "same units: by project priority, then submit time"
    return ""  # a kind this version does not know

"""What the scheduler tells people (notifications/services.py records and delivers it): a job of theirs
started, was preempted, ended. Recorded in the writer's transaction, delivered outside the tick."""

from datetime import datetime

from django.urls import reverse

from notifications.models import Kind
from notifications.services import notify
from scheduler.models import Job


def _job(job_pk: int) -> Job:
    return Job.objects.select_related("cluster", "project").only(
        "pk", "name", "user_id", "gpus", "state", "cluster__name", "project__name").get(pk=job_pk)


def _title(job: Job) -> str:
    return f"job {job.pk}" + (f" ({job.name})" if job.name else "")


def job_started(job_pk: int, *, hosts: list[str], at: datetime) -> None:
    job = _job(job_pk)
    where = ", ".join(hosts[:4]) + (f" and {len(hosts) - 4} more" if len(hosts) > 4 else "")
    notify(Kind.JOB_START, user_ids=[job.user_id], at=at, path=reverse("job-detail", args=[job.pk]),
           subject=f"Allot: {_title(job)} started",
           text=f"{_title(job).capitalize()} started on {job.cluster.name} for {job.project.name}: "
                f"{job.gpus} GPU{'s' if job.gpus != 1 else ''} on {where}.")


def job_preempted(job_pk: int, *, reason: str, requeue: bool, at: datetime) -> None:
    job = _job(job_pk)
    then = "it goes back to the queue with its original submit time" if requeue else "it does not requeue"
    notify(Kind.JOB_PREEMPTED, user_ids=[job.user_id], at=at, path=reverse("job-detail", args=[job.pk]),
           subject=f"Allot: {_title(job)} preempted",
           text=f"{_title(job).capitalize()} on {job.cluster.name} is being preempted: {reason}; {then}.")


def job_ended(job_pk: int, *, summary: str, at: datetime) -> None:
    job = _job(job_pk)
    notify(Kind.JOB_END, user_ids=[job.user_id], at=at, path=reverse("job-detail", args=[job.pk]),
           subject=f"Allot: {_title(job)} {job.state}",
           text=f"{_title(job).capitalize()} on {job.cluster.name} ({job.project.name}) {job.state}: {summary}.")

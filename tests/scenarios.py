"""Cluster states for tests that need a week of history: finished runs, running jobs, a queue."""

from datetime import timedelta

from scheduler.choices import JobState
from scheduler.models import GpuAssignment, Job
from tests.factories import make_job


def finished_job(*, project, gpus, on_hosts, started, hours, min_runtime=3600, state=JobState.COMPLETED, **fields):
    """A job that ran `hours` from `started` on `on_hosts` and ended: its GPUs released again."""
    job = make_job(project=project, gpus=gpus, on_hosts=on_hosts, started=started, min_runtime=min_runtime,
                   submitted_at=started - timedelta(minutes=5), **fields)
    ended = started + timedelta(hours=hours)
    GpuAssignment.objects.filter(job=job).update(released_at=ended)
    Job.objects.filter(pk=job.pk).update(state=state, ended_at=ended)
    return job


def busy_week(now):
    """The demo cluster after a busy week (needs the `demo` fixture).

    History: olmo, tulu, safety and molmo each ran jobs over the last 6 days (olmo 8-GPU jobs of 3 h,
    tulu 8 × 2 h, safety 4 × 1 h, molmo 32 × 6 h). Now: olmo runs 32 GPUs on nvl72-01, molmo 64 on nvl72-02,
    tulu 8 on hgx-01; waiting: olmo 4 × 16 GPUs, tulu 2 × 8, safety 8, molmo 2 × 32.
    """
    for day in range(1, 7):
        start = now - timedelta(days=day, hours=2)
        finished_job(project="olmo", gpus=8, on_hosts=["hgx-02-h01"], started=start, hours=3)
        finished_job(project="tulu", gpus=8, on_hosts=["hgx-03-h01"], started=start, hours=2)
        finished_job(project="safety", gpus=4, on_hosts=["hgx-04-h01"], started=start, hours=1)
        finished_job(project="molmo", gpus=32, on_hosts=[f"nvl72-04-h{n:02d}" for n in range(1, 9)],
                     started=start, hours=6, user="dan")
    make_job(project="olmo", gpus=32, on_hosts=[f"nvl72-01-h{n:02d}" for n in range(1, 9)],
             started=now - timedelta(hours=1), submitted_at=now - timedelta(hours=2), max_runtime=12 * 3600)
    make_job(project="molmo", gpus=64, user="dan", on_hosts=[f"nvl72-02-h{n:02d}" for n in range(1, 17)],
             started=now - timedelta(hours=3), submitted_at=now - timedelta(hours=3))
    make_job(project="tulu", gpus=8, user="carol", on_hosts=["hgx-01-h01"], started=now - timedelta(minutes=30),
             submitted_at=now - timedelta(hours=1))
    for n in range(4):
        make_job(project="olmo", gpus=16, submitted_at=now - timedelta(minutes=50 - n), max_runtime=8 * 3600)
    for n in range(2):
        make_job(project="tulu", gpus=8, user="carol", submitted_at=now - timedelta(minutes=40 - n))
        make_job(project="molmo", gpus=32, user="dan", submitted_at=now - timedelta(minutes=30 - n))
    make_job(project="safety", gpus=8, user="erin", submitted_at=now - timedelta(minutes=20))

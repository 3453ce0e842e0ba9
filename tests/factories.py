"""Small builders for tests: jobs that hold real GPUs through the real constraints."""

from django.contrib.auth import get_user_model
from django.utils import timezone

from budgets.models import Unit
from scheduler.choices import JobState
from scheduler.models import GpuAssignment, Job, JobEvent
from topology.choices import HostState
from topology.models import Cluster, Gpu, Host


def make_job(
    *, cluster="gb200-east", project="olmo", user="alice", gpus=1, min_runtime=3600, resumable=True,
    state=None, on_hosts=(), gpu_ids=(), milli=1000, started=None, **fields,
):
    """A job, running on the first free GPUs of `on_hosts` (or exactly `gpu_ids`) when given."""
    user_obj, _ = get_user_model().objects.get_or_create(username=user)
    job = Job.objects.create(
        cluster=Cluster.objects.get(name=cluster), project=Unit.objects.get(name=project), user=user_obj,
        gpus=gpus, min_runtime=min_runtime, resumable=resumable, gpu_milli=milli, command="python train.py",
        **fields,
    )
    JobEvent.objects.create(job=job, kind="submit", actor=user)
    chosen = list(gpu_ids)
    if on_hosts and not chosen:
        free = (
            Gpu.objects.filter(host__name__in=on_hosts, allocated_milli__lte=1000 - milli)
            .order_by("host__name", "index")
        )
        chosen = [gpu.gpu_id for gpu in free.select_related("host")[:gpus]]
    if chosen:
        start = started or timezone.now()
        for gpu_id in chosen:
            host, index = gpu_id.rsplit(":", 1)
            gpu = Gpu.objects.get(host__name=host, index=int(index))
            GpuAssignment.objects.create(job=job, gpu=gpu, milli=milli, assigned_at=start)  # the GPU's milli: a trigger
        job.state = state or JobState.RUNNING
        job.started_at = job.run_started_at = start
        job.save(update_fields=["state", "started_at", "run_started_at"])
    elif state:
        job.state = state
        job.save(update_fields=["state"])
    return job


def serve_from_one_host(cluster, host: str, at):
    """`cluster` run by agents with only `host` in service (the others down), its agent heard from `at`."""
    cluster.executor = "agent"
    cluster.heartbeat_timeout_seconds = 3 * 3600
    cluster.save()
    Host.objects.exclude(name=host).update(state=HostState.DOWN, state_reason="test: out of service")
    Host.objects.filter(name=host).update(last_heartbeat_at=at)
    return cluster

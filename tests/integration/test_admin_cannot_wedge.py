"""Finding 1: no admin action leaves a GPU counter stale, so no delete can wedge the scheduler.

Each GPU's allocated_milli is kept by database triggers on the assignments (SQLite and PostgreSQL alike);
the admin refuses to delete jobs, assignments and the other audit rows; and a delete that bypasses the
admin (a shell, the cascade the admin used to run) leaves the counters right, so the next tick schedules.
"""

import pytest
from django.db.models import Sum

from scheduler.models import GpuAssignment, Job, JobEvent
from scheduler.services import JobRequest, job_submit
from scheduler.tick import run_tick
from tests.conftest import get_user
from tests.factories import make_job
from topology.models import Gpu, Host, HostEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def full_hgx(demo):
    """Every 8-GPU H100 server runs an 8-GPU job; one more such job waits."""
    jobs = [make_job(project="olmo", gpus=8, gpu_ids=[f"{host.name}:{i}" for i in range(8)])
            for host in Host.objects.filter(gpu_type="H100").order_by("name")]
    waiting = job_submit(user=get_user("alice"), request=JobRequest(
        cluster="gb200-east", project="olmo", gpus=8, gpus_per_host=8, gpu_type="H100", min_runtime=0,
        resumable=True, command="python train.py"))
    run_tick(demo)
    waiting.refresh_from_db()
    assert waiting.state == "pending"
    return jobs, waiting


def counters_match_live_assignments():
    live = dict(GpuAssignment.objects.filter(released_at__isnull=True).values("gpu").annotate(milli=Sum("milli"))
                .values_list("gpu", "milli"))
    assert {pk: milli for pk, milli in Gpu.objects.values_list("pk", "allocated_milli") if milli} == live
    return True


def test_the_admin_refuses_to_delete_a_running_job_or_its_gpus(full_hgx, client):
    jobs, waiting = full_hgx
    client.force_login(get_user("admin"))
    victim = jobs[0]
    assert client.get(f"/admin/scheduler/job/{victim.pk}/delete/").status_code == 403
    assert client.post(f"/admin/scheduler/job/{victim.pk}/delete/", {"post": "yes"}).status_code == 403
    client.post("/admin/scheduler/job/", {"action": "delete_selected", "_selected_action": [victim.pk],
                                          "post": "yes"})
    assignment = GpuAssignment.objects.filter(job=victim).first()
    assert client.post(f"/admin/scheduler/gpuassignment/{assignment.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=victim.pk).exists() and GpuAssignment.objects.filter(job=victim).count() == 8
    assert counters_match_live_assignments()


@pytest.mark.parametrize("model", ["jobevent", "hostevent", "allocationchange"])
def test_audit_rows_are_read_only_in_the_admin(full_hgx, client, model):
    from budgets.models import AllocationChange

    row = {"jobevent": JobEvent, "hostevent": HostEvent, "allocationchange": AllocationChange}[model].objects.first()
    app = row._meta.app_label
    client.force_login(get_user("admin"))
    assert client.get(f"/admin/{app}/{model}/{row.pk}/change/").status_code == 200  # readable
    assert client.post(f"/admin/{app}/{model}/{row.pk}/delete/", {"post": "yes"}).status_code == 403
    assert client.get(f"/admin/{app}/{model}/add/").status_code == 403
    assert type(row).objects.filter(pk=row.pk).exists()


@pytest.mark.parametrize("delete", ["job", "assignments"])
def test_a_delete_that_bypasses_the_admin_leaves_the_counters_right_and_the_next_tick_schedules(
        full_hgx, demo, delete):
    jobs, waiting = full_hgx
    victim = jobs[0]
    # What the admin's delete did before: Django's cascade, outside every service.
    if delete == "job":
        Job.objects.filter(pk=victim.pk).delete()
    else:
        GpuAssignment.objects.filter(job=victim).delete()
    assert counters_match_live_assignments()
    result = run_tick(demo)
    assert not result.skipped, result.skipped
    waiting.refresh_from_db()
    assert waiting.state == "running"
    assert counters_match_live_assignments()


def test_the_counter_follows_every_write_to_the_assignments(demo):
    job = make_job(gpus=1, milli=300, gpu_ids=["hgx-01-h01:0"])
    gpu = Gpu.objects.get(host__name="hgx-01-h01", index=0)
    assert Gpu.objects.get(pk=gpu.pk).allocated_milli == 300
    GpuAssignment.objects.filter(job=job).update(milli=400)
    assert Gpu.objects.get(pk=gpu.pk).allocated_milli == 400
    other = Gpu.objects.get(host__name="hgx-01-h01", index=1)
    GpuAssignment.objects.filter(job=job).update(gpu=other)
    assert (Gpu.objects.get(pk=gpu.pk).allocated_milli, Gpu.objects.get(pk=other.pk).allocated_milli) == (0, 400)
    GpuAssignment.objects.filter(job=job).update(released_at="2026-01-01T00:00:00Z")
    assert Gpu.objects.get(pk=other.pk).allocated_milli == 0
    GpuAssignment.objects.filter(job=job).delete()  # a released assignment gives nothing back twice
    assert Gpu.objects.get(pk=other.pk).allocated_milli == 0

"""The database itself refuses a GPU held twice: on SQLite and on PostgreSQL alike."""

import pytest
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from scheduler.models import GpuAssignment
from tests.factories import make_job
from topology.models import Gpu

pytestmark = pytest.mark.django_db


def test_two_live_jobs_cannot_hold_the_same_whole_gpu(demo):
    first = make_job(gpus=1, gpu_ids=["hgx-01-h01:0"])
    second = make_job(project="tulu", user="carol", gpus=1)
    gpu = Gpu.objects.get(host__name="hgx-01-h01", index=0)

    with pytest.raises(IntegrityError), transaction.atomic():
        GpuAssignment.objects.create(job=second, gpu=gpu, milli=1000)

    # Once the first job lets go, the GPU can be held again; history stays.
    GpuAssignment.objects.filter(job=first).update(released_at=timezone.now())
    GpuAssignment.objects.create(job=second, gpu=gpu, milli=1000)
    assert GpuAssignment.objects.filter(gpu=gpu).count() == 2


def test_a_gpu_is_never_committed_beyond_1000_milli(demo):
    make_job(gpus=1, milli=600, gpu_ids=["hgx-01-h01:0"])
    gpu = Gpu.objects.get(host__name="hgx-01-h01", index=0)
    assert gpu.allocated_milli == 600

    with pytest.raises(IntegrityError), transaction.atomic():
        Gpu.objects.filter(pk=gpu.pk).update(allocated_milli=F("allocated_milli") + 500)
    Gpu.objects.filter(pk=gpu.pk).update(allocated_milli=F("allocated_milli") + 400)
    gpu.refresh_from_db()
    assert gpu.allocated_milli == 1000


def test_a_fraction_is_only_for_a_one_gpu_job(demo):
    with pytest.raises(IntegrityError), transaction.atomic():
        make_job(gpus=2, milli=500)

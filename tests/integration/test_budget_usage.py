"""The numbers on the budget pages: entitlement, window usage, ratio, pending demand, usage over time."""

from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from budgets.models import Unit
from budgets.services import budget_request_approve, budget_request_create
from operations.selectors import budget_tree, usage_vs_entitlement
from scheduler.models import GpuAssignment
from scheduler.usage import usage_series
from tests.conftest import get_user
from tests.factories import make_job

pytestmark = pytest.mark.django_db

HEALTHY = 348
WEEK_HOURS = 168


@pytest.fixture
def busy(demo):
    now = timezone.now()
    make_job(project="olmo", gpus=8, on_hosts=["hgx-01-h01"], started=now - timedelta(hours=2))  # 16 GPU-h
    make_job(project="tulu", gpus=4, min_runtime=0, on_hosts=["hgx-02-h01"],
             started=now - timedelta(hours=1))  # 4 free GPU-h
    old = make_job(project="safety", gpus=8, on_hosts=["hgx-03-h01"], started=now - timedelta(days=9))
    GpuAssignment.objects.filter(job=old).update(released_at=now - timedelta(days=8))  # outside the window
    make_job(project="olmo", gpus=16)  # pending, allocated
    make_job(project="molmo", gpus=2, min_runtime=0)  # pending, unallocated
    return now


def test_it_shows_share_entitlement_usage_ratio_and_pending_demand_per_unit(demo, busy):
    with time_machine.travel(busy, tick=False):
        rows = {row.unit.name: row for row in budget_tree(demo, now=timezone.now())}
    olmo, nlp, tulu, safety = rows["olmo"], rows["nlp"], rows["tulu"], rows["safety"]
    assert olmo.percent_of_parent == Decimal(55) and olmo.fraction_of_cluster == pytest.approx(0.33)
    assert olmo.gpu_hours_per_week == pytest.approx(0.33 * HEALTHY * WEEK_HOURS)
    assert olmo.entitled_gpu_hours == pytest.approx(0.33 * HEALTHY * WEEK_HOURS)  # the window is 7 days
    assert olmo.usage_gpu_hours == pytest.approx(16)
    assert olmo.ratio == pytest.approx(16 / (0.33 * HEALTHY * WEEK_HOURS))
    assert (tulu.usage_gpu_hours, tulu.unallocated_gpu_hours) == (0, pytest.approx(4))  # free time is not charged
    assert safety.usage_gpu_hours == 0  # ended before the window
    assert (nlp.usage_gpu_hours, nlp.unallocated_gpu_hours) == (pytest.approx(16), pytest.approx(4))  # rolled up
    assert (olmo.pending_gpus, nlp.pending_gpus, rows["molmo"].pending_unallocated_gpus) == (16, 16, 2)
    assert nlp.children_percent == Decimal(100) and rows["multimodal"].room_percent == Decimal(10)


def test_the_tree_costs_a_fixed_number_of_queries(demo, busy):
    for _ in range(20):
        make_job(project="pixmo", gpus=1)
    with CaptureQueriesContext(connection) as queries:
        budget_tree(demo, now=timezone.now())
    assert len(queries) <= 10


def test_usage_over_time_comes_from_run_intervals_in_buckets(demo, busy):
    start = busy - timedelta(hours=4)
    series = usage_series(demo, start=start, end=busy, bucket_seconds=3600)
    olmo = series[Unit.objects.get(name="olmo").pk]
    assert [bucket.allocated / 3600 for bucket in olmo] == [0, 0, pytest.approx(8), pytest.approx(8)]
    tulu = series[Unit.objects.get(name="tulu").pk]
    assert [bucket.unallocated / 3600 for bucket in tulu] == [0, 0, 0, pytest.approx(4)]
    assert Unit.objects.get(name="safety").pk not in series


def test_the_plot_shows_usage_against_entitlement_including_scheduled_changes(demo, busy):
    with time_machine.travel(busy, tick=False):
        now = timezone.now()
        request = budget_request_create(
            user=get_user("dan"), unit=Unit.objects.get(name="pixmo"), cluster=demo, share="30",
            starts_at=now + timedelta(days=2), ends_at=now + timedelta(days=4), justification="labelling week",
        )
        budget_request_approve(request=request, approver=get_user("mia"))
        nlp = usage_vs_entitlement(Unit.objects.get(name="nlp"), demo, now=now, schedulable_gpus=HEALTHY)
        pixmo = usage_vs_entitlement(Unit.objects.get(name="pixmo"), demo, now=now, schedulable_gpus=HEALTHY)
    assert len(nlp["x"]) == len(nlp["allocated"]) == 168 and nlp["bucket_seconds"] == 3600
    assert sum(nlp["allocated"]) == pytest.approx(16) and sum(nlp["unallocated"]) == pytest.approx(4)
    # Nothing before the org was loaded (a moment ago), then nlp's 60 % of the healthy GPUs.
    assert nlp["entitled"] == [0, pytest.approx(0.6 * HEALTHY), pytest.approx(0.6 * HEALTHY)]
    assert [round(value, 2) for value in pixmo["entitled"]] == [
        0, round(0.4 * 0.2 * HEALTHY, 2), round(0.4 * 0.3 * HEALTHY, 2), round(0.4 * 0.2 * HEALTHY, 2),
        round(0.4 * 0.2 * HEALTHY, 2),
    ]
    assert pixmo["entitled_x"][2:4] == [(now + timedelta(days=2)).isoformat(), (now + timedelta(days=4)).isoformat()]
    assert pixmo["entitled_x"][-1] == (now + timedelta(days=5)).isoformat()  # a day past the last change


def test_the_usage_page_leaves_out_units_with_nothing_on_a_cluster_and_the_csv_keeps_them(demo, busy, client):
    """A cluster no unit holds a share of and nobody ran on (the demo's `lab`) says so in one line instead of
    listing every unit of the org as zeros; the clusters with shares list their units."""
    from tests.conftest import DEMO
    from topology.loaders import load_cluster_file

    load_cluster_file(DEMO / "agent-cluster.yaml")
    client.force_login(get_user("pat"))
    html = client.get("/usage/").content.decode()
    lab = html[html.index('data-testid="usage-lab"'):]
    assert "No unit holds a share of lab or ran a job on it in this period." in lab
    assert 'data-unit="' not in lab
    east = html[html.index('data-testid="usage-gb200-east"'):html.index('data-testid="usage-lab"')]
    assert 'data-unit="olmo"' in east and 'data-unit="safety"' in east  # safety: a share, nothing run lately
    csv = client.get("/usage/", {"format": "csv"}).content.decode().splitlines()
    assert any(line.startswith("lab,olmo,") for line in csv)

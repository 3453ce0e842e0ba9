"""One rule, one home: with a draining host still running jobs, the pages, the API and the metrics show what the
scheduler's core decides — the ratios it orders the queue by."""

from datetime import datetime, timedelta

import pytest
import time_machine
from django.utils import timezone

from scheduler.core import schedule
from scheduler.selectors import project_consumption
from scheduler.services import job_end_run
from scheduler.snapshot import build_snapshot
from scheduler.tick import run_tick
from tests.conftest import get_user
from tests.factories import make_job
from topology.choices import HostState
from topology.models import Cluster, Host

pytestmark = pytest.mark.django_db

DRAINING = "hgx-01-h01"
MONTH = 30 * 86400


def decide(cluster: Cluster, now: datetime):
    """What the tick decides at `now`: `schedule` on the tick's own snapshot."""
    return schedule(build_snapshot(cluster, now=now).snapshot, now=now.timestamp(), policy=cluster.scheduling_policy())


@pytest.fixture
def now(demo):
    at = timezone.now().replace(microsecond=0) + timedelta(minutes=1)
    with time_machine.travel(at, tick=False):
        yield at


def test_the_budget_pages_api_and_dashboard_show_the_ratio_the_scheduler_orders_by(demo, now, client, api):
    # olmo ran 8 GPUs for four days, and runs 8 more on a host that is draining; tulu runs 4 elsewhere.
    done = make_job(project="olmo", gpus=8, on_hosts=["hgx-05-h01"], started=now - timedelta(days=5))
    job_end_run(job=done, outcome="exited", exit_code=0, at=now - timedelta(days=1), actor="test")
    make_job(project="olmo", gpus=8, min_runtime=8 * 3600, on_hosts=[DRAINING], started=now - timedelta(hours=2),
             simulated_duration=MONTH)
    make_job(project="tulu", user="carol", gpus=4, on_hosts=["nvl72-01-h01"], started=now - timedelta(hours=20),
             simulated_duration=MONTH)
    Host.objects.get(name=DRAINING).set_state(HostState.DRAINING, actor="olga", reason="fan failure")
    # 348 healthy GPUs are in service, but the draining host's 8 take no new jobs: shares are of 340.
    assert (demo.gpu_counts()["healthy"], demo.schedulable_gpus()) == (348, 340)

    ratios = decide(demo, now).unit_ratios
    assert ratios["olmo"] == pytest.approx((8 * 96 + 8 * 2) / (0.6 * 0.55 * 340 * 168))
    assert run_tick(demo, now=now).tick.unit_ratios == {name: pytest.approx(ratio) for name, ratio in ratios.items()
                                                        if ratio != float("inf")}

    client.force_login(get_user("pat"))
    overview = client.get("/budgets/?cluster=gb200-east")
    shown = {row.unit.name: row.ratio for row in overview.context["rows"]}
    for name in ("nlp", "olmo", "tulu", "safety", "multimodal", "molmo"):
        assert shown[name] == pytest.approx(ratios[name], rel=1e-9), name
    assert overview.context["schedulable_gpus"] == 340
    assert client.get("/budgets/units/olmo/").context["row"].ratio == pytest.approx(ratios["olmo"], rel=1e-9)

    body = api.as_user(get_user("carol")).get("/api/v1/units/nlp/usage/?cluster=gb200-east").json()
    assert body["schedulable_gpus"] == 340
    assert body["ratio"] == pytest.approx(ratios["nlp"], abs=5e-5)
    for child in body["children"]:
        assert child["ratio"] == pytest.approx(ratios[child["unit"]], abs=5e-5), child["unit"]

    consumption = {row["project"]: row["ratio"] for row in project_consumption(demo, now=now)}
    assert consumption["olmo"] == pytest.approx(ratios["olmo"], rel=1e-9)

"""One rule, one home: with a draining host still running jobs, the pages, the API and the metrics show what the
scheduler's core decides — the ratios it orders the queue by, and when each job leaves the drain."""

from datetime import datetime, timedelta

import pytest
import time_machine
from django.utils import timezone

from budgets.models import Unit
from operations.selectors import project_consumption
from scheduler.core import schedule
from scheduler.services import job_end_run
from scheduler.snapshot import build_snapshot, moment
from scheduler.tick import run_tick
from tests.conftest import get_user
from tests.factories import make_job
from topology.choices import HostState
from topology.models import Cluster, Host
from topology.services import host_drain

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
    # Entitlements are shares of the 340 schedulable GPUs; the in-service count clients read before stays.
    assert (body["schedulable_gpus"], body["healthy_gpus"]) == (340, 348)
    assert body["ratio"] == pytest.approx(ratios["nlp"], abs=5e-5)
    for child in body["children"]:
        assert child["ratio"] == pytest.approx(ratios[child["unit"]], abs=5e-5), child["unit"]

    consumption = {row["project"]: row["ratio"] for row in project_consumption(demo, now=now)}
    assert consumption["olmo"] == pytest.approx(ratios["olmo"], rel=1e-9)


def test_the_host_page_api_and_cli_show_the_drain_as_the_scheduler_decided_it(demo, now, client, api):
    protected = make_job(gpus=2, min_runtime=3600, on_hosts=[DRAINING], started=now - timedelta(minutes=10),
                         simulated_duration=MONTH)
    capped = make_job(gpus=2, min_runtime=3600, max_runtime=1800, on_hosts=[DRAINING],
                      started=now - timedelta(minutes=10))
    # Preempted once before this run: its protection doubled (rule 4's bound on churn).
    again = make_job(gpus=2, min_runtime=3600, preemptions=1, on_hosts=[DRAINING],
                     started=now - timedelta(minutes=10), simulated_duration=MONTH)
    free = make_job(project="tulu", user="carol", gpus=2, min_runtime=0, on_hosts=[DRAINING],
                    started=now - timedelta(minutes=10), simulated_duration=MONTH)
    host_drain(host=Host.objects.get(name=DRAINING), actor="olga", reason="fan failure")

    (change,) = [c for c in decide(demo, now).host_changes if c.host == DRAINING]
    decided = {int(left.job_id): (moment(left.at), left.why) for left in change.leaves}
    assert decided == {
        again.pk: (now + timedelta(hours=2, minutes=-10, seconds=60), "at the end of its protection"),
        protected.pk: (now + timedelta(minutes=50, seconds=60), "at its minimum runtime"),
        capped.pk: (now + timedelta(minutes=20, seconds=60), "at its maximum runtime"),
        free.pk: (now + timedelta(seconds=10), "at once (unallocated)"),
    }
    run_tick(demo, now=now)

    client.force_login(get_user("olga"))
    page = client.get(f"/hosts/{DRAINING}/")
    progress, rows = page.context["progress"], page.context["jobs"]
    assert (progress.jobs_left, progress.last_leaves_at, progress.last_why) == (4, moment(change.empty_at),
                                                                              change.leaves[0].why)
    assert {row.job.pk: (row.leaves_at, row.leaves_why) for row in rows} == decided
    assert [row.job.pk for row in rows] == [int(left.job_id) for left in change.leaves]
    html = page.content.decode()
    last = timezone.localtime(moment(change.empty_at))
    assert f"4 jobs left;</strong> the last leaves by <strong>{last:%H:%M}</strong>" in html
    assert "at the end of its protection" in html

    progress = api.as_user(get_user("olga")).get(f"/api/v1/hosts/{DRAINING}/").json()["drain_progress"]
    assert (progress["jobs_left"], datetime.fromisoformat(progress["last_leaves_at"])) == (4, moment(change.empty_at))
    assert {job["job"]: (datetime.fromisoformat(job["leaves_at"]), job["why"]) for job in progress["jobs"]} == decided

    repairs = client.get("/repairs/").content.decode()
    assert f"4 jobs left; the last leaves by {last:%H:%M}" in repairs


def test_until_its_first_tick_a_drain_says_the_scheduler_has_yet_to_decide(demo, now, client, api):
    make_job(gpus=8, min_runtime=3600, on_hosts=[DRAINING], simulated_duration=MONTH)
    host_drain(host=Host.objects.get(name=DRAINING), actor="olga", reason="fan failure")
    client.force_login(get_user("olga"))
    html = client.get(f"/hosts/{DRAINING}/").content.decode()
    assert "1 job left;</strong> when it leaves: the scheduler decides when at its next tick." in html
    progress = api.as_user(get_user("olga")).get(f"/api/v1/hosts/{DRAINING}/").json()["drain_progress"]
    assert (progress["jobs_left"], progress["last_leaves_at"], progress["jobs"][0]["leaves_at"]) == (1, None, None)
    run_tick(demo, now=now)
    assert "at its minimum runtime" in client.get(f"/hosts/{DRAINING}/").content.decode()
    # A new state is a new drain: what was decided for the last one goes.
    host = Host.objects.get(name=DRAINING)
    assert host.drain_leaves
    host.set_state(HostState.UP, actor="olga", reason="fan replaced")
    assert Host.objects.get(name=DRAINING).drain_leaves == []


def test_before_a_drain_the_host_page_previews_it_with_the_cores_rule(demo, now, client):
    again = make_job(gpus=2, min_runtime=3600, preemptions=1, on_hosts=[DRAINING],
                     started=now - timedelta(minutes=10), simulated_duration=MONTH)
    client.force_login(get_user("olga"))
    page = client.get(f"/hosts/{DRAINING}/")
    (row,) = page.context["jobs"]
    assert (row.job.pk, row.leaves_at, row.leaves_why) == (
        again.pk, now + timedelta(hours=2, minutes=-10, seconds=60), "at the end of its protection")
    assert 'data-testid="drain-preview"' in page.content.decode() and page.context["progress"] is None


def test_the_queue_pages_sort_metric_is_the_path_the_tick_walked(demo, now, client):
    # Two waiting olmo jobs too large to start, so they keep their places in the queue.
    make_job(project="olmo", gpus=400)
    make_job(project="olmo", gpus=400)
    tick = run_tick(demo, now=now).tick
    ratios = tick.unit_ratios
    # After the tick, olmo is moved under multimodal and molmo submits: the page shows what the tick ordered by.
    Unit.objects.filter(name="olmo").update(parent=Unit.objects.get(name="multimodal"))
    make_job(project="molmo", gpus=400)

    client.force_login(get_user("alice"))
    page = client.get("/clusters/gb200-east/queue/")
    rows = {row["project"].name: row for row in page.context["order"]}
    walked = [("nlp", ratios.get("nlp")), ("olmo", ratios.get("olmo"))]
    assert rows["olmo"]["path"] == walked
    assert {tuple(job.sort_path) for job in page.context["pending"] if job.project.name == "olmo"} == {tuple(walked)}
    # molmo's job came after the tick: no order has been decided for it yet, and the page says so.
    assert rows["molmo"]["path"] == [] and rows["molmo"]["first"] is None
    assert "at the next tick" in page.content.decode()

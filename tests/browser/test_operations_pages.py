"""The operations pages in Chromium: each renders a live cluster with no console error and no request
leaving 127.0.0.1 (the `visit` fixture checks that on the way out); on-call drains a host from its page."""

import re
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from scheduler.demo_load import DemoLoad
from scheduler.models import Job
from scheduler.tick import run_tick
from tests.factories import make_job
from topology.models import Host, HostEvent

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def live_demo(demo, settings):
    """Half an hour of the demo workload, ticked every five minutes: history for the charts, a queue."""
    settings.ALLOT_SAMPLE_SECONDS = 60
    load = DemoLoad(seed=11, max_pending=30, per_step=6)
    now = timezone.now()
    for minutes in range(30, -1, -5):
        with time_machine.travel(now - timedelta(minutes=minutes), tick=False):
            load.step()
            if minutes == 0:
                for user, project in (("alice", "olmo"), ("dan", "molmo"), ("carol", "tulu")) * 2:
                    make_job(user=user, project=project, gpus=72, min_runtime=3600, topology="domain",
                             name=f"{project}-rack", state="pending")
            run_tick(demo)
    HostEvent.objects.create(host=Host.objects.get(name="nvl72-03-h07"), kind="xid", code=79, actor="system:agent",
                             detail="XID 79 on GPU 1: GPU has fallen off the bus")
    return demo


def assert_clean(visit):
    assert visit.console_errors == []
    assert visit.external_requests() == []


def test_the_dashboard_draws_every_chart_and_switches_ranges(live_demo, visit):
    visit.login("pat")
    visit.goto("/clusters/gb200-east/")
    page = visit.page
    page.wait_for_function("document.querySelectorAll('#dashboard .js-plotly-plot').length === 8")
    assert "points" in page.get_by_test_id("updated").inner_text()
    assert page.locator("#plot-occupancy .scatterlayer .trace").count() == 4
    assert page.locator("#plot-consumption .barlayer .trace").count() == 2
    occupancy = page.get_by_test_id("occupancy").inner_text()
    assert re.fullmatch(r"\d+(\.\d)? %", occupancy)
    page.click(".range a[data-range='1h']")
    page.wait_for_url("**/clusters/gb200-east/?range=1h")
    page.wait_for_function("document.querySelector('.range a[aria-current]').dataset.range === '1h'")
    assert any("/static/plotly/plotly.min.js" in url for url in visit.requests)
    assert any("dashboard.json?range=1h" in url for url in visit.requests)
    assert_clean(visit)


def test_the_queue_explains_the_order_and_shows_my_jobs(live_demo, visit):
    visit.login("alice")
    visit.goto("/clusters/gb200-east/queue/")
    page = visit.page
    order = page.get_by_test_id("order")
    assert order.locator("tbody tr").count() >= 1
    assert "%" in order.inner_text()
    assert page.get_by_test_id("pending").locator("tbody tr").count() >= 1
    mine = page.get_by_test_id("my-jobs")
    assert mine.locator("tbody tr").count() == Job.objects.filter(
        user__username="alice", state__in=["pending", "starting", "running", "preempting"]).count()
    # The rows keep their order when htmx refreshes them in place.
    before = page.get_by_test_id("pending").locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.job)")
    with page.expect_response(lambda response: "/queue/" in response.url and response.request.method == "GET"):
        pass
    page.wait_for_timeout(300)
    after = page.get_by_test_id("pending").locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.job)")
    assert after == before
    assert_clean(visit)


def test_the_job_page_shows_the_timeline(live_demo, visit):
    job = Job.objects.filter(started_at__isnull=False).order_by("pk").first()
    visit.login("admin")
    visit.goto(f"/jobs/{job.pk}/")
    timeline = visit.page.get_by_test_id("timeline")
    kinds = timeline.locator("tbody tr").evaluate_all("rows => rows.map(r => r.dataset.kind)")
    assert kinds[:2] == ["submit", "start"]
    assert "GPU" in timeline.locator("tr[data-kind=start] td").nth(2).inner_text()
    assert_clean(visit)


def test_the_rack_shows_each_gpus_job_on_hover(live_demo, visit):
    visit.login("olga")
    visit.goto("/clusters/gb200-east/domains/nvl72-03/")
    rack = visit.page.get_by_test_id("rack")
    assert rack.locator(".tray").count() == 18
    assert rack.locator(".gpu.unavailable").count() >= 4
    busy = rack.locator(".gpu.allocated, .gpu.unallocated")
    if busy.count():
        assert re.search(r"job \d+ .*\((\w+), (\w+), ", busy.first.get_attribute("title"))
    legend = visit.page.get_by_test_id("rack-legend").inner_text()
    assert "reserved" in legend and "unavailable" in legend
    assert_clean(visit)


def test_the_repairs_list_and_a_sick_host(live_demo, visit):
    visit.login("olga")
    visit.goto("/repairs/")
    needs = visit.page.get_by_test_id("needs-repair")
    assert "nvl72-03-h07" in needs.inner_text() and "XID 79 on GPU 1" in needs.inner_text()
    visit.page.click("text=nvl72-03-h07")
    visit.page.wait_for_url("**/hosts/nvl72-03-h07/")
    assert visit.page.get_by_test_id("host-state").inner_text() == "down"
    visit.page.wait_for_selector("#host-timeline.js-plotly-plot")
    assert "GPU has fallen off the bus" in visit.page.get_by_test_id("xid-meanings").inner_text()
    assert_clean(visit)


def test_on_call_drains_a_host_from_its_page_and_sees_its_progress(live_demo, visit):
    job = make_job(gpus=4, min_runtime=3600, on_hosts=["hgx-08-h01"], name="long-training")
    Job.objects.filter(pk=job.pk).update(simulated_duration=10 * 3600)
    visit.login("olga")
    visit.goto("/hosts/hgx-08-h01/")
    page = visit.page
    assert page.get_by_test_id("host-state").inner_text() == "up"
    page.fill("#host-reason", "NVLink CRC errors climbing; swap the board")
    page.click("button[data-action=drain]")
    page.wait_for_selector("[data-testid=drain-progress]")
    assert page.get_by_test_id("host-state").inner_text() == "draining"
    # When its jobs leave is the scheduler's decision: the page says so until its next tick, then shows it.
    assert "the scheduler decides when at its next tick" in page.get_by_test_id("drain-progress").inner_text()
    run_tick(live_demo)
    page.wait_for_function(
        "document.querySelector('[data-testid=drain-progress]').innerText.includes('leaves by')", timeout=15000)
    progress = page.get_by_test_id("drain-progress").inner_text()
    assert re.search(r"\d+ jobs? left; .*leaves by \d\d:\d\d", progress), progress
    assert "NVLink CRC errors climbing" in page.get_by_test_id("host-reason").inner_text()
    assert "olga" in page.inner_text("main")
    host = Host.objects.get(name="hgx-08-h01")
    assert (host.state, host.state_actor) == ("draining", "olga")
    # The page refreshes in place and keeps saying it.
    with page.expect_response(lambda response: "/hosts/hgx-08-h01/" in response.url):
        pass
    assert page.get_by_test_id("drain-progress").is_visible()
    assert_clean(visit)


def test_a_researcher_sees_no_host_actions(live_demo, visit):
    visit.login("alice")
    visit.goto("/hosts/hgx-08-h01/")
    assert visit.page.locator("button[data-action]").count() == 0
    assert "On-call engineers" in visit.page.get_by_test_id("host-actions").inner_text()
    assert_clean(visit)

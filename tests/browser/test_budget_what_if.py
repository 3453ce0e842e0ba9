"""The what-if in Chromium: a researcher asks, the manager sees the count, opens it, runs the what-if and sees
both sides, then approves a smaller amount; the researcher sees the decision.

Set ALLOT_SHOTS=/some/dir to save screenshots of each step.
"""


import pytest
from django.utils import timezone

from budgets.models import Allocation, Unit, WhatIf
from budgets.services import allocation_set_shares
from tests.conftest import get_user
from tests.scenarios import busy_week

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

def cells(row, test_id):
    return row.get_by_test_id(test_id).inner_text().strip()


def test_the_manager_runs_the_what_if_sees_both_sides_and_approves_less(demo, visit):
    busy_week(timezone.now())
    # Room under nlp for olmo to grow by 10 points: tulu and safety hand back 5 each.
    allocation_set_shares(parent=Unit.objects.get(name="nlp"), cluster=demo, actor=get_user("pat"),
                          shares={Unit.objects.get(name="tulu"): 25, Unit.objects.get(name="safety"): 10},
                          reason="between eval seasons")
    page = visit.page
    visit.login("alice")
    visit.goto("/budgets/requests/new/?unit=olmo&cluster=gb200-east")
    page.fill("#id_share", "65")
    page.fill("#id_justification", "Long-context pretraining: the 64-GPU runs wait behind everyone else.")
    page.click("button:has-text('Send request')")
    page.wait_for_url("**/budgets/requests/*/")
    request_url = page.url
    assert page.get_by_test_id("what-if-status").get_attribute("data-status") == "none"

    visit.switch_user("pat")
    badge = page.locator(".mainnav a:has-text('Budgets') .badge")
    assert badge.inner_text() == "1"
    page.click(".mainnav a:has-text('Budgets')")
    page.get_by_test_id("waiting").locator("a[href^='/budgets/requests/']").first.click()
    page.wait_for_url(request_url)
    section = page.get_by_test_id("what-if")
    assert float(section.get_by_test_id("what-if-form").locator("input[name=share]").input_value()) == 65
    section.get_by_test_id("what-if-run").click()
    page.wait_for_selector("[data-testid=what-if-status][data-status=done]")
    table = page.get_by_test_id("what-if-table")
    units = [row.get_attribute("data-unit") for row in table.locator("tbody tr[data-role]").all()]
    assert units == ["olmo", "safety", "tulu", "nlp", ""]  # the unit, its siblings, its parent, the cluster
    for unit in ("olmo", "safety", "tulu", "nlp"):
        row = table.locator(f"tr[data-unit='{unit}']")
        for test_id in ("ratio-without", "ratio-with", "wait-without", "wait-with"):
            assert cells(row, test_id) not in ("", "—"), (unit, test_id)
        assert cells(row, "ratio-with").endswith("%")
    olmo = table.locator("tr[data-unit='olmo']")
    assert olmo.locator("td").nth(1).inner_text() == "55 %" and olmo.locator("td").nth(2).inner_text() == "65 %"
    assert "arrive again 7 days later" in page.get_by_test_id("what-if-assumptions").inner_text()
    visit.shot("1-manager-runs-the-what-if")

    # Try the smaller amount too: a second what-if at 60 %.
    section.get_by_test_id("what-if-form").locator("input[name=share]").fill("60")
    section.get_by_test_id("what-if-run").click()
    page.wait_for_selector("[data-testid=what-if-status][data-status=done]")
    assert "at 60 %" in page.get_by_test_id("what-if-status").inner_text()
    assert WhatIf.objects.count() == 2

    form = page.get_by_test_id("approve-form")
    form.locator("input[name=share]").fill("60")
    form.locator("textarea[name=comment]").fill("60 % now, as simulated; ask again after the eval season.")
    form.locator("button:has-text('Approve')").click()
    page.wait_for_selector(".messages li")
    assert page.get_by_test_id("request-status").get_attribute("data-status") == "approved"
    assert Allocation.objects.current().get(unit__name="olmo").share_percent == 60
    # The result stays on the decided request; no new run is offered.
    assert page.get_by_test_id("what-if-status").get_attribute("data-status") == "done"
    assert page.get_by_test_id("what-if-form").count() == 0
    visit.shot("2-manager-approved-less")

    visit.switch_user("alice")
    visit.goto(request_url.removeprefix(visit.base_url))
    assert page.get_by_test_id("request-status").get_attribute("data-status") == "approved"
    assert page.get_by_test_id("granted").inner_text() == "60 %"
    assert page.get_by_test_id("what-if-table").locator("tr[data-unit='olmo']").count() == 1
    assert visit.console_errors == []


def test_the_page_follows_a_what_if_queued_for_a_worker(demo, visit):
    """Production: the click only queues the simulation. The page polls (htmx, served locally) until the worker
    is done — here the test plays the worker."""
    from budgets.services import budget_request_create
    from operations.tasks import run_what_if
    from operations.whatif import what_if_request
    from topology.models import Cluster

    budget_request = budget_request_create(user=get_user("alice"), unit=Unit.objects.get(name="olmo"),
                                           cluster=Cluster.objects.get(), share=60, justification="long context")
    queued, _ = what_if_request(budget_request=budget_request, user=get_user("pat"))
    page = visit.page
    visit.login("pat")
    visit.goto(f"/budgets/requests/{budget_request.pk}/")
    status = page.get_by_test_id("what-if-status")
    assert status.get_attribute("data-status") == "queued" and "waiting for a worker" in status.inner_text()
    run_what_if(queued.pk)
    page.wait_for_selector("[data-testid=what-if-status][data-status=done]", timeout=10000)
    assert page.get_by_test_id("what-if-table").locator("tr[data-unit='olmo']").count() == 1
    assert any(url.endswith("/static/django_htmx/htmx-2.min.js") for url in visit.requests)
    assert visit.console_errors == []

"""Budget governance in Chromium: a researcher asks, the manager sees the count, decides; the researcher sees it.

Set ALLOT_SHOTS=/some/dir to save screenshots of each step.
"""


import pytest

from budgets.models import Allocation

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

def share(name):
    return Allocation.objects.current().get(unit__name=name).share_percent


def test_a_researcher_asks_the_manager_approves_less_with_a_comment_and_the_researcher_sees_it(demo, visit):
    page = visit.page
    visit.login("dan")
    visit.goto("/budgets/")
    page.click("a.button:has-text('Ask for budget')")
    page.wait_for_url("**/budgets/requests/new/**")
    page.select_option("#id_unit", "molmo")
    page.fill("#id_share", "78")
    page.fill("#id_justification", "Video-language pretraining: 2 weeks on 64 GPUs before the deadline.")
    visit.shot("1-researcher-files-request")
    page.click("button:has-text('Send request')")
    page.wait_for_url("**/budgets/requests/*/")
    status = page.get_by_test_id("request-status")
    assert status.get_attribute("data-status") == "pending"
    assert "waiting for a decision by the managers of multimodal (mia)" in status.inner_text()
    request_url = page.url

    visit.switch_user("mia")
    badge = page.locator(".mainnav a:has-text('Budgets') .badge")
    assert badge.inner_text() == "1"
    assert "waiting for your decision" in badge.get_attribute("title")
    page.click(".mainnav a:has-text('Budgets')")
    waiting = page.get_by_test_id("waiting")
    assert "molmo" in waiting.inner_text() and "dan" in waiting.inner_text()
    visit.shot("2-manager-sees-the-count")
    waiting.locator("a[href^='/budgets/requests/']").first.click()
    page.wait_for_url(request_url)
    numbers = page.get_by_test_id("numbers")
    assert numbers.locator("tr[data-unit='pixmo']").count() == 1  # the siblings' numbers are on the page
    assert "molmo can have for this period" in page.get_by_test_id("room").inner_text()
    form = page.get_by_test_id("approve-form")
    form.locator("input[name=share]").fill("75")
    form.locator("textarea[name=comment]").fill("75 % now; ask again after the pixmo relabel finishes.")
    visit.shot("3-manager-decides")
    form.locator("button:has-text('Approve')").click()
    page.wait_for_selector(".messages li")
    assert "approved: molmo gets 75 %" in page.inner_text(".messages")
    assert page.get_by_test_id("request-status").get_attribute("data-status") == "approved"
    assert badge.count() == 0  # nothing waits any more
    assert share("molmo") == 75

    visit.switch_user("dan")
    visit.goto("/budgets/requests/")
    page.click(f"a[href='{request_url.removeprefix(visit.base_url)}']")
    status = page.get_by_test_id("request-status")
    assert status.get_attribute("data-status") == "approved"
    assert page.get_by_test_id("granted").inner_text() == "75 %" and "(asked 78 %)" in status.inner_text()
    assert "ask again after the pixmo relabel" in page.get_by_test_id("decision-comment").inner_text()
    visit.shot("4-researcher-sees-the-decision")
    page.click("h1 a:has-text('molmo')")
    page.wait_for_url("**/budgets/units/molmo/**")
    assert page.get_by_test_id("unit-share").inner_text() == "75 %"
    page.wait_for_selector("#usage-plot .main-svg")  # Plotly, served locally, drew the plot
    history = page.get_by_test_id("history")
    assert "mia" in history.inner_text() and "70 %" in history.inner_text() and "75 %" in history.inner_text()
    visit.shot("5-researcher-sees-the-new-share")
    assert visit.console_errors == []
    assert any("/static/plotly/plotly.min.js" in url for url in visit.requests)


def test_a_manager_with_no_room_takes_it_from_an_idle_sibling(demo, visit):
    page = visit.page
    visit.login("alice")
    visit.goto("/budgets/requests/new/?unit=olmo&cluster=gb200-east")
    page.fill("#id_share", "70")
    page.fill("#id_justification", "Long-context pretraining needs 15 % more of nlp for a month.")
    page.click("button:has-text('Send request')")
    page.wait_for_url("**/budgets/requests/*/")

    visit.switch_user("pat")
    visit.goto("/budgets/")
    page.get_by_test_id("waiting").locator("a[href^='/budgets/requests/']").first.click()
    no_room = page.get_by_test_id("no-room")
    assert "No room for 70 %" in no_room.inner_text()
    take = page.get_by_test_id("take-room-form")
    assert take.locator("tr[data-unit='tulu'] td").nth(3).inner_text().endswith("%")  # tulu's usage ratio
    take.locator("input[name='sibling-tulu']").fill("15")
    take.locator("input[name='sibling-safety']").fill("15")
    take.locator("textarea[name=comment]").fill("tulu is between eval seasons")
    visit.shot("6-no-room-take-from-sibling")
    take.locator("button:has-text('Approve and take the room')").click()
    page.wait_for_selector(".messages li")
    assert page.get_by_test_id("request-status").get_attribute("data-status") == "approved"
    assert (share("olmo"), share("tulu"), share("safety")) == (70, 15, 15)
    assert visit.console_errors == []

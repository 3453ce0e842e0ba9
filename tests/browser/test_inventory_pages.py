import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_oncall_sees_the_failed_tray_of_a_partial_rack_as_unavailable(demo, visit):
    visit.login("olga")
    visit.goto("/clusters/gb200-east/")
    visit.page.click("text=nvl72-03")
    visit.page.wait_for_url("**/domains/nvl72-03/")

    rack = visit.page.get_by_test_id("rack")
    assert rack.locator(".tray").count() == 18
    failed = rack.locator('.tray[data-host="nvl72-03-h07"]')
    assert failed.locator(".gpu.unavailable").count() == 4
    assert "down" in failed.locator(".note").inner_text()
    assert rack.locator(".gpu.unavailable").count() == 4
    assert rack.locator(".gpu.idle").count() == 68
    assert "68 of 72 GPUs healthy" in visit.page.inner_text("main")
    assert "unhealthy_hosts" in failed.locator(".gpu").first.get_attribute("title")
    assert visit.console_errors == []
    assert any("/static/css/allot.css" in url for url in visit.requests)
    assert visit.external_requests() == []

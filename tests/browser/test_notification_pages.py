"""The account page in Chromium: a researcher subscribes to her jobs' ends by webhook; a failed delivery is shown."""

import pytest

from notifications.models import Notification, Subscription

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_researcher_subscribes_and_sees_a_failed_delivery(demo, strict_visit):
    visit = strict_visit
    visit.login("alice")
    visit.goto("/account/")
    page = visit.page
    form = page.get_by_test_id("notification-form")
    form.get_by_label("a job of mine ended").check()
    form.get_by_label("a job of mine was preempted").check()
    form.get_by_label("Webhook URL").fill("https://hooks.example.org/services/T0/B0/x")
    form.get_by_role("button", name="Save notifications").click()
    page.wait_for_selector("text=Notifications saved.")
    subscription = Subscription.objects.get(user__username="alice")
    assert (subscription.job_end, subscription.job_preempted, subscription.job_start) == (True, True, False)
    assert page.get_by_test_id("notification-form").get_by_label("a job of mine ended").is_checked()
    Notification.objects.create(user=subscription.user, kind="job_end", channel="webhook",
                                target=subscription.webhook_url, subject="Allot: job 7 completed", text="done",
                                status="failed", attempts=5, last_error="ConnectionError: no route to host")
    visit.goto("/account/")
    row = page.get_by_test_id("notifications").locator("tbody tr").first
    assert "failed after 5 attempts: ConnectionError: no route to host" in row.inner_text()
    visit.shot("account-notifications")
    assert visit.console_errors == []

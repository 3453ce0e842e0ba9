"""Cancelling from the job page asks first; a job being stopped says `stopping` and offers no second Cancel."""

import pytest

from scheduler.models import Job
from tests.factories import make_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_cancel_asks_for_confirmation_and_a_stopping_job_says_so(demo, strict_visit):
    visit = strict_visit  # under the site's CSP: the confirmation is the page's own script
    job = make_job(user="alice", project="olmo", gpus=8, on_hosts=["hgx-01-h01"], state="running",
                   name="long-context")
    visit.login("alice")
    visit.goto(f"/jobs/{job.pk}/")
    page = visit.page
    assert page.get_by_test_id("job-state").inner_text() == "running"
    asked = []

    def dismiss(dialog):
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.click(f"button:has-text('Cancel job {job.pk}')")
    page.wait_for_timeout(300)
    assert asked and asked[0].startswith(f"Cancel job {job.pk} (long-context)? Its processes are stopped")
    job.refresh_from_db()
    assert job.stop_cause == "" and job.state == "running"  # dismissed: nothing happened

    page.once("dialog", lambda dialog: dialog.accept())
    page.fill("#cancel-reason", "wrong data path")
    page.click(f"button:has-text('Cancel job {job.pk}')")
    page.wait_for_selector("text=is being stopped")
    job = Job.objects.get(pk=job.pk)
    assert job.stop_cause == "cancel"
    assert page.get_by_test_id("job-state").inner_text() == "stopping"
    assert page.locator(f"button:has-text('Cancel job {job.pk}')").count() == 0
    visit.shot("job-stopping")
    assert visit.console_errors == []

"""Jobs (history), Usage and Submit in Chromium, as a researcher, a manager and on-call: no console error, no
request leaving 127.0.0.1 (the `visit` fixture checks that on the way out)."""

import csv
import io
from datetime import timedelta

import pytest
from django.utils import timezone

from budgets.models import Allocation
from scheduler.models import GpuAssignment, Job, JobProcess
from tests.factories import make_job
from topology.models import Host

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def ended(job, *, hours_ago, lasted, state="completed"):
    end = timezone.now() - timedelta(hours=hours_ago)
    start = end - timedelta(hours=lasted)
    GpuAssignment.objects.filter(job=job).update(assigned_at=start, released_at=end)
    Job.objects.filter(pk=job.pk).update(state=state, submitted_at=start, started_at=start, ended_at=end)
    return Job.objects.get(pk=job.pk)


@pytest.fixture
def history(demo):
    Allocation.objects.update(valid_from=timezone.now() - timedelta(days=90))
    done = ended(make_job(user="alice", project="olmo", gpus=16, on_hosts=["hgx-01-h01", "hgx-02-h01"],
                          name="olmo-7b", max_runtime=9000, env={"WANDB_PROJECT": "olmo"}), hours_ago=3, lasted=2)
    for rank, host in enumerate(["hgx-01-h01", "hgx-02-h01"]):
        JobProcess.objects.create(job=done, host=Host.objects.get(name=host), run=0, rank=rank, state="exited",
                                  exit_code=0, output_tail=f"rank {rank}: step 100 loss 2.31\nrank {rank}: done\n")
    failed = ended(make_job(user="bob", project="safety", gpus=8, on_hosts=["hgx-03-h01"]), hours_ago=20, lasted=1,
                   state="failed")
    Job.objects.filter(pk=failed.pk).update(failure_reason="no such directory on hgx-03-h01: /data/evals", exit_code=1)
    make_job(user="alice", project="olmo", gpus=8, on_hosts=["hgx-04-h01"], started=timezone.now() - timedelta(hours=1))
    return {"done": done, "failed": failed}


def assert_clean(visit):
    assert visit.console_errors == []
    assert visit.external_requests() == []


def test_a_researcher_finds_a_job_by_id_reads_every_rank_and_resubmits_it(history, visit):
    visit.login("alice")
    page = visit.page
    page.fill("[data-testid=job-search]", str(history["done"].pk))
    page.press("[data-testid=job-search]", "Enter")
    page.wait_for_url(f"**/jobs/{history['done'].pk}/")
    outputs = page.get_by_test_id("output").all_inner_texts()
    assert [text.strip() for text in outputs] == ["rank 0: step 100 loss 2.31\nrank 0: done",
                                                  "rank 1: step 100 loss 2.31\nrank 1: done"]
    visit.shot("researcher-job-page")
    page.get_by_test_id("resubmit").click()
    page.wait_for_url("**/jobs/new/?from=*")
    assert page.input_value("#f-gpus") == "16" and page.input_value("#f-name") == "olmo-7b"
    assert page.input_value("#f-min-runtime") == "1h" and page.input_value("[name=max_runtime]") == "2h30m"
    assert page.input_value("[name=env]") == "WANDB_PROJECT=olmo"
    visit.shot("researcher-resubmit-form")
    page.fill("#f-name", "olmo-7b-again")
    page.click("button:has-text('Submit')")
    page.wait_for_url(lambda url: "/jobs/new/" not in url)
    job = Job.objects.order_by("-pk").first()
    assert (job.name, job.gpus, job.max_runtime, job.env) == ("olmo-7b-again", 16, 9000, {"WANDB_PROJECT": "olmo"})
    assert page.get_by_test_id("job-state").inner_text() == "pending"
    assert_clean(visit)


def test_a_refused_browser_submission_names_the_field(history, visit):
    visit.login("alice")
    page = visit.page
    visit.goto("/jobs/new/")
    page.fill("#f-gpus", "8")
    page.fill("#f-min-runtime", "9h")
    page.fill("#f-command", "python train.py")
    page.click("button:has-text('Submit')")
    page.wait_for_selector("[data-testid=error-min_runtime]")
    assert page.get_by_test_id("error-min_runtime").inner_text() == "9h is over the cap of gb200-east: 8h"
    assert page.input_value("#f-min-runtime") == "9h" and page.input_value("#f-command") == "python train.py"
    visit.shot("researcher-submit-refused")
    assert_clean(visit)


def test_the_jobs_page_filters_and_exports_csv(history, visit):
    visit.login("olga")  # on-call: everyone's jobs on the cluster
    page = visit.page
    page.click("nav.mainnav a:has-text('Jobs')")
    page.wait_for_url("**/jobs/")
    assert page.locator("[data-testid=history] tbody tr").count() == 0  # olga's own: none
    page.uncheck("input[name=mine]")
    page.select_option("select[name=cluster]", "gb200-east")
    page.fill("input[name=state]", "failed,completed")
    page.click("[data-testid=history-filters] button[type=submit]")
    page.wait_for_url("**/jobs/?*state=failed%2Ccompleted*")
    rows = page.locator("[data-testid=history] tbody tr")
    assert sorted(rows.evaluate_all("rows => rows.map(r => r.dataset.state)")) == ["completed", "failed"]
    assert "no such directory on hgx-03-h01" in page.get_by_test_id("history").inner_text()
    visit.shot("oncall-jobs-page")
    with page.expect_download() as download:
        page.get_by_test_id("history-csv").click()
    text = open(download.value.path(), encoding="utf-8").read()
    assert {row["state"] for row in csv.DictReader(io.StringIO(text))} == {"failed", "completed"}
    assert_clean(visit)


def test_a_manager_reads_usage_over_a_chosen_period(history, visit):
    visit.login("pat")
    page = visit.page
    page.click("nav.mainnav a:has-text('Usage')")
    page.wait_for_url("**/usage/")
    page.select_option("select[name=unit]", "nlp")
    page.fill("input[name=since]", (timezone.localdate() - timedelta(days=2)).isoformat())
    page.click("[data-testid=usage-filters] button[type=submit]")
    page.wait_for_url("**/usage/?*unit=nlp*")
    table = page.get_by_test_id("usage-gb200-east")
    olmo = table.locator("tr[data-unit=olmo]:not([data-user]) td").all_inner_texts()
    assert olmo[0] == "olmo" and float(olmo[1]) == pytest.approx(40, abs=0.2)  # 16 GPUs x 2 h ended + 8 x 1 h running
    assert olmo[4].endswith(" %")
    assert table.locator("tr[data-unit=safety][data-user=bob] td").all_inner_texts()[1] == "8.0"
    visit.shot("manager-usage-page")
    with page.expect_download() as download:
        page.get_by_test_id("usage-csv").click()
    rows = list(csv.DictReader(io.StringIO(open(download.value.path(), encoding="utf-8").read())))
    assert {row["unit"] for row in rows} == {"nlp", "olmo", "tulu", "safety"}
    assert_clean(visit)

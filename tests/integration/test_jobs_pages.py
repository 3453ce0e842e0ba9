"""The Jobs (history), Usage and Submit pages through Django's test client: filters, CSV exports, the job id
search, one input boundary for submissions from the browser, resubmission with the contract prefilled."""

import csv
import io
from datetime import timedelta

import pytest
from django.utils import timezone

from budgets.models import Allocation
from scheduler.models import GpuAssignment, Job, JobProcess
from scheduler.tick import run_tick
from tests.conftest import get_user
from tests.factories import make_job
from topology.models import Cluster, Host

pytestmark = pytest.mark.django_db


def as_user(client, username):
    client.force_login(get_user(username))
    return client


def ended(job, *, hours_ago, lasted, state="completed"):
    end = timezone.now() - timedelta(hours=hours_ago)
    start = end - timedelta(hours=lasted)
    GpuAssignment.objects.filter(job=job).update(assigned_at=start, released_at=end)
    Job.objects.filter(pk=job.pk).update(state=state, submitted_at=start, started_at=start, ended_at=end)
    return Job.objects.get(pk=job.pk)


@pytest.fixture
def jobs(demo):
    Allocation.objects.update(valid_from=timezone.now() - timedelta(days=90))
    return {
        "alice": ended(make_job(user="alice", project="olmo", gpus=8, on_hosts=["hgx-01-h01"]), hours_ago=5, lasted=2),
        "bob": ended(make_job(user="bob", project="safety", gpus=8, on_hosts=["hgx-02-h01"]), hours_ago=30, lasted=1,
                     state="failed"),
        "old": ended(make_job(user="alice", project="olmo", gpus=1, on_hosts=["hgx-03-h01"]), hours_ago=24 * 20,
                     lasted=1),
        "carol": make_job(user="carol", project="tulu", gpus=4),
    }


def listed(response) -> set[int]:
    return {job.pk for job, _ in response.context["jobs"]}


def test_the_jobs_page_shows_my_last_week_by_default(client, jobs):
    response = as_user(client, "alice").get("/jobs/")
    assert response.status_code == 200
    assert listed(response) == {jobs["alice"].pk}
    assert "times in UTC" in response.content.decode()


def test_the_jobs_page_filters_by_state_unit_user_and_dates(client, jobs):
    client = as_user(client, "pat")
    assert listed(client.get("/jobs/", {"unit": "nlp"})) == {jobs["alice"].pk, jobs["bob"].pk, jobs["old"].pk,
                                                              jobs["carol"].pk}
    assert listed(client.get("/jobs/", {"state": "failed,pending"})) == {jobs["bob"].pk, jobs["carol"].pk}
    since = (timezone.localdate() - timedelta(days=2)).isoformat()
    assert listed(client.get("/jobs/", {"user": "alice", "since": since})) == {jobs["alice"].pk}
    response = client.get("/jobs/", {"state": "done"})
    assert response.status_code == 200 and "state: unknown state done: use one or more of pending" in \
        response.content.decode()
    assert "unit: no unit named &#x27;nope&#x27;" in client.get("/jobs/", {"unit": "nope"}).content.decode()


def test_the_jobs_page_exports_the_selection_as_csv(client, jobs):
    response = as_user(client, "lee").get("/jobs/", {"unit": "olmo", "format": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [int(row["id"]) for row in rows] == [jobs["old"].pk, jobs["alice"].pk]  # newest first
    assert rows[1]["elapsed_seconds"] == "7200" and rows[1]["state"] == "completed"


def test_the_job_search_goes_to_the_job_or_says_there_is_none(client, jobs):
    client = as_user(client, "alice")
    response = client.get("/jobs/", {"id": str(jobs["bob"].pk)})
    assert response.status_code == 302 and response["Location"] == f"/jobs/{jobs['bob'].pk}/"
    response = client.get("/jobs/", {"id": "999999"}, follow=True)
    assert "No job 999999" in response.content.decode()
    response = client.get("/jobs/", {"id": "x" * 5000}, follow=True)
    assert response.status_code == 200 and "No job " + "x" * 40 + ":" in response.content.decode()
    assert 'data-testid="job-search"' in client.get("/queue/", follow=True).content.decode()


def test_the_usage_page_reports_a_chosen_period_and_exports_csv(client, jobs):
    client = as_user(client, "pat")
    since = (timezone.localdate() - timedelta(days=3)).isoformat()
    response = client.get("/usage/", {"since": since, "unit": "nlp"})
    assert response.status_code == 200
    units = {row["unit"]: row for row in response.context["report"]["clusters"][0]["units"]}
    assert units["olmo"]["allocated_gpu_hours"] == pytest.approx(16)
    assert units["safety"]["allocated_gpu_hours"] == pytest.approx(8)
    assert units["nlp"]["allocated_gpu_hours"] == pytest.approx(24)
    assert [user["user"] for user in units["nlp"]["users"]] == ["alice", "bob"]
    assert "molmo" not in units
    rows = list(csv.DictReader(io.StringIO(client.get("/usage/", {"since": since, "unit": "nlp", "format": "csv"})
                                           .content.decode())))
    olmo = next(row for row in rows if row["unit"] == "olmo" and not row["user"])
    assert float(olmo["allocated_gpu_hours"]) == pytest.approx(16) and olmo["parent"] == "nlp"
    response = client.get("/usage/", {"since": "2026-02-30"})
    assert response.status_code == 200 and "since: not a time" in response.content.decode()


def test_submit_from_the_browser_goes_through_the_api_s_checks(client, demo):
    client = as_user(client, "alice")
    page = client.get("/jobs/new/")
    assert page.status_code == 200 and page.context["projects"] == ["olmo"]  # the projects alice belongs to
    response = client.post("/jobs/new/", {
        "cluster": "gb200-east", "project": "olmo", "gpus": "8", "min_runtime": "90", "max_runtime": "1-00:00:00",
        "resumable": "on", "topology": "any", "priority": "normal", "gpu_milli": "1000", "cpus": "0",
        "memory_gib": "0", "name": "from-the-browser", "command": "python train.py --lr 3e-4",
        "env": "WANDB_PROJECT=olmo\nHF_HOME=/data/hf",
    })
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert (job.min_runtime, job.max_runtime, job.resumable, job.name, job.user.username) == (
        5400, 86400, True, "from-the-browser", "alice")
    assert job.env == {"WANDB_PROJECT": "olmo", "HF_HOME": "/data/hf"}
    assert job.events.get(kind="submit").actor == "alice"


def test_a_refused_submission_names_the_field_and_keeps_what_was_typed(client, demo):
    client = as_user(client, "alice")
    base = {"cluster": "gb200-east", "project": "olmo", "gpus": "8", "topology": "any", "priority": "normal",
            "gpu_milli": "1000", "cpus": "0", "memory_gib": "0", "command": "python train.py"}
    response = client.post("/jobs/new/", {**base, "min_runtime": "9h"})
    assert response.status_code == 200 and Job.objects.count() == 0
    assert response.context["errors"] == {"min_runtime": ["9h is over the cap of gb200-east: 8h"]}
    assert 'value="9h"' in response.content.decode()
    response = client.post("/jobs/new/", {**base, "min_runtime": "-5m"})
    assert "-5m is negative" in response.context["errors"]["min_runtime"][0]
    response = client.post("/jobs/new/", {**base, "min_runtime": "1h", "gpus": "two"})
    assert response.context["errors"] == {"gpus": ["A valid integer is required."]}
    response = client.post("/jobs/new/", {**base, "min_runtime": "1h", "project": "molmo"})
    assert "project" in response.context["errors"] and Job.objects.count() == 0
    response = client.post("/jobs/new/", {**base, "min_runtime": "1h", "env": "no equals sign"})
    assert response.context["errors"] == {"env": ["line 1: expected NAME=VALUE"]}


def test_resubmit_prefills_an_ended_job_s_contract(client, jobs):
    client = as_user(client, "alice")
    source = jobs["alice"]
    Job.objects.filter(pk=source.pk).update(max_runtime=9000, env={"A": "1"}, name="run-1")
    page = client.get(f"/jobs/{source.pk}/")
    assert f'href="/jobs/new/?from={source.pk}"' in page.content.decode()
    form = client.get("/jobs/new/", {"from": source.pk})
    values = form.context["values"]
    assert (values["gpus"], values["min_runtime"], values["max_runtime"], values["env"], values["name"]) == (
        8, "1h", "2h30m", "A=1", "run-1")
    assert 'value="2h30m"' in form.content.decode()
    assert as_user(client, "bob").get("/jobs/new/", {"from": source.pk}).status_code == 404  # not bob's


def test_the_job_page_shows_every_rank_of_any_run(client, demo):
    job = make_job(user="alice", project="olmo", gpus=16, on_hosts=["hgx-01-h01", "hgx-02-h01"])
    for run in (0, 1):
        for rank, host in enumerate(["hgx-01-h01", "hgx-02-h01"]):
            JobProcess.objects.create(job=job, host=Host.objects.get(name=host), run=run, rank=rank, state="exited",
                                      output_tail=f"run {run} rank {rank} says hello")
    Job.objects.filter(pk=job.pk).update(restarts=1)
    body = as_user(client, "alice").get(f"/jobs/{job.pk}/").content.decode()
    assert "run 1 rank 0 says hello" in body and "run 1 rank 1 says hello" in body and "run 0" not in body
    body = client.get(f"/jobs/{job.pk}/", {"run": "0"}).content.decode()
    assert "run 0 rank 0 says hello" in body and "run 0 rank 1 says hello" in body


def test_the_jobs_page_pages_through_a_long_history(client, demo):
    for _ in range(205):
        make_job(user="alice", project="olmo", state="completed")
    client = as_user(client, "alice")
    first = client.get("/jobs/", {"mine": "on"})
    newest = max(job.pk for job in Job.objects.all())
    assert len(first.context["jobs"]) == 200 and first.context["jobs"][0][0].pk == newest
    assert "1–200 shown" in first.content.decode() and "page=2" in first.content.decode()
    second = client.get("/jobs/", {"mine": "on", "page": "2"})
    assert [job.pk for job, _ in second.context["jobs"]] == sorted(Job.objects.values_list("pk", flat=True))[:5][::-1]
    assert client.get("/jobs/", {"mine": "on", "page": "x"}).context["page"] == 1


def test_a_simulated_job_s_ranks_run_from_its_start_and_the_page_says_so_in_one_line(client, demo):
    # A real tick starts a 16-GPU job on two hosts of the simulated demo cluster: no agent will report its ranks
    # started, so they are running from the tick that started the job, numbered by host name.
    job = make_job(user="alice", project="olmo", gpus=16, gpus_per_host=8)
    run_tick(Cluster.objects.get(name="gb200-east"))
    job.refresh_from_db()
    assert job.state == "running"
    ranks = list(job.processes.order_by("rank").values_list("rank", "host__name", "state"))
    assert [state for _, _, state in ranks] == ["running", "running"]
    assert [host for _, host, _ in ranks] == sorted(host for _, host, _ in ranks)

    body = as_user(client, "alice").get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-testid="simulated-ranks">2 ranks, one per host on ' in body
    assert "(running): a simulated cluster runs no processes" in body
    assert 'data-testid="output"' not in body

"""Job history (`allot history`, sacct), usage reports (`allot usage`, sreport) and logs (`allot logs`), through
the API and the CLI against a live server."""

import csv
import io
import json
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from budgets.models import Allocation
from client.cli import main, new_text
from scheduler.models import GpuAssignment, Job, JobProcess
from tests.conftest import get_user
from tests.factories import make_job
from topology.models import Host

pytestmark = pytest.mark.django_db(transaction=True)
HEALTHY = 348  # the demo's healthy GPUs: 4 × 72 + 8 × 8, less the failed tray's 4


@pytest.fixture
def cli(demo, live_server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("ALLOT_SERVER", live_server.url)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("ALLOT_TOKEN", raising=False)

    def run(*argv, user=None):
        if user:
            monkeypatch.setattr(sys, "stdin", io.StringIO("allot-demo\n"))
            assert main(["login", "-u", user, "--password-stdin"]) == 0
            capsys.readouterr()
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def ended(job, *, hours_ago: float, lasted: float, state="completed"):
    """Move `job`'s run into the past: it ran `lasted` hours, ending `hours_ago` hours ago."""
    end = timezone.now() - timedelta(hours=hours_ago)
    start = end - timedelta(hours=lasted)
    GpuAssignment.objects.filter(job=job).update(assigned_at=start, released_at=end)
    Job.objects.filter(pk=job.pk).update(state=state, submitted_at=start - timedelta(minutes=5), started_at=start,
                                         run_started_at=start, ended_at=end)
    return Job.objects.get(pk=job.pk)


@pytest.fixture
def past(demo):
    """alice: olmo, 8 GPUs for 2 h ending 1 day ago; bob: olmo 4 unallocated GPUs for 1 h ending 2 days ago and a
    failed safety job 40 days ago; a running job of alice's. The shares have held for 90 days."""
    Allocation.objects.update(valid_from=timezone.now() - timedelta(days=90))
    jobs = {
        "alice_done": ended(make_job(project="olmo", user="alice", gpus=8, on_hosts=["hgx-01-h01"]),
                            hours_ago=24, lasted=2),
        "bob_free": ended(make_job(project="olmo", user="bob", gpus=4, min_runtime=0, on_hosts=["hgx-02-h01"]),
                          hours_ago=48, lasted=1),
        "bob_old": ended(make_job(project="safety", user="bob", gpus=8, on_hosts=["hgx-03-h01"]),
                         hours_ago=40 * 24, lasted=1, state="failed"),
    }
    jobs["alice_running"] = make_job(project="olmo", user="alice", gpus=1, on_hosts=["hgx-04-h01"],
                                     started=timezone.now() - timedelta(minutes=30))
    return jobs


def ids(out: str) -> set[int]:
    return {int(line.split()[0]) for line in out.splitlines() if line.split() and line.split()[0].isdigit()}


def test_history_is_mine_by_default_over_the_last_week(cli, past):
    code, out, err = cli("history", user="alice")
    assert code == 0, err
    assert ids(out) == {past["alice_done"].pk, past["alice_running"].pk}
    assert out.splitlines()[0].split()[:6] == ["ID", "NAME", "CLUSTER", "PROJECT", "USER", "STATE"]
    assert "jobs; times in" in out


def test_history_filters_by_state_period_user_project_and_unit(cli, past):
    cli("queue", user="lee")
    _, out, _ = cli("sacct", "--all-users", "--state", "completed")
    assert ids(out) == {past["alice_done"].pk, past["bob_free"].pk}
    _, out, _ = cli("history", "--user", "bob", "--since", "60d")
    assert ids(out) == {past["bob_free"].pk, past["bob_old"].pk}
    _, out, _ = cli("history", "--user", "bob", "--since", "60d", "--until", "30d")
    assert ids(out) == {past["bob_old"].pk}
    _, out, _ = cli("history", "--unit", "safety", "--since", "60d", "--state", "failed,completed")
    assert ids(out) == {past["bob_old"].pk}
    _, out, _ = cli("history", "--unit", "nlp", "--since", "60d", "--state", "running")
    assert ids(out) == {past["alice_running"].pk}
    _, out, _ = cli("history", "--project", "olmo")
    assert ids(out) == {past["alice_done"].pk, past["bob_free"].pk, past["alice_running"].pk}
    code, _, err = cli("history", "--unit", "nope")
    assert code == 1 and err == "allot: unit: no unit named 'nope'\n"
    code, _, err = cli("history", "--since", "last tuesday")
    assert code == 2 and err.startswith("allot: --since: 'last tuesday' is not a time")


def test_history_of_my_projects_and_as_csv(cli, past):
    code, out, _ = cli("history", "--my-projects", "--since", "60d", "--csv", user="bob")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {int(row["ID"]) for row in rows} == {job.pk for job in past.values()}  # bob is in olmo and safety
    done = next(row for row in rows if int(row["ID"]) == past["alice_done"].pk)
    assert (done["STATE"], done["ELAPSED"], done["USER"]) == ("completed", "2h", "alice")


def test_the_api_filters_the_job_list_by_period_and_refuses_a_bad_time(api, past):
    client = api.as_user(get_user("alice"))
    since = (timezone.now() - timedelta(hours=30)).isoformat()
    body = client.get("/api/v1/jobs/", {"since": since, "unit": "olmo"}).json()
    assert {row["id"] for row in body["results"]} == {past["alice_done"].pk, past["alice_running"].pk}
    response = client.get("/api/v1/jobs/", {"since": "yesterday"})
    assert response.status_code == 400 and "since" in response.json()
    assert "2026-11-01T09:00" in response.json()["since"][0]


def test_usage_by_unit_and_user_against_entitlement(cli, past, api):
    code, out, err = cli("usage", "--unit", "olmo", "--since", "30d", user="alice")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("GPU-hours from ") and "(30d)" in lines[0]
    olmo = next(line for line in lines if line.split()[1:3] == ["olmo", "-"]).split()
    # 16 allocated GPU-hours by alice (+0.5 running), 4 free ones by bob; entitled 33 % of 348 GPUs for 30 days
    entitled = 0.33 * HEALTHY * 30 * 24
    assert float(olmo[3]) == pytest.approx(16.5, abs=0.1) and olmo[4] == "4.0"
    assert float(olmo[5].replace(",", "")) == pytest.approx(entitled, rel=0.01)
    assert olmo[6] == f"{100 * 16.5 / entitled:.1f}%"
    alice = next(line for line in lines if line.split()[1:3] == ["olmo", "alice"]).split()
    bob = next(line for line in lines if line.split()[1:3] == ["olmo", "bob"]).split()
    assert (float(alice[3]), bob[3], bob[4]) == (pytest.approx(16.5, abs=0.1), "0.0", "4.0")

    report = api.as_user(get_user("pat")).get("/api/v1/usage/", {"unit": "nlp"}).json()
    units = {row["unit"]: row for row in report["clusters"][0]["units"]}
    assert set(units) == {"nlp", "olmo", "tulu", "safety"}
    assert units["nlp"]["allocated_gpu_hours"] == pytest.approx(16.5, abs=0.1)  # bob's failed run is 40 days old
    assert units["nlp"]["depth"] == 0 and units["olmo"]["depth"] == 1
    response = api.get("/api/v1/usage/", {"since": "2026-13-01"})
    assert response.status_code == 400 and "since" in response.json()
    response = api.get("/api/v1/usage/", {"since": "2020-01-01"})
    assert response.json() == {"since": ["a report covers at most 400 days"]}


def test_usage_as_csv(cli, past):
    code, out, _ = cli("usage", "--unit", "nlp", "--since", "60d", "--csv", user="alice")
    rows = list(csv.DictReader(io.StringIO(out)))
    safety = next(row for row in rows if row["UNIT"] == "safety" and row["USER"] == "-")
    assert float(safety["ALLOCATED"]) == 8.0  # bob's run 40 days ago, inside these 60 days
    assert float(safety["ENTITLED"]) == pytest.approx(0.6 * 0.15 * HEALTHY * 60 * 24, rel=0.01)


@pytest.fixture
def two_ranks(demo):
    job = make_job(project="olmo", user="alice", gpus=16, on_hosts=["hgx-01-h01", "hgx-02-h01"])
    for rank, host in enumerate(["hgx-01-h01", "hgx-02-h01"]):
        JobProcess.objects.create(job=job, host=Host.objects.get(name=host), run=0, rank=rank, state="running",
                                  output_tail=f"rank {rank} step 1\nrank {rank} step 2\n")
    JobProcess.objects.create(job=job, host=Host.objects.get(name="hgx-01-h01"), run=1, rank=0, state="running",
                              output_tail="second run\n")
    Job.objects.filter(pk=job.pk).update(restarts=1)
    return job


def test_logs_print_every_rank_or_one(cli, two_ranks):
    JobProcess.objects.filter(run=1).delete()
    Job.objects.filter(pk=two_ranks.pk).update(restarts=0, state="completed")
    code, out, _ = cli("logs", str(two_ranks.pk), user="alice")
    assert code == 0
    assert out.splitlines() == ["[rank 0 hgx-01-h01] rank 0 step 1", "[rank 0 hgx-01-h01] rank 0 step 2",
                                "[rank 1 hgx-02-h01] rank 1 step 1", "[rank 1 hgx-02-h01] rank 1 step 2"]
    code, out, _ = cli("logs", str(two_ranks.pk), "--rank", "1")
    assert out == "rank 1 step 1\nrank 1 step 2\n"


def test_logs_of_an_earlier_run_and_who_may_read_them(cli, two_ranks, api):
    code, out, _ = cli("logs", str(two_ranks.pk), user="alice")
    assert out == "second run\n"
    code, out, _ = cli("logs", str(two_ranks.pk), "--run", "0", "--rank", "0")
    assert out == "rank 0 step 1\nrank 0 step 2\n"
    code, _, err = cli("logs", str(two_ranks.pk), user="carol")
    assert code == 1 and "output is shown to alice, managers of olmo, on-call and admins" in err
    response = api.as_user(get_user("alice")).get(f"/api/v1/jobs/{two_ranks.pk}/logs/", {"rank": "-1"})
    assert response.status_code == 400 and response.json() == {"rank": ["a whole number from 0, got '-1'"]}


def test_logs_follow_prints_new_lines_until_the_job_ends(cli, two_ranks, monkeypatch):
    JobProcess.objects.filter(run=0, rank=1).delete()
    process = JobProcess.objects.get(run=1)
    polls = iter([
        ("second run\nstep 2\npart", "running"),
        ("second run\nstep 2\npartial line\nstep 3\n", "completed"),
    ])

    def advance(seconds):
        tail, state = next(polls)
        JobProcess.objects.filter(pk=process.pk).update(output_tail=tail)
        Job.objects.filter(pk=two_ranks.pk).update(state=state)

    monkeypatch.setattr("client.cli.pause", advance)
    code, out, _ = cli("logs", str(two_ranks.pk), "-f", user="alice")
    assert code == 0
    assert out == "second run\nstep 2\npartial line\nstep 3\n"  # each line once, the partial one when whole


@pytest.mark.parametrize("before, after, new, lost", [
    ("a\nb\n", "a\nb\nc\n", "c\n", False),
    ("x" * 300 + "tail-1\n", "x" * 250 + "tail-1\nnext\n", "next\n", False),  # the tail slid
    ("old\n", "completely new\n", "completely new\n", True),
    ("", "first\n", "first\n", False),
])
def test_following_a_sliding_tail_prints_only_what_is_new(before, after, new, lost):
    assert new_text(before, after) == (new, lost)


def test_the_history_endpoint_does_not_need_a_query_per_job(api, demo, django_assert_max_num_queries):
    for _ in range(30):
        make_job(project="olmo", user="alice", state="completed")
    client = api.as_user(get_user("alice"))
    client.get("/api/v1/jobs/", {"mine": "1"})
    with django_assert_max_num_queries(12):
        body = client.get("/api/v1/jobs/", {"mine": "1", "state": "completed", "unit": "nlp"}).json()
    assert body["count"] == 30
    assert json.dumps(body)  # serialisable as is


def test_the_usage_report_costs_a_fixed_number_of_queries(api, demo, django_assert_max_num_queries):
    client = api.as_user(get_user("pat"))
    for hours in range(1, 6):
        ended(make_job(project="olmo", user="alice", gpus=8, on_hosts=["hgx-01-h01"]), hours_ago=hours * 3, lasted=1)
        ended(make_job(project="pixmo", user="dan", gpus=8, on_hosts=["hgx-02-h01"]), hours_ago=hours * 3, lasted=1)
    client.get("/api/v1/usage/")
    with django_assert_max_num_queries(14) as queries:
        body = client.get("/api/v1/usage/").json()
    units = {row["unit"]: row for row in body["clusters"][0]["units"]}
    assert units["olmo"]["allocated_gpu_hours"] == pytest.approx(40)
    assert units["multimodal"]["users"] == [{"user": "dan", "allocated_gpu_hours": 40.0, "unallocated_gpu_hours": 0.0}]
    print(f"usage report: {len(queries)} queries")

"""The jobs API of FORMATS.md: submit with every refusal of DESIGN.md §7, read, cancel, permissions."""

import pytest

from scheduler.choices import JobState
from scheduler.models import Job
from scheduler.tick import run_tick
from tests.conftest import get_user
from tests.factories import make_job

pytestmark = pytest.mark.django_db

GOOD = {
    "cluster": "gb200-east", "project": "olmo", "gpus": 8, "min_runtime": 7200, "resumable": True,
    "command": "python train.py", "topology": "any",
}


def submit(api, user="alice", **changes):
    return api.as_user(get_user(user)).post("/api/v1/jobs/", {**GOOD, **changes}, format="json")


def test_a_member_submits_and_reads_the_job_back(demo, api):
    response = submit(api)
    assert response.status_code == 201, response.json()
    job = response.json()
    assert (job["state"], job["cluster"], job["project"], job["user"]) == ("pending", "gb200-east", "olmo", "alice")
    assert job["allocation"] == "allocated" and job["gpus"] == 8 and job["min_runtime"] == 7200
    assert [event["kind"] for event in job["events"]] == ["submit"]
    assert "protected for 2h" in job["events"][0]["detail"]

    detail = api.get(f"/api/v1/jobs/{job['id']}/").json()
    for key in ("queue_position", "pending_reason", "estimated_start", "gpu_ids", "submitted_at", "started_at",
                "ended_at", "preemptions", "events"):
        assert key in detail


def test_min_runtime_zero_is_unallocated(demo, api):
    job = submit(api, min_runtime=0).json()
    assert job["allocation"] == "unallocated"
    assert "free, preemptible" in job["events"][0]["detail"]


@pytest.mark.parametrize(
    "changes, field, message",
    [
        ({"gpus": -1}, "gpus", "greater than or equal to 1"),
        ({"gpus": 0}, "gpus", "greater than or equal to 1"),
        ({"gpus": 80, "topology": "domain"}, "gpus", "the largest domain of gb200-east holds 72"),
        ({"gpus": 1000}, "gpus", "more than gb200-east has (352)"),
        ({"min_runtime": 9 * 3600}, "min_runtime", "9h is over the cap of gb200-east: 8h"),
        ({"project": "atlas"}, "project", "no project named 'atlas'"),
        ({"project": "tulu"}, "project", "you are not a member of tulu"),
        ({"project": "nlp"}, "project", "nlp is not a project"),
        ({"cluster": "h100-west"}, "cluster", "no cluster named 'h100-west'"),
        ({"gpu_type": "A100"}, "gpu_type", "gb200-east has no A100 GPUs (it has GB200, H100)"),
        ({"gpus": 2, "gpu_milli": 500}, "gpu_milli", "only for a 1-GPU job"),
        ({"gpus": 8, "gpus_per_host": 3}, "gpus_per_host", "8 GPUs do not split evenly into hosts of 3"),
        ({"gpus": 16, "gpus_per_host": 16}, "gpus_per_host", "no host of gb200-east has more than 8 GPUs"),
        ({"max_runtime": 60}, "max_runtime", "at least the minimum runtime (2h)"),
        ({"topology": "rack"}, "topology", "not a valid choice"),
        ({"resumable": None}, "resumable", "may not be null"),
        ({"command": ""}, "command", "required: the agent runs this command"),
        ({"cpus": 100000}, "cpus", "more than 1 host(s) of gb200-east have (224 per host)"),
    ],
)
def test_every_bad_submission_gets_a_400_naming_the_field(demo, api, changes, field, message):
    if field == "command":
        demo.executor = "agent"
        demo.save()
    response = submit(api, **changes)
    assert response.status_code == 400
    assert message in " ".join(response.json()[field])
    assert not Job.objects.exists()


def test_an_allocated_job_needs_an_allocation_on_the_cluster(demo, api):
    from budgets.models import Allocation, Unit

    Allocation.objects.filter(unit=Unit.objects.get(name="olmo")).delete()
    response = submit(api)
    assert response.status_code == 400
    assert "olmo has no allocation on gb200-east: submit with min_runtime 0" in response.json()["min_runtime"][0]
    assert submit(api, min_runtime=0).status_code == 201


def test_the_list_filters_and_shows_positions_in_the_cluster_and_the_project(demo, api):
    for _ in range(3):
        submit(api, gpus=72, topology="domain")
    submit(api, user="carol", project="tulu", gpus=72, topology="domain")
    run_tick(demo)
    pending = api.get("/api/v1/jobs/?state=pending&cluster=gb200-east").json()["results"]
    positions = [job["queue_position"] for job in pending]
    assert positions == sorted(positions) and None not in positions
    olmo = [job for job in pending if job["project"] == "olmo"]
    assert [job["project_position"] for job in olmo] == list(range(1, len(olmo) + 1))
    mine = api.as_user(get_user("carol")).get("/api/v1/jobs/?mine=1").json()["results"]
    assert {job["user"] for job in mine} == {"carol"}


def test_others_see_a_job_but_not_its_command(demo, api):
    job = submit(api, command="python secret_idea.py").json()
    seen_by_carol = api.as_user(get_user("carol")).get(f"/api/v1/jobs/{job['id']}/").json()
    assert seen_by_carol["command"] is None and seen_by_carol["output"] == []
    assert api.as_user(get_user("lee")).get(f"/api/v1/jobs/{job['id']}/").json()["command"] == "python secret_idea.py"


def test_a_user_cancels_their_own_job_but_not_another_s(demo, api):
    job = submit(api).json()
    refused = api.as_user(get_user("carol")).post(f"/api/v1/jobs/{job['id']}/cancel/", {}, format="json")
    assert refused.status_code == 403 and "only they or a manager of olmo" in refused.json()["detail"]
    assert Job.objects.get(pk=job["id"]).state == JobState.PENDING

    done = api.as_user(get_user("alice")).post(f"/api/v1/jobs/{job['id']}/cancel/", {"reason": "typo"}, format="json")
    assert done.status_code == 200 and done.json()["state"] == "cancelled"
    assert done.json()["events"][-1]["detail"] == "cancelled by alice: typo"
    again = api.post(f"/api/v1/jobs/{job['id']}/cancel/", {}, format="json")
    assert again.status_code == 409


def test_a_manager_of_the_project_may_cancel(demo, api):
    job = submit(api).json()
    response = api.as_user(get_user("pat")).post(f"/api/v1/jobs/{job['id']}/cancel/", {}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"


def test_cancelling_a_running_job_stops_it_then_ends_it(demo, api):
    job = make_job(gpus=8, on_hosts=["hgx-01-h01"])
    response = api.as_user(get_user("alice")).post(f"/api/v1/jobs/{job.pk}/cancel/", {}, format="json")
    assert response.json()["state"] == "running" and response.json()["stop_cause"] == "cancel"
    run_tick(demo)  # the simulated executor stops it at once
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert not job.assignments.filter(released_at__isnull=True).exists()


def test_an_agent_token_cannot_call_researcher_endpoints(demo, api):
    from topology.models import AgentToken, Host

    token = AgentToken.for_host(Host.objects.get(name="hgx-01-h01"))
    api.credentials(HTTP_AUTHORIZATION=f"Agent {token.key}")
    assert api.get("/api/v1/jobs/").status_code == 401
    assert api.post("/api/v1/jobs/", GOOD, format="json").status_code == 401

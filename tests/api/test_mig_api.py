"""MIG through the API: `mig_profile` accepted, refused with a 400 naming it, shown on jobs and hosts."""

import pytest

from scheduler.tick import run_tick
from tests.conftest import get_user
from topology.models import Gpu

pytestmark = pytest.mark.django_db

HOST = "hgx-08-h01"
GOOD = {
    "cluster": "gb200-east", "project": "olmo", "gpus": 1, "min_runtime": 3600, "resumable": True,
    "command": "python serve.py", "mig_profile": "1g.10gb",
}


@pytest.fixture
def mig(demo):
    Gpu.objects.filter(host__name=HOST, index__in=[0, 1]).update(mig_enabled=True)
    return demo


def submit(api, **changes):
    return api.as_user(get_user("alice")).post("/api/v1/jobs/", {**GOOD, **changes}, format="json")


def test_a_mig_job_is_accepted_placed_and_shown(mig, api):
    response = submit(api)
    assert response.status_code == 201, response.json()
    job = response.json()
    assert (job["mig_profile"], job["gpus"], job["gpu_milli"]) == ("1g.10gb", 1, 1000)
    assert job["events"][0]["detail"].startswith("a 1g.10gb MIG instance on gb200-east")
    run_tick(mig)
    job = api.get(f"/api/v1/jobs/{job['id']}/").json()
    assert job["state"] == "running" and job["gpu_ids"] == [f"{HOST}:0/1g.10gb@6"] and job["hosts"] == [HOST]
    listed = api.get("/api/v1/jobs/?state=running").json()["results"]
    assert [(j["id"], j["mig_profile"]) for j in listed] == [(job["id"], "1g.10gb")]
    host = api.get(f"/api/v1/hosts/{HOST}/").json()
    gpus = {gpu["index"]: gpu for gpu in host["gpus"]}
    assert gpus[0]["mig"] and gpus[0]["mig_instances"] == [{"profile": "1g.10gb", "start": 6, "job": job["id"]}]
    assert gpus[1]["mig"] and gpus[1]["mig_instances"] == [] and not gpus[2]["mig"]


def test_without_a_profile_nothing_changes(mig, api):
    response = submit(api, mig_profile="")
    assert response.status_code == 201 and response.json()["mig_profile"] == ""
    del GOOD["mig_profile"]
    try:
        assert submit(api).status_code == 201
    finally:
        GOOD["mig_profile"] = "1g.10gb"


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"mig_profile": "2g.10gb"}, "'2g.10gb' is not a MIG profile; one of 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, "
                                     "4g.40gb, 7g.80gb"),
        ({"mig_profile": "x" * 17}, "no more than 16 characters"),
        ({"gpus": 2}, "a MIG instance is a slice of one GPU: gpus must be 1, got 2"),
        ({"gpu_milli": 500}, "a MIG instance and a fraction of a GPU (gpu_milli 500) exclude each other"),
        ({"gpu_type": "GB200"}, "gb200-east has no GB200 GPU in MIG mode (its MIG GPUs are H100)"),
    ],
)
def test_a_bad_mig_request_is_a_400_naming_mig_profile(mig, api, changes, message):
    response = submit(api, **changes)
    assert response.status_code == 400, response.json()
    body = response.json()
    assert "mig_profile" in body, body
    assert any(message in text for text in body["mig_profile"]), body


def test_a_cluster_without_mig_gpus_refuses_mig_jobs(demo, api):
    response = submit(api)
    assert response.status_code == 400
    assert response.json() == {"mig_profile": ["gb200-east has no GPU in MIG mode"]}


@pytest.mark.parametrize("value", [None, 7, ["1g.10gb"], {"profile": "1g.10gb"}])
def test_a_mig_profile_of_the_wrong_kind_is_a_400_not_a_500(mig, api, value):
    response = submit(api, mig_profile=value)
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["mig_profile"]

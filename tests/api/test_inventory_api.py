"""The read API for clusters, hosts and units: token auth per FORMATS.md, real data."""

import pytest

from tests.conftest import get_user
from tests.factories import make_job

pytestmark = pytest.mark.django_db

READ_ENDPOINTS = [
    "/api/v1/clusters/", "/api/v1/clusters/gb200-east/", "/api/v1/hosts/", "/api/v1/hosts/hgx-01-h01/",
    "/api/v1/units/", "/api/v1/units/olmo/",
]


@pytest.mark.parametrize("path", READ_ENDPOINTS)
def test_the_api_requires_authentication(demo, api, path):
    response = api.get(path)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Token")


def test_a_token_is_issued_for_a_username_and_password(demo, api):
    response = api.post("/api/v1/auth/token/", {"username": "alice", "password": "allot-demo"}, format="json")
    assert response.status_code == 200
    token = response.json()["token"]
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert api.get("/api/v1/clusters/").status_code == 200

    refused = api.post("/api/v1/auth/token/", {"username": "alice", "password": "wrong"}, format="json")
    assert refused.status_code == 400 and "non_field_errors" in refused.json()


def test_a_cluster_shows_its_policy_capacity_occupancy_and_demand(demo, api):
    make_job(gpus=8, on_hosts=["hgx-01-h01"])  # allocated, running
    make_job(gpus=4, min_runtime=0, on_hosts=["hgx-02-h01"])  # unallocated, running
    make_job(gpus=16)  # pending
    body = api.as_user(get_user("alice")).get("/api/v1/clusters/gb200-east/").json()

    assert body["name"] == "gb200-east" and body["executor"] == "simulated"
    assert body["policy"]["max_min_runtime"] == 8 * 3600 and body["policy"]["fast_lane_gpus"] == 8
    capacity = body["capacity"]
    assert (capacity["total_gpus"], capacity["healthy_gpus"]) == (352, 348)
    assert capacity["gpus_by_state"] == {"allocated": 8, "unallocated": 4, "idle": 336, "unavailable": 4}
    assert capacity["largest_healthy_domain"] == 72
    assert capacity["pending"] == {"jobs": 1, "allocated_gpus": 16, "unallocated_gpus": 0, "gpus": 16}


def test_a_host_lists_its_gpus_and_who_holds_them(demo, api):
    job = make_job(gpus=2, on_hosts=["nvl72-01-h01"])
    body = api.as_user(get_user("bob")).get("/api/v1/hosts/nvl72-01-h01/").json()
    assert (body["cluster"], body["domain"], body["block"], body["position"]) == (
        "gb200-east", "nvl72-01", "spine-a", 1)
    assert [gpu["state"] for gpu in body["gpus"]] == ["allocated", "allocated", "idle", "idle"]
    assert body["gpus"][0]["jobs"] == [{"job": job.pk, "project": "olmo", "gpu_milli": 1000, "allocated": True}]

    down = api.get("/api/v1/hosts/?state=down").json()["results"]
    assert [host["name"] for host in down] == ["nvl72-03-h07"]
    assert down[0]["state_reason"] == "listed in unhealthy_hosts of the cluster file"


def test_a_unit_shows_its_place_people_and_shares(demo, api):
    body = api.as_user(get_user("alice")).get("/api/v1/units/olmo/").json()
    assert (body["parent"], body["children"], body["managers"], body["members"]) == (
        "nlp", [], ["lee"], ["alice", "bob"])
    share = body["shares"]["gb200-east"]
    assert share["percent_of_parent"] == 55.0
    assert share["fraction_of_cluster"] == pytest.approx(0.33)
    assert share["gpu_hours_per_week"] == pytest.approx(0.33 * 348 * 168, abs=0.1)
    nlp = api.get("/api/v1/units/nlp/").json()
    assert sorted(nlp["children"]) == ["olmo", "safety", "tulu"]


def test_the_schema_and_its_docs_are_served_locally(demo, client):
    client.force_login(get_user("alice"))
    schema = client.get("/api/schema/")
    assert schema.status_code == 200 and b"/api/v1/clusters/" in schema.content
    docs = client.get("/api/docs/").content.decode()
    assert "swagger-ui" in docs and "cdn" not in docs.lower() and "//unpkg" not in docs

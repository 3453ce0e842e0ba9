"""`/api/v1/budget-requests/<id>/what-if/`: run the what-if, read the latest; the same rules as the page."""

import pytest

from budgets.models import Unit, WhatIf
from budgets.services import budget_request_create
from tests.conftest import get_user
from tests.factories import make_job
from topology.models import Cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def request_id(demo):
    make_job(project="olmo", gpus=16)
    return budget_request_create(user=get_user("alice"), unit=Unit.objects.get(name="olmo"),
                                 cluster=Cluster.objects.get(), share=60, justification="long-context runs").pk


def url(request_id):
    return f"/api/v1/budget-requests/{request_id}/what-if/"


def test_the_manager_runs_it_and_reads_both_sides(api, request_id):
    api.as_user(get_user("pat"))
    assert api.get(url(request_id)).status_code == 404  # none yet
    response = api.post(url(request_id), {}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["request"], body["status"], body["share"], body["requested_by"]) == (request_id, "done", 60.0, "pat")
    assert [entry["status"] for entry in body["log"]] == ["queued", "running", "done"]
    olmo = body["results"]["units"][0]
    assert (olmo["unit"], olmo["role"], olmo["without"]["share"], olmo["with"]["share"]) == ("olmo", "requesting",
                                                                                           55.0, 60.0)
    assert olmo["with"]["entitled_gpu_hours"] > olmo["without"]["entitled_gpu_hours"]
    assert {"usage_ratio", "wait_p90"} <= set(olmo["with"]) and body["assumptions"]["pending_jobs"] == 1
    assert api.get(url(request_id)).json()["id"] == body["id"]
    cached = api.post(url(request_id), {}, format="json")
    assert cached.status_code == 200 and cached.json()["id"] == body["id"]
    again = api.post(url(request_id), {"force": True, "share": "57.5"}, format="json")
    assert again.status_code == 201 and again.json()["share"] == 57.5
    assert WhatIf.objects.count() == 2


@pytest.mark.parametrize("username", ["dan", "mia"])
def test_people_who_cannot_see_the_request_get_a_404(api, request_id, username):
    api.as_user(get_user(username))
    assert api.post(url(request_id), {}, format="json").status_code == 404
    assert api.get(url(request_id)).status_code == 404
    assert WhatIf.objects.count() == 0


@pytest.mark.parametrize("username", ["lee", "admin"])
def test_the_unit_s_manager_and_operators_see_the_request_and_its_what_if(api, request_id, username):
    """They open the request (finding 10: the unit's managers and operators see it), so they may simulate it."""
    api.as_user(get_user(username))
    assert api.post(url(request_id), {}, format="json").status_code == 201
    assert api.get(url(request_id)).status_code == 200


@pytest.mark.parametrize("body, field, message", [
    ({"share": 101}, "share", "less than or equal to 100"),
    ({"share": "1.234"}, "share", "2 decimal places"),
    ({"share": "lots"}, "share", "A valid number is required"),
    ({"force": "maybe"}, "force", "Must be a valid boolean"),
])
def test_bad_input_is_a_400_naming_the_field(api, request_id, body, field, message):
    response = api.as_user(get_user("alice")).post(url(request_id), body, format="json")
    assert response.status_code == 400 and message in response.json()[field][0]


def test_a_decided_request_gets_no_new_run(api, request_id):
    api.as_user(get_user("pat")).post(f"/api/v1/budget-requests/{request_id}/deny/", {"comment": "no"}, format="json")
    response = api.post(url(request_id), {}, format="json")
    assert response.status_code == 400 and "is denied" in response.json()["status"][0]

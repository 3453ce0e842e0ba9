"""The budget endpoints of FORMATS.md: requests, decisions, unit usage; the same rules as the pages."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from budgets.choices import RequestStatus
from budgets.models import Allocation, AllocationChange, BudgetRequest
from tests.conftest import get_user
from tests.factories import make_job

pytestmark = pytest.mark.django_db

REQUESTS = "/api/v1/budget-requests/"


def share(name):
    return Allocation.objects.current().get(unit__name=name).share_percent


def file(api, username="alice", **body):
    body = {"unit": "olmo", "cluster": "gb200-east", "share": 60, "justification": "long-context runs", **body}
    return api.as_user(get_user(username)).post(REQUESTS, body, format="json")


@pytest.mark.parametrize("method, path", [
    ("get", REQUESTS), ("post", REQUESTS), ("get", f"{REQUESTS}1/"), ("post", f"{REQUESTS}1/approve/"),
    ("post", f"{REQUESTS}1/deny/"), ("get", "/api/v1/units/olmo/usage/?cluster=gb200-east"),
])
def test_the_budget_endpoints_require_authentication(demo, api, method, path):
    assert getattr(api, method)(path, {}, format="json").status_code == 401


def test_a_member_files_a_request_and_sees_its_status(demo, api):
    ends = (timezone.now() + timedelta(days=7)).replace(microsecond=0)
    response = file(api, ends_at=ends.isoformat())
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["unit"], body["cluster"], body["requested_by"], body["share"], body["status"]) == (
        "olmo", "gb200-east", "alice", 60.0, "pending")
    assert body["decider"] == "nlp" and body["starts_at"] is None
    assert body["ends_at"].startswith(ends.date().isoformat())
    assert body["can_decide"] is False
    detail = api.get(f"{REQUESTS}{body['id']}/").json()
    assert detail["status"] == "pending" and detail["justification"] == "long-context runs"


@pytest.mark.parametrize("body, field, message", [
    ({"share": 101}, "share", "less than or equal to 100"),
    ({"share": -5}, "share", "greater than or equal to 0"),
    ({"share": "1.234"}, "share", "2 decimal places"),
    ({"share": None}, "share", "may not be null"),
    ({"unit": "nowhere"}, "unit", "does not exist"),
    ({"cluster": "h100-west"}, "cluster", "does not exist"),
    ({"unit": "tulu"}, "unit", "you are not a member of tulu"),
    ({"justification": ""}, "justification", "may not be blank"),
    ({"ends_at": "2001-01-01T00:00:00Z"}, "ends_at", "must be after the start"),
    ({"starts_at": "yesterday"}, "starts_at", "Datetime has wrong format"),
])
def test_bad_input_is_a_400_naming_the_field(demo, api, body, field, message):
    response = file(api, **body)
    assert response.status_code == 400
    errors = response.json()
    assert list(errors) == [field] and message in errors[field][0], errors
    assert not BudgetRequest.objects.exists()


def test_a_user_lists_their_own_requests_and_those_they_may_decide(demo, api):
    mine = file(api).json()["id"]
    other = file(api, "dan", unit="pixmo", share=25).json()["id"]

    def ids(username, query=""):
        return [row["id"] for row in api.as_user(get_user(username)).get(REQUESTS + query).json()["results"]]

    assert ids("alice") == [mine]
    assert ids("pat") == [mine] and ids("pat", "?waiting=1") == [mine]
    assert ids("mia") == [other] and ids("mia", "?status=approved") == []
    # lee manages olmo (not its parent): sees the request, does not decide it; carol is in a sibling project.
    assert ids("carol") == [] and ids("lee") == [mine] and ids("lee", "?waiting=1") == []
    assert ids("admin") == [other, mine]
    assert ids("dan", "?mine=1") == [other] and ids("dan", "?unit=olmo") == []
    assert api.as_user(get_user("carol")).get(f"{REQUESTS}{mine}/").status_code == 404
    assert api.as_user(get_user("pat")).get(f"{REQUESTS}{mine}/").json()["can_decide"] is True


def test_the_manager_approves_a_different_amount_with_a_comment(demo, api):
    pk = file(api, "dan", unit="pixmo", share=30).json()["id"]
    mia = api.as_user(get_user("mia"))
    refused = mia.post(f"{REQUESTS}{pk}/approve/", {"share": 25}, format="json")
    assert refused.status_code == 400 and list(refused.json()) == ["comment"]
    response = mia.post(f"{REQUESTS}{pk}/approve/", {"share": 25, "comment": "25 until the deadline"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["share"], body["granted_share"], body["decided_by"], body["comment"]) == (
        "approved", 30.0, 25.0, "mia", "25 until the deadline")
    assert body["allocation"]["share"] == 25.0 and body["allocation"]["valid_to"] is None
    assert share("pixmo") == Decimal(25)
    again = mia.post(f"{REQUESTS}{pk}/approve/", {}, format="json")
    assert again.status_code == 400 and "approved" in again.json()["status"][0]


def test_a_denial_needs_a_comment(demo, api):
    pk = file(api).json()["id"]
    pat = api.as_user(get_user("pat"))
    assert pat.post(f"{REQUESTS}{pk}/deny/", {}, format="json").json() == {"comment": ["This field is required."]}
    body = pat.post(f"{REQUESTS}{pk}/deny/", {"comment": "after the release"}, format="json").json()
    assert (body["status"], body["comment"], body["decided_by"]) == ("denied", "after the release", "pat")


# lee (olmo's manager) and admin (an operator) see the request, so they are told no (403); mia does not see it.
@pytest.mark.parametrize("username, code", [("alice", 403), ("lee", 403), ("mia", 404), ("admin", 403)])
def test_only_a_manager_of_the_parent_decides(demo, api, username, code):
    pk = file(api).json()["id"]
    client = api.as_user(get_user(username))
    for verb in ("approve", "deny", "escalate"):
        assert client.post(f"{REQUESTS}{pk}/{verb}/", {"comment": "x"}, format="json").status_code == code
    assert BudgetRequest.objects.get(pk=pk).status == RequestStatus.PENDING


def test_no_room_is_a_400_naming_the_room_left_and_take_from_makes_room(demo, api):
    pk = file(api, share=70).json()["id"]
    pat = api.as_user(get_user("pat"))
    refused = pat.post(f"{REQUESTS}{pk}/approve/", {"comment": ""}, format="json")
    assert refused.status_code == 400 and "olmo can have at most 55 %" in refused.json()["share"][0]
    bad = pat.post(f"{REQUESTS}{pk}/approve/", {"take_from": {"molmo": 10}}, format="json")
    assert bad.status_code == 400 and "not a sibling of olmo" in bad.json()["take_from"][0]
    done = pat.post(f"{REQUESTS}{pk}/approve/", {"take_from": {"tulu": 20, "safety": 10}, "comment": "ok"},
                    format="json")
    assert done.status_code == 200 and (share("olmo"), share("tulu"), share("safety")) == (70, 20, 10)
    assert AllocationChange.objects.filter(budget_request_id=pk).count() == 3


def test_escalation_and_cancellation(demo, api):
    pk = file(api, share=70).json()["id"]
    escalated = api.as_user(get_user("pat")).post(f"{REQUESTS}{pk}/escalate/", {"comment": "full"}, format="json")
    assert escalated.status_code == 201
    up = escalated.json()
    assert (up["unit"], up["share"], up["decider"], up["escalated_from"]) == ("nlp", 69.0, "operators", pk)
    assert api.as_user(get_user("alice")).get(f"{REQUESTS}{pk}/").json()["escalations"] == [up["id"]]
    assert api.as_user(get_user("admin")).get(REQUESTS + "?waiting=1").json()["count"] == 1
    cancelled = api.as_user(get_user("alice")).post(f"{REQUESTS}{pk}/cancel/", format="json")
    assert cancelled.json()["status"] == "cancelled"
    assert BudgetRequest.objects.get(pk=up["id"]).status == RequestStatus.CANCELLED


def test_unit_usage_gives_share_entitlement_usage_and_ratio_per_child(demo, api):
    make_job(project="olmo", gpus=8, on_hosts=["hgx-01-h01"], started=timezone.now() - timedelta(hours=3))
    make_job(project="olmo", gpus=16)
    response = api.as_user(get_user("carol")).get("/api/v1/units/nlp/usage/?cluster=gb200-east")
    assert response.status_code == 200
    body = response.json()
    assert (body["unit"], body["cluster"], body["window_seconds"], body["schedulable_gpus"]) == (
        "nlp", "gb200-east", 7 * 86400, 348)
    assert body["share"] == 60.0 and body["entitled_gpu_hours"] == pytest.approx(0.6 * 348 * 168, abs=0.1)
    assert body["usage_gpu_hours"] == pytest.approx(24, abs=0.01) and body["children_share"] == 100.0
    assert body["ratio"] == pytest.approx(24 / (0.6 * 348 * 168), abs=1e-4)
    children = {child["unit"]: child for child in body["children"]}
    assert set(children) == {"olmo", "tulu", "safety"}
    assert (children["olmo"]["share"], children["olmo"]["pending_gpus"]) == (55.0, 16)
    assert children["olmo"]["usage_gpu_hours"] == pytest.approx(24, abs=0.01)
    assert children["tulu"]["ratio"] == 0 and children["tulu"]["usage_gpu_hours"] == 0
    assert api.get("/api/v1/units/olmo/usage/").json()["children"] == []  # one cluster: ?cluster= optional
    missing = api.get("/api/v1/units/olmo/usage/?cluster=h100-west")
    assert missing.status_code == 400 and missing.json() == {"cluster": ["no cluster named 'h100-west'"]}


def test_a_manager_sets_childrens_shares_through_the_api(demo, api):
    pat = api.as_user(get_user("pat"))
    body = {"cluster": "gb200-east", "shares": {"olmo": 50, "tulu": 35}, "reason": "tulu's eval season"}
    response = pat.post("/api/v1/units/nlp/shares/", body, format="json")
    assert response.status_code == 200, response.json()
    assert [(c["unit"], c["before"], c["after"], c["actor"]) for c in response.json()["changes"]] == [
        ("olmo", 55.0, 50.0, "pat"), ("tulu", 30.0, 35.0, "pat")]
    over = pat.post("/api/v1/units/nlp/shares/", {**body, "shares": {"olmo": 60}}, format="json")
    assert over.status_code == 400 and "over 100 %" in over.json()["shares"][0]
    assert pat.post("/api/v1/units/nlp/shares/", {**body, "reason": ""}, format="json").status_code == 400
    assert api.as_user(get_user("lee")).post("/api/v1/units/nlp/shares/", body, format="json").status_code == 403
    unknown = pat.post("/api/v1/units/nlp/shares/", {**body, "shares": {"molmo": 1}}, format="json")
    assert unknown.status_code == 400 and "not a child of nlp" in unknown.json()["shares"][0]


def test_the_schema_lists_the_budget_endpoints(demo, client):
    client.force_login(get_user("alice"))
    schema = client.get("/api/schema/").content.decode()
    for path in ("/api/v1/budget-requests/", "/api/v1/budget-requests/{id}/approve/",
                 "/api/v1/budget-requests/{id}/deny/", "/api/v1/units/{name}/usage/"):
        assert path in schema

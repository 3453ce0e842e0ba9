"""The input boundary (config/middleware.py): findings 2, 3, 5 and 7, and the header and cookie guards.

Every body is decoded once whatever charset it declares, depth- and size-limited with the limit named, and
every string refused with the field named when it holds NUL, another control character or a bidi override.
"""

import json

import pytest

from budgets.models import BudgetRequest
from scheduler.models import Job
from tests.conftest import get_user

pytestmark = pytest.mark.django_db

JOB = {"cluster": "gb200-east", "project": "olmo", "gpus": 1, "min_runtime": 60, "resumable": False,
       "command": "python train.py"}


def post_raw(api, path, body: bytes, content_type: str, **extra):
    return api.generic("POST", path, body, content_type=content_type, **extra)


@pytest.mark.parametrize("charset", ["utf-16", "utf-16-le", "utf-32", "UTF-8"])
def test_a_nul_is_refused_whatever_the_declared_charset(demo, api, charset):
    body = {"unit": "ol\x00mo", "cluster": "gb200-east", "share": 60, "justification": "x"}
    response = post_raw(api.as_user(get_user("alice")), "/api/v1/budget-requests/",
                        json.dumps(body).encode(charset), f"application/json; charset={charset}")
    assert response.status_code == 400
    assert "Null characters are not allowed" in " ".join(response.json()["unit"])
    assert not BudgetRequest.objects.exists()


def test_a_nul_in_take_from_is_refused_in_utf16(demo, api):
    from budgets.services import budget_request_create
    from topology.models import Cluster

    alice = get_user("alice")
    request = budget_request_create(user=alice, unit=alice.memberships.get(unit__name="olmo").unit,
                                    cluster=Cluster.objects.get(), share=60, justification="more")
    body = json.dumps({"comment": "ok", "take_from": {"tu\x00lu": 10}}).encode("utf-16")
    response = post_raw(api.as_user(get_user("pat")), f"/api/v1/budget-requests/{request.pk}/approve/", body,
                        "application/json; charset=utf-16")
    assert response.status_code == 400
    assert "take_from.tu\\0lu" in response.json()


@pytest.mark.parametrize("charset", ["utf-16", "utf-32", "latin-1"])
def test_a_body_in_another_charset_is_read_as_that_charset(demo, api, charset):
    body = json.dumps({**JOB, "name": "café"}, ensure_ascii=False).encode(charset)
    response = post_raw(api.as_user(get_user("alice")), "/api/v1/jobs/", body, f"application/json; charset={charset}")
    assert response.status_code == 201, response.content
    assert Job.objects.get().name == "café"


def test_an_unknown_charset_and_undecodable_bytes_are_refused(demo, api):
    client = api.as_user(get_user("alice"))
    response = post_raw(client, "/api/v1/jobs/", json.dumps(JOB).encode(), "application/json; charset=klingon")
    assert response.status_code == 415 and "klingon" in response.json()["detail"]
    response = post_raw(client, "/api/v1/jobs/", b'{"name": "\xff\xfe"}', "application/json")
    assert response.status_code == 400 and "utf-8" in response.json()["detail"]


@pytest.mark.parametrize("depth", [33, 1000, 100_000])
@pytest.mark.parametrize("path", ["/api/v1/auth/token/", "/api/v1/jobs/", "/api/v1/agent/heartbeat/"])
def test_deep_nesting_is_refused_unauthenticated_with_the_limit_named(demo, client, path, depth):
    body = "[" * depth + "]" * depth
    response = client.post(path, body, content_type="application/json")
    assert response.status_code == 400
    assert "deeper than 32 levels" in response.json()["detail"]


def test_nesting_within_the_limit_reaches_the_view(demo, client):
    response = client.post("/api/v1/auth/token/", {"username": "alice", "password": "allot-demo"},
                           content_type="application/json")
    assert response.status_code == 200 and response.json()["token"]


@pytest.mark.parametrize("literal", [str(2**63), str(-(2**63) - 1), "1" + "0" * 5000])
def test_integers_beyond_the_database_are_refused_with_the_field_named(demo, api, literal):
    body = json.dumps(JOB).replace('"gpus": 1', f'"gpus": {literal}')
    response = post_raw(api.as_user(get_user("alice")), "/api/v1/jobs/", body.encode(), "application/json")
    assert response.status_code == 400
    assert "out of range" in " ".join(response.json()["gpus"])
    assert "9223372036854775807" in " ".join(response.json()["gpus"])


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_numbers_that_are_not_finite_are_refused(demo, api, literal):
    body = json.dumps(JOB).replace('"gpus": 1', f'"gpus": {literal}')
    response = post_raw(api.as_user(get_user("alice")), "/api/v1/jobs/", body.encode(), "application/json")
    assert response.status_code == 400 and "gpus" in response.json()


def test_a_body_over_the_limit_is_refused_with_the_limit_named(demo, api, settings):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = json.dumps({**JOB, "command": "x" * (limit + 10)}).encode()
    response = post_raw(api.as_user(get_user("alice")), "/api/v1/jobs/", body, "application/json")
    assert response.status_code == 413
    assert f"the limit is {limit} bytes" in response.json()["detail"]


def test_a_form_with_too_many_fields_is_refused_with_the_limit_named(demo, client, settings):
    client.force_login(get_user("alice"))
    body = "&".join(f"f{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    response = client.post("/budgets/requests/new/", body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400
    assert str(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS) in response.content.decode()


@pytest.mark.parametrize("path", ["/api/v1/jobs/²/", "/api/v1/jobs/99999999999999999999/", "/api/v1/jobs/-1/",
                                  "/api/v1/jobs/1.0/", "/api/v1/budget-requests/²/",
                                  "/api/v1/budget-requests/99999999999999999999/",
                                  "/api/v1/budget-requests/²/what-if/"])
def test_ids_in_api_urls_are_parsed_strictly(demo, api, path):
    response = api.as_user(get_user("alice")).get(path)
    assert response.status_code == 404
    assert response.json()["detail"]


@pytest.mark.parametrize("path", ["/jobs/²/", "/jobs/99999999999999999999/", "/budgets/requests/99999999999999999999/",
                                  "/budgets/requests/٣/"])
def test_ids_in_page_urls_are_parsed_strictly(demo, client, path):
    client.force_login(get_user("alice"))
    assert client.get(path).status_code == 404


@pytest.mark.parametrize("header", ["Token \xff\xfe\xfd", "Token abc\x00def", "Token 😀", "Token a\x1bb",
                                    "Bearer \x00"])
def test_bad_bytes_in_the_authorization_header_are_a_401(demo, client, header):
    response = client.get("/api/v1/jobs/", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert "Authorization" in response.json()["detail"] or "token" in response.json()["detail"].lower()


def test_a_session_cookie_holding_a_nul_is_ignored(demo, client):
    client.cookies["sessionid"] = "abc\x00def0123456789"
    response = client.get("/budgets/")
    assert response.status_code == 302 and "/login/" in response["Location"]


@pytest.mark.parametrize(("field", "value", "words"), [
    ("name", "evil\x1b[2J\x1b[31mname", "escape character"),
    ("name", "two\nlines", "newline"),
    ("name", "invoice\u202egpj.exe", "U+202E"),
    ("name", "x\u2066y", "U+2066"),
    ("command", "run \x07bell", "U+0007"),
    ("project", "ol\tmo", "tab"),
])
def test_control_characters_and_bidi_overrides_are_refused_with_the_field_named(demo, api, field, value, words):
    response = api.as_user(get_user("alice")).post("/api/v1/jobs/", {**JOB, field: value}, format="json")
    assert response.status_code == 400
    assert words in " ".join(response.json()[field])
    assert not Job.objects.exists()


def test_multiline_fields_keep_newlines_and_tabs(demo, api):
    command = "set -e\n\tpython train.py \\\r\n  --steps 10"
    response = api.as_user(get_user("alice")).post("/api/v1/jobs/", {**JOB, "command": command}, format="json")
    assert response.status_code == 201
    assert Job.objects.get().command == command


def test_bidi_overrides_are_refused_in_page_forms(demo, client):
    client.force_login(get_user("alice"))
    response = client.post("/budgets/requests/new/", {"unit": "olmo", "cluster": "gb200-east", "share": "60",
                                                      "justification": "more \u202egnihtemos"})
    assert response.status_code == 400 and "justification" in response.content.decode()
    assert not BudgetRequest.objects.exists()


def test_the_submit_service_refuses_controls_in_names_whatever_the_path(demo):
    from scheduler.services import JobError, JobRequest, job_submit

    with pytest.raises(JobError) as refused:
        job_submit(user=get_user("alice"), request=JobRequest(
            cluster="gb200\x00east", project="olmo", gpus=1, min_runtime=0, resumable=True,
            name="a\u202eb", command="x"))
    assert set(refused.value.errors) == {"cluster", "name"}
    assert "U+202E" in refused.value.errors["name"][0]

"""Hostile and oversized strings: refused with the field and limit named, or stored and shown escaped."""

import pytest

from budgets.services import budget_request_create
from scheduler.models import Job
from scheduler.services import JobRequest, job_submit
from scheduler.tick import run_tick
from tests.conftest import get_user
from topology.models import Cluster, Host
from topology.services import host_drain

pytestmark = pytest.mark.django_db

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'
ESCAPED = "&lt;script&gt;"


@pytest.fixture
def hostile(demo):
    alice = get_user("alice")
    job = job_submit(user=alice, request=JobRequest(
        cluster="gb200-east", project="olmo", gpus=8, min_runtime=3600, resumable=True, name=XSS[:200],
        command=f"python train.py --note '{XSS}'",
    ))
    request = budget_request_create(user=alice, unit=alice.memberships.get(unit__name="olmo").unit,
                                    cluster=Cluster.objects.get(), share=60, justification=XSS)
    host_drain(host=Host.objects.get(name="hgx-01-h01"), actor=get_user("olga"), reason=XSS)
    run_tick(demo)
    return {"job": job.pk, "request": request.pk}


PAGES = [
    "/", "/clusters/gb200-east/", "/clusters/gb200-east/queue/", "/jobs/{job}/", "/hosts/hgx-01-h01/",
    "/clusters/gb200-east/domains/hgx-01/", "/repairs/", "/budgets/", "/budgets/units/olmo/",
    "/budgets/requests/", "/budgets/requests/{request}/",
]


@pytest.mark.parametrize("path", PAGES)
def test_every_page_shows_hostile_text_escaped(hostile, client, path):
    client.force_login(get_user("pat"))  # sees alice's request: pat decides it
    response = client.get(path.format(**hostile))
    assert response.status_code == 200
    html = response.content.decode()
    assert "<script>alert" not in html and "<img src=x" not in html
    if path in ("/jobs/{job}/", "/hosts/hgx-01-h01/", "/budgets/requests/{request}/"):
        assert ESCAPED in html  # the text is there, as text


def test_the_api_returns_hostile_text_as_data(hostile, api):
    body = api.as_user(get_user("alice")).get(f"/api/v1/jobs/{hostile['job']}/").json()
    assert body["name"] == XSS[:200] and XSS in body["command"]


@pytest.mark.parametrize(
    "field, value, limit",
    [
        ("name", "n" * 201, "200 characters"),
        ("command", "c" * 20001, "20000 characters"),
        ("project", "p" * 65, "64 characters"),
        ("cluster", "\x00bad", "Null characters are not allowed"),
        ("gpu_type", "H100|" * 50, "200 characters"),
        ("gpus", 10**12, "less than or equal to 1000000"),
        ("min_runtime", 10**12, "less than or equal to"),
    ],
)
def test_oversized_submissions_are_refused_with_the_field_and_limit(demo, api, field, value, limit):
    body = {"cluster": "gb200-east", "project": "olmo", "gpus": 1, "min_runtime": 60, "resumable": False,
            "command": "x", field: value}
    response = api.as_user(get_user("alice")).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert limit in " ".join(response.json()[field])
    assert not Job.objects.exists()


def test_oversized_reasons_are_refused_not_truncated(demo, api):
    response = api.as_user(get_user("olga")).post("/api/v1/hosts/hgx-01-h01/drain/", {"reason": "r" * 5000},
                                                  format="json")
    assert response.status_code == 400 and "reason" in response.json()
    assert Host.objects.get(name="hgx-01-h01").state == "up"


@pytest.mark.parametrize("path", ["/api/v1/jobs/?state=run%00ning", "/api/v1/jobs/?mine=%00",
                                  "/clusters/gb200-east/queue/?project=ol%00mo"])
def test_nul_bytes_in_query_strings_are_refused_with_the_parameter_named(demo, client, path):
    client.force_login(get_user("alice"))
    response = client.get(path)
    assert response.status_code == 400
    name = path.split("?")[1].split("=")[0]
    assert name in response.content.decode()


@pytest.mark.parametrize(("query", "whole"), [("limit=258529701621582331904", True),
                                               ("offset=258529701621582331904", False),
                                               ("limit=-5&offset=-7", True)])
def test_out_of_range_pages_are_answered_not_failed(demo, api, query, whole):
    response = api.as_user(get_user("alice")).get(f"/api/v1/units/?{query}")
    assert response.status_code == 200
    body = response.json()
    assert body["count"] > 0
    assert len(body["results"]) == (body["count"] if whole else 0)


@pytest.mark.parametrize(("body", "kind", "field"), [
    ({"unit": "ol\x00mo", "cluster": "gb200-east", "share": 60, "justification": "x"}, "json", "unit"),
    ({"unit": "ol\x00mo", "cluster": "gb200-east", "share": 60, "justification": "x"}, "multipart", "unit"),
    ({"cluster": "gb200-east", "project": "olmo", "gpus": 1, "min_runtime": 60, "resumable": False,
      "command": "x", "env": {"A\x00": "1"}}, "json", "env.A\\0"),
])
def test_nul_bytes_in_bodies_are_refused_with_the_field_named(demo, api, body, kind, field):
    path = "/api/v1/budget-requests/" if "unit" in body else "/api/v1/jobs/"
    response = api.as_user(get_user("alice")).post(path, body, format=kind)
    assert response.status_code == 400
    assert "Null characters are not allowed" in " ".join(response.json()[field])
    assert not Job.objects.exists()

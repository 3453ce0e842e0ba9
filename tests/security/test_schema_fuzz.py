"""The standing fuzz suite: no input is a server error, and every answer keeps the schema.

Schemathesis calls every operation of /api/schema/ with generated inputs —
valid and not — as a researcher, a manager, on-call and an admin, on the demo
with a job and a budget request in place. Then every operation gets hostile
input the schema does not describe (charsets, nesting, huge bodies and
integers, controls in every string, ids no database holds, broken headers),
and random JSON in random charsets goes to the endpoints that look names up.
Runs in `make test` on SQLite and on PostgreSQL (DATABASE_URL).
"""

import json
import re

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from config.wsgi import application
from tests.conftest import api_key, get_user

schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
# No server error, and every answer — success or refusal — as the schema documents it (status, type, body,
# headers). Refusing a schema-valid request is fine: the schema cannot say that a project must exist.
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance]
ROLE_USERS = ["alice", "pat", "olga", "admin"]


@pytest.fixture
def keep_connection():
    """Called straight through WSGI, Django would close the test's database connection after each request."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def tokens(demo, keep_connection):
    from budgets.services import budget_request_create
    from scheduler.services import JobRequest, job_submit
    from topology.models import Cluster

    alice = get_user("alice")
    job_submit(user=alice, request=JobRequest(cluster="gb200-east", project="olmo", gpus=8, min_runtime=3600,
                                              resumable=True, command="python train.py"))
    budget_request_create(user=alice, unit=alice.memberships.get(unit__name="olmo").unit,
                          cluster=Cluster.objects.get(), share=60, justification="more")
    return {name: api_key(get_user(name)) for name in ROLE_USERS}


@pytest.mark.django_db
@schema.exclude(path="/api/v1/agent/heartbeat/").parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_keeps_its_schema_for_every_role(case, tokens):
    for token in tokens.values():
        case.call_and_validate(headers={"Authorization": f"Token {token}"}, checks=CHECKS)


@pytest.mark.django_db
@schema.include(path="/api/v1/agent/heartbeat/").parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_agent_endpoint_keeps_its_schema(case, demo, keep_connection):
    from topology.models import AgentToken, Host

    token = AgentToken.for_host(Host.objects.get(name="hgx-01-h01")).key
    case.call_and_validate(headers={"Authorization": f"Agent {token}"}, checks=CHECKS)


# ---------------------------------------------------------------- hostile bodies, paths and headers
#
# Every operation of the schema, with what an attacker sends rather than what the schema describes: each
# field a string holding NUL, escapes and bidi overrides; integers past 2**63; nesting past the limit; a
# body over the size limit; the same body in UTF-16, UTF-32, Latin-1, an unknown charset and broken bytes;
# ids no database holds. Anonymous and signed in. Whatever the answer, it is never a server error.

HOSTILE_TEXT = "a\x00b\x1b[2J\u202egnp.exe\r\n"
HOSTILE_IDS = ["²", "99999999999999999999", "-1", "1.5", "%00", "x" * 300]
HOSTILE_NAMES = ["a%00b", "é" * 100, "%E2%80%AE"]


def _body_schema(schema: dict, operation: dict) -> dict:
    content = operation.get("requestBody", {}).get("content", {})
    body = content.get("application/json", {}).get("schema", {})
    if "$ref" in body:
        body = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
    return body


def _plain_body(body_schema: dict) -> dict:
    """Every property with an ordinary value of its type (what the variants below spoil)."""
    plain = {"string": "x", "integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}
    return {name: plain.get(prop.get("type"), "x") for name, prop in body_schema.get("properties", {}).items()}


def _bodies(body_schema: dict):
    """(content type, bytes) pairs: the hostile variants of one operation's body."""
    plain = _plain_body(body_schema) or {"field": "x"}
    text = json.dumps(plain, ensure_ascii=False)
    yield "application/json", json.dumps({key: HOSTILE_TEXT for key in plain}).encode()
    yield "application/json", json.dumps({key: {HOSTILE_TEXT: [HOSTILE_TEXT]} for key in plain}).encode()
    yield "application/json", ("{" + ", ".join(f'"{key}": {2**64}' for key in plain) + "}").encode()
    yield "application/json", ("{" + ", ".join(f'"{key}": -{"9" * 5000}' for key in plain) + "}").encode()
    yield "application/json", ("{" + ", ".join(f'"{key}": NaN' for key in plain) + "}").encode()
    yield "application/json", ("[" * 40 + "]" * 40).encode()
    yield "application/json", ("[" * 50_000).encode()
    yield "application/json", json.dumps({**plain, "pad": "p" * 2_700_000}).encode()
    for charset in ("utf-16", "utf-32", "latin-1"):
        yield f"application/json; charset={charset}", json.dumps(
            {key: HOSTILE_TEXT for key in plain}, ensure_ascii=False).encode(charset, errors="replace")
        yield f"application/json; charset={charset}", text.encode(charset, errors="replace")
    yield "application/json; charset=x-unknown", text.encode()
    yield "application/json", b'{"x": "\xff\xfe\xfa"}'
    yield "application/x-www-form-urlencoded", "&".join(f"{key}=a%00b%1b" for key in plain).encode()
    yield "application/x-www-form-urlencoded; charset=utf-16", "&".join(f"{key}=x" for key in plain).encode("utf-16")


def _paths(template: str):
    if "{" not in template:
        yield template
        return
    for value in HOSTILE_IDS if "{id}" in template else HOSTILE_NAMES:
        yield re.sub(r"\{[^}]+\}", value, template)


def _operations():
    from django.test import Client

    schema = Client().get("/api/schema/?format=json").json()
    for template, item in schema["paths"].items():
        for method, operation in item.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                yield template, method, _body_schema(schema, operation)


@pytest.fixture(scope="module")
def operations(django_db_blocker):
    with django_db_blocker.unblock():
        return list(_operations())


HEADERS = [{}, {"HTTP_AUTHORIZATION": "Token \xff\xfe"}, {"HTTP_AUTHORIZATION": "Token " + "0" * 39 + "\x00"},
           {"HTTP_AUTHORIZATION": "Bearer " + "x" * 5000}, {"HTTP_COOKIE": "sessionid=abc\x00def; csrftoken=\x1b"}]


@pytest.mark.django_db
def test_no_hostile_request_is_a_server_error(tokens, operations):
    from django.test import Client

    client = Client(raise_request_exception=False)
    failures, sent = [], 0
    for template, method, body_schema in operations:
        for path in _paths(template):
            for who in ("anonymous", "alice"):
                auth = {} if who == "anonymous" else {"HTTP_AUTHORIZATION": f"Token {tokens[who]}"}
                variants = list(_bodies(body_schema)) if method in ("post", "put", "patch") else [(None, b"")]
                for content_type, body in variants:
                    if content_type is None:
                        response = client.generic(method.upper(), path, **auth)
                    else:
                        response = client.generic(method.upper(), path, body, content_type=content_type, **auth)
                    sent += 1
                    if response.status_code >= 500:
                        failures.append(f"{method.upper()} {path} {content_type} as {who}: {response.status_code}")
        for headers in HEADERS:
            response = client.generic(method.upper(), next(_paths(template)), **headers)
            sent += 1
            if response.status_code >= 500:
                failures.append(f"{method.upper()} {template} with {headers}: {response.status_code}")
    assert sent > 500
    assert failures == []


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=40,
)


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(document=st.dictionaries(st.sampled_from(["cluster", "project", "unit", "gpus", "share", "name",
                                                  "command", "take_from", "username", "password", "comment"]),
                                JSON_VALUES, max_size=8),
       charset=st.sampled_from(["utf-8", "utf-16", "utf-16-be", "utf-32", "latin-1"]),
       path=st.sampled_from(["/api/v1/jobs/", "/api/v1/budget-requests/", "/api/v1/auth/token/",
                             "/api/v1/units/nlp/shares/", "/api/v1/budget-requests/1/approve/"]))
def test_random_json_in_any_charset_is_never_a_server_error(tokens, document, charset, path):
    from django.test import Client

    body = json.dumps(document, ensure_ascii=False).encode(charset, errors="replace")
    for auth in ({}, {"HTTP_AUTHORIZATION": f"Token {tokens['pat']}"}):
        response = Client(raise_request_exception=False).generic(
            "POST", path, body, content_type=f"application/json; charset={charset}", **auth)
        assert response.status_code < 500, (path, charset, document, response.content[:300])

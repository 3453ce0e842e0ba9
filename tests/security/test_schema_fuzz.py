"""Schemathesis against our own OpenAPI schema, as each role: no 500s, no answer that breaks the schema.

Every operation of /api/schema/ is called with generated inputs — valid and
not — by a researcher, a manager, on-call and an admin, on the demo with a
job and a budget request in place.
"""

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
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

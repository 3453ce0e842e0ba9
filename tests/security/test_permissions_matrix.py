"""Every endpoint and page × every role, with the result each must get.

The table below is the rule book. `test_every_route_has_a_rule` walks the
URL resolver, so an endpoint added without a row here fails the suite.

The subject of every row: alice's pending job and budget request in olmo
(nlp › olmo), and host hgx-01-h01. Roles: anonymous; dan, a researcher of
another project (molmo, pixmo); alice, a member of olmo and the owner;
mia, manager of multimodal, a sibling of nlp; pat, manager of nlp, the
parent; olga, on-call; the agent of another host (hgx-02-h01) using its
token; admin, a superuser.
"""

from dataclasses import dataclass, field

import pytest
from django.db import transaction
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from accounts.services import token_create
from budgets.models import WhatIf
from budgets.services import budget_request_create
from scheduler.services import JobRequest, job_submit
from tests.conftest import api_key, get_user
from topology.models import AgentToken, Cluster, Host

pytestmark = pytest.mark.django_db

ROLES = ["anonymous", "researcher", "member", "sibling_manager", "parent_manager", "oncall", "other_agent", "admin"]
USERS = {
    "researcher": "dan", "member": "alice", "sibling_manager": "mia", "parent_manager": "pat", "oncall": "olga",
    "admin": "admin",
}
EVERYONE_SIGNED_IN = dict.fromkeys(["researcher", "member", "sibling_manager", "parent_manager", "oncall", "admin"])


def only(expected: dict[str, int], default: int) -> dict[str, int]:
    """`expected` for the roles named, `default` for the signed-in others; anonymous and agents as given."""
    return {role: expected.get(role, default) for role in ROLES}


def api_rule(signed_in: dict[str, int] | None = None, default: int = 200) -> dict[str, int]:
    """API: anonymous and another host's agent are not authenticated (401)."""
    return {**only(signed_in or {}, default), "anonymous": 401, "other_agent": 401}


def page_rule(signed_in: dict[str, int] | None = None, default: int = 200) -> dict[str, int]:
    """Pages: anonymous visitors (and agents, which have no session) go to the login page (302)."""
    return {**only(signed_in or {}, default), "anonymous": 302, "other_agent": 302}


def form_rule(signed_in: dict[str, int] | None = None, default: int = 403) -> dict[str, int]:
    """Forms: a post without a session's CSRF token is refused (403) before anything else."""
    return {**only(signed_in or {}, default), "anonymous": 403, "other_agent": 403}


ONCALL = {"oncall": 200, "admin": 200}
OWNER_OR_MANAGER = {"member": 200, "parent_manager": 200, "admin": 200}
# Who opens alice's budget request: alice, the managers above olmo (pat decides it), the operators.
SEES_REQUEST = {"member": 200, "parent_manager": 200, "admin": 200}


@dataclass
class Row:
    name: str  # URL name
    method: str
    path: str  # formatted with the fixture's ids: {job}, {request}
    expected: dict[str, int]
    body: dict = field(default_factory=dict)
    api: bool = True


ROWS = [
    # -- API: authentication and the agent
    Row("api-token", "post", "/api/v1/auth/token/", dict.fromkeys(ROLES, 200),
        {"username": "alice", "password": "allot-demo"}),
    Row("agent-heartbeat", "post", "/api/v1/agent/heartbeat/",
        {**dict.fromkeys(ROLES, 401), "other_agent": 403}, {"host": "hgx-01-h01"}),
    Row("api:api-root", "get", "/api/v1/", api_rule()),
    # Tokens: each user lists and revokes their own; alice's token is the subject.
    Row("api:token-list", "get", "/api/v1/auth/tokens/", api_rule()),
    Row("api:token-detail", "get", "/api/v1/auth/tokens/{token}/", api_rule({"member": 200}, 404)),
    Row("api:token-detail", "delete", "/api/v1/auth/tokens/{token}/", api_rule({"member": 200}, 404)),
    Row("api:token-logout", "post", "/api/v1/auth/tokens/logout/", api_rule()),
    # The schema and its docs describe the API, no data: public, as is usual.
    Row("schema", "get", "/api/schema/", dict.fromkeys(ROLES, 200)),
    Row("swagger-ui", "get", "/api/docs/", dict.fromkeys(ROLES, 200)),
    # -- API: inventory
    Row("api:cluster-list", "get", "/api/v1/clusters/", api_rule()),
    Row("api:cluster-detail", "get", "/api/v1/clusters/gb200-east/", api_rule()),
    Row("api:host-list", "get", "/api/v1/hosts/", api_rule()),
    Row("api:host-detail", "get", "/api/v1/hosts/hgx-01-h01/", api_rule()),
    Row("api:host-cordon", "post", "/api/v1/hosts/hgx-01-h01/cordon/", api_rule(ONCALL, 403), {"reason": "test"}),
    Row("api:host-drain", "post", "/api/v1/hosts/hgx-01-h01/drain/", api_rule(ONCALL, 403), {"reason": "test"}),
    Row("api:host-resume", "post", "/api/v1/hosts/nvl72-03-h07/resume/", api_rule(ONCALL, 403), {"reason": "fixed"}),
    # -- API: org and budgets
    Row("api:unit-list", "get", "/api/v1/units/", api_rule()),
    Row("api:unit-detail", "get", "/api/v1/units/olmo/", api_rule()),
    Row("api:unit-usage", "get", "/api/v1/units/olmo/usage/?cluster=gb200-east", api_rule()),
    Row("api:unit-shares", "post", "/api/v1/units/nlp/shares/", api_rule({"parent_manager": 200}, 403),
        {"cluster": "gb200-east", "shares": {"olmo": "50", "tulu": "35", "safety": "15"}, "reason": "rebalance"}),
    Row("api:budgetrequest-list", "get", "/api/v1/budget-requests/", api_rule()),
    Row("api:budgetrequest-detail", "get", "/api/v1/budget-requests/{request}/",
        api_rule(SEES_REQUEST, 404)),
    Row("api:budgetrequest-approve", "post", "/api/v1/budget-requests/{request}/approve/",
        api_rule({"parent_manager": 200, "member": 403, "admin": 403}, 404),
        {"comment": "55 fits, not 60", "share": "55"}),
    Row("api:budgetrequest-deny", "post", "/api/v1/budget-requests/{request}/deny/",
        api_rule({"parent_manager": 200, "member": 403, "admin": 403}, 404), {"comment": "not now"}),
    Row("api:budgetrequest-escalate", "post", "/api/v1/budget-requests/{request}/escalate/",
        api_rule({"parent_manager": 201, "member": 403, "admin": 403}, 404), {"comment": "up"}),
    Row("api:budgetrequest-cancel", "post", "/api/v1/budget-requests/{request}/cancel/",
        api_rule({"member": 200, "parent_manager": 403, "admin": 403}, 404)),
    Row("api:budgetrequest-what-if", "get", "/api/v1/budget-requests/{request}/what-if/",
        api_rule(SEES_REQUEST, 404)),
    Row("api:budgetrequest-what-if", "post", "/api/v1/budget-requests/{request}/what-if/",
        api_rule({"member": 201, "parent_manager": 201, "admin": 201}, 404), {"force": True}),
    # -- API: jobs
    Row("api:job-list", "get", "/api/v1/jobs/", api_rule()),
    Row("api:job-detail", "get", "/api/v1/jobs/{job}/", api_rule()),
    Row("api:job-cancel", "post", "/api/v1/jobs/{job}/cancel/", api_rule(OWNER_OR_MANAGER, 403)),
    # A job's output: those who see its command (its owner, its project's managers, on-call, admins).
    Row("api:job-logs", "get", "/api/v1/jobs/{job}/logs/", api_rule({**OWNER_OR_MANAGER, **ONCALL}, 403)),
    Row("api-usage", "get", "/api/v1/usage/", api_rule()),
    # -- pages
    Row("login", "get", "/login/", dict.fromkeys(ROLES, 200), api=False),
    Row("logout", "post", "/logout/", form_rule(default=302), api=False),
    Row("metrics", "get", "/metrics", dict.fromkeys(ROLES, 200), api=False),
    # Probes for load balancers and orchestrators: open to all, and they say nothing secret. /readyz is 503 here
    # (no scheduler has ticked in the test database), whoever asks.
    Row("healthz", "get", "/healthz", dict.fromkeys(ROLES, 200), api=False),
    Row("readyz", "get", "/readyz", dict.fromkeys(ROLES, 503), api=False),
    Row("account", "get", "/account/", page_rule(), api=False),
    Row("token-revoke", "post", "/account/tokens/{token}/revoke/", form_rule({"member": 302}, 404), api=False),
    # Anyone signed in saves their own notification choices (an empty form: none); nobody else's.
    Row("notification-subscription", "post", "/account/notifications/",
        form_rule(dict.fromkeys(EVERYONE_SIGNED_IN, 302)), api=False),
    Row("password_change", "get", "/account/password/", page_rule(), api=False),
    # Resetting a forgotten password is for people who cannot log in: public pages.
    Row("password_reset", "get", "/account/password/reset/", dict.fromkeys(ROLES, 200), api=False),
    Row("password_reset_done", "get", "/account/password/reset/sent/", dict.fromkeys(ROLES, 200), api=False),
    Row("password_reset_confirm", "get", "/account/password/reset/MQ/set-password/", dict.fromkeys(ROLES, 200),
        api=False),
    Row("password_reset_complete", "get", "/account/password/reset/done/", dict.fromkeys(ROLES, 200), api=False),
    Row("home", "get", "/", page_rule(), api=False),
    Row("cluster-list", "get", "/clusters/", page_rule(), api=False),
    Row("cluster-detail", "get", "/clusters/gb200-east/", page_rule(), api=False),
    Row("cluster-dashboard-data", "get", "/clusters/gb200-east/dashboard.json", page_rule(), api=False),
    Row("domain-detail", "get", "/clusters/gb200-east/domains/nvl72-03/", page_rule(), api=False),
    Row("host-detail", "get", "/hosts/hgx-01-h01/", page_rule(), api=False),
    Row("host-action", "post", "/hosts/hgx-01-h01/drain/", form_rule({"oncall": 302, "admin": 302}),
        {"reason": "test"}, api=False),
    Row("repairs", "get", "/repairs/", page_rule(), api=False),
    Row("queue-home", "get", "/queue/", page_rule(default=302), api=False),
    Row("queue", "get", "/clusters/gb200-east/queue/", page_rule(), api=False),
    Row("job-detail", "get", "/jobs/{job}/", page_rule(), api=False),
    Row("job-history", "get", "/jobs/", page_rule(), api=False),
    Row("job-submit", "get", "/jobs/new/", page_rule(), api=False),
    # Only alice may submit to olmo (the others see the form again, the refusal named); resubmitting her job is
    # hers alone.
    Row("job-submit", "post", "/jobs/new/", form_rule({"member": 302}, 200),
        {"cluster": "gb200-east", "project": "olmo", "gpus": "1", "min_runtime": "1h", "command": "x"}, api=False),
    Row("job-submit", "get", "/jobs/new/?from={job}", page_rule({"member": 200}, 404), api=False),
    Row("usage", "get", "/usage/", page_rule(), api=False),
    Row("job-cancel", "post", "/jobs/{job}/cancel/", form_rule({"member": 302, "parent_manager": 302, "admin": 302}),
        api=False),
    Row("org-tree", "get", "/org/", page_rule(), api=False),
    Row("budget-overview", "get", "/budgets/", page_rule(), api=False),
    Row("budget-unit", "get", "/budgets/units/olmo/", page_rule(), api=False),
    Row("budget-top-shares", "get", "/budgets/shares/?cluster=gb200-east", page_rule({"admin": 200}, 403), api=False),
    Row("budget-shares", "get", "/budgets/units/nlp/shares/?cluster=gb200-east",
        page_rule({"parent_manager": 200}, 403),
        api=False),
    Row("budget-request-list", "get", "/budgets/requests/", page_rule(), api=False),
    Row("budget-request-new", "get", "/budgets/requests/new/", page_rule(), api=False),
    Row("budget-request-detail", "get", "/budgets/requests/{request}/",
        page_rule(SEES_REQUEST, 404), api=False),
    Row("budget-request-approve", "post", "/budgets/requests/{request}/approve/",
        form_rule({"parent_manager": 302}, 404) | {"member": 403, "admin": 403},
        {"share": "55", "comment": "55 fits, not 60"}, api=False),
    Row("budget-request-deny", "post", "/budgets/requests/{request}/deny/",
        form_rule({"parent_manager": 302}, 404) | {"member": 403, "admin": 403}, {"comment": "no"}, api=False),
    Row("budget-request-escalate", "post", "/budgets/requests/{request}/escalate/",
        form_rule({"parent_manager": 302}, 404) | {"member": 403, "admin": 403}, {"comment": "up"}, api=False),
    Row("budget-request-cancel", "post", "/budgets/requests/{request}/cancel/",
        form_rule({"member": 302}, 404) | {"parent_manager": 403, "admin": 403}, api=False),
    Row("budget-request-what-if", "get", "/budgets/requests/{request}/what-if/",
        page_rule(SEES_REQUEST, 404), api=False),
    Row("budget-request-what-if", "post", "/budgets/requests/{request}/what-if/",
        form_rule({"member": 302, "parent_manager": 302, "admin": 302}, 404), {"force": "1"}, api=False),
]


@pytest.fixture
def subjects(demo):
    alice = get_user("alice")
    job = job_submit(user=alice, request=JobRequest(
        cluster="gb200-east", project="olmo", gpus=8, min_runtime=3600, resumable=True, command="python train.py",
    ))
    request = budget_request_create(
        user=alice, unit=alice.memberships.get(unit__name="olmo").unit, cluster=Cluster.objects.get(),
        share=60, justification="more for the long-context run",
    )
    # A what-if already run for it (the GET routes show it; the POST routes run another).
    WhatIf.objects.create(budget_request=request, requested_by=alice, share_percent=60, status="done",
                          snapshot_hour=request.created_at, state_key="earlier")
    token, _ = token_create(user=alice, name="alice's laptop")
    return {"job": job.pk, "request": request.pk, "token": token.pk}


def client_for(role: str, *, api: bool):
    if role == "other_agent":
        client = APIClient(enforce_csrf_checks=not api)
        token = AgentToken.for_host(Host.objects.get(name="hgx-02-h01"))
        client.credentials(HTTP_AUTHORIZATION=f"Agent {token.key}")
        return client
    client = APIClient(enforce_csrf_checks=not api)
    if role != "anonymous":
        user = get_user(USERS[role])
        if api:
            client.credentials(HTTP_AUTHORIZATION=f"Token {api_key(user)}")
        else:
            client.force_login(user)
    return client


def call(row: Row, role: str, ids: dict) -> int:
    client = client_for(role, api=row.api)
    path = row.path.format(**ids)
    if row.method == "get":
        return client.get(path).status_code
    if row.method == "delete":
        return client.delete(path).status_code
    if row.api:
        return client.post(path, row.body, format="json").status_code
    # Pages post forms with the CSRF token a browser would have.
    if role not in ("anonymous", "other_agent"):
        client.get("/login/")
        token = client.cookies.get("csrftoken")
        return client.post(path, row.body, HTTP_X_CSRFTOKEN=token.value if token else "").status_code
    return client.post(path, row.body).status_code


@pytest.mark.parametrize("row", ROWS, ids=[f"{row.method} {row.name}" for row in ROWS])
def test_each_role_gets_what_the_rules_say(row, subjects):
    got = {}
    for role in ROLES:
        # Each role acts on the same starting state.
        with transaction.atomic():
            got[role] = call(row, role, subjects)
            transaction.set_rollback(True)
    assert got == row.expected


def _named_routes(resolver: URLResolver, namespace: str | None = None):
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            inner = pattern.namespace or namespace
            if inner == "admin":
                continue  # Django's admin: staff only, its own rules
            yield from _named_routes(pattern, inner)
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield f"{namespace}:{pattern.name}" if namespace else pattern.name


def test_every_route_has_a_rule():
    ruled = {row.name for row in ROWS}
    missing = sorted(set(_named_routes(get_resolver())) - ruled)
    assert missing == [], f"routes without a permission rule in {__file__}: {missing}"

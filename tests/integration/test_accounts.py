"""Finding 6 and 10: credentials with a lifecycle, login lockout, throttles.

Tokens: a new one per login, with an expiry; a user lists and revokes theirs (API and page). Lockout: after
N failures per account and per address, logins are refused with a message, on the token endpoint, /login/
and /admin/login/. Throttles: per user and address, what-if runs per request and per user.
"""

import re
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone
from rest_framework.throttling import SimpleRateThrottle

from accounts.models import ApiToken
from accounts.services import token_create
from tests.conftest import get_user

pytestmark = pytest.mark.django_db

LOCKED = "Too many failed logins (5) for this account or from this address"


def login(client, username="alice", password="allot-demo", address="127.0.0.1", **extra):
    return client.post("/api/v1/auth/token/", {"username": username, "password": password, **extra},
                       content_type="application/json", REMOTE_ADDR=address)


def get_with(client, key, path="/api/v1/jobs/"):
    return client.get(path, HTTP_AUTHORIZATION=f"Token {key}")


def test_each_login_makes_a_new_token_that_expires(demo, client, settings):
    first, second = login(client).json(), login(client, name="laptop").json()
    assert first["token"] != second["token"] and re.fullmatch(r"[0-9a-f]{40}", first["token"])
    assert second["name"] == "laptop"
    expires = timezone.datetime.fromisoformat(first["expires_at"])
    assert timedelta(days=settings.ALLOT_TOKEN_DAYS - 1) < expires - timezone.now() <= timedelta(
        days=settings.ALLOT_TOKEN_DAYS)
    assert get_with(client, first["token"]).status_code == 200 and get_with(client, second["token"]).status_code == 200
    # Only a digest is kept: the key is nowhere in the database.
    assert not ApiToken.objects.filter(digest=first["token"]).exists()


def test_an_expired_token_is_refused_with_the_reason(demo, client):
    token, key = token_create(user=get_user("alice"))
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = get_with(client, key)
    assert response.status_code == 401 and "expired" in response.json()["detail"]


def test_a_user_lists_and_revokes_their_own_tokens_only(demo, client):
    mine = login(client).json()
    other = login(client).json()
    _, bobs = token_create(user=get_user("bob"))
    listed = get_with(client, mine["token"], "/api/v1/auth/tokens/").json()["results"]
    assert {row["id"] for row in listed} == {mine["id"], other["id"]}
    assert {row["id"]: row["current"] for row in listed} == {mine["id"]: True, other["id"]: False}
    bob_token = ApiToken.objects.get(user__username="bob")
    assert client.delete(f"/api/v1/auth/tokens/{bob_token.pk}/",
                         HTTP_AUTHORIZATION=f"Token {mine['token']}").status_code == 404
    revoked = client.delete(f"/api/v1/auth/tokens/{other['id']}/", HTTP_AUTHORIZATION=f"Token {mine['token']}")
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    assert revoked.json()["revoked_by"] == "alice"
    response = get_with(client, other["token"])
    assert response.status_code == 401 and "revoked" in response.json()["detail"]
    assert get_with(client, bobs).status_code == 200 and get_with(client, mine["token"]).status_code == 200


def test_logout_revokes_the_token_in_use(demo, client):
    key = login(client).json()["token"]
    response = client.post("/api/v1/auth/tokens/logout/", HTTP_AUTHORIZATION=f"Token {key}")
    assert response.status_code == 200 and response.json()["revoke_reason"] == "logged out"
    assert get_with(client, key).status_code == 401


def test_the_account_page_lists_tokens_and_revokes_one(demo, client):
    token, key = token_create(user=get_user("alice"), name="cluster login node")
    client.force_login(get_user("alice"))
    page = client.get("/account/").content.decode()
    assert "cluster login node" in page and token.prefix in page and key not in page
    response = client.post(f"/account/tokens/{token.pk}/revoke/")
    assert response.status_code == 302
    assert get_with(client, key).status_code == 401
    assert "revoked on the account page" in client.get("/account/").content.decode()


def test_the_token_endpoint_locks_an_account_after_five_failures(demo, client):
    for attempt in range(4):
        assert login(client, password="wrong", address=f"10.0.0.{attempt}").status_code == 400
    # The fifth failure locks the account, and says so.
    assert login(client, password="wrong", address="10.0.0.9").status_code == 429
    # The right password, from yet another address: the account is locked.
    response = login(client, address="10.0.1.1")
    assert response.status_code == 429
    assert LOCKED in response.json()["detail"] and "15 minutes" in response.json()["detail"]
    assert int(response["Retry-After"]) == 15 * 60
    # Another account from a fresh address still logs in.
    assert login(client, username="bob", address="10.0.2.2").status_code == 200


def test_logins_from_one_address_are_locked_after_five_failures_whatever_the_account(demo, client):
    for name in ("alice", "bob", "carol", "dan"):
        assert login(client, username=name, password="wrong", address="192.0.2.7").status_code == 400
    assert login(client, username="erin", password="wrong", address="192.0.2.7").status_code == 429
    response = login(client, username="pat", address="192.0.2.7")
    assert response.status_code == 429 and LOCKED in response.json()["detail"]
    assert login(client, username="pat", address="192.0.2.8").status_code == 200


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_the_login_pages_lock_out_with_the_same_message(demo, client, path):
    for _ in range(4):
        response = client.post(path, {"username": "admin", "password": "wrong"})
        assert response.status_code == 200  # the form again, with its error
    assert client.post(path, {"username": "admin", "password": "wrong"}).status_code == 429
    response = client.post(path, {"username": "admin", "password": "allot-demo"})
    assert response.status_code == 429
    assert LOCKED in response.content.decode()
    # The lock is the account's: the token endpoint refuses it too.
    assert login(client, username="admin", address="10.9.9.9").status_code == 429


def test_a_successful_login_resets_the_account_s_count(demo, client):
    for _ in range(4):
        login(client, password="wrong", address="10.1.0.1")
    assert login(client, address="10.1.0.1").status_code == 200
    for _ in range(4):
        login(client, password="wrong", address="10.1.0.2")
    assert login(client, address="10.1.0.2").status_code == 200


def test_changing_the_password_revokes_every_token(demo, client):
    _, key = token_create(user=get_user("alice"))
    client.force_login(get_user("alice"))
    response = client.post("/account/password/", {"old_password": "allot-demo", "new_password1": "a-new-pass-42",
                                                  "new_password2": "a-new-pass-42"})
    assert response.status_code == 302
    assert get_with(client, key).status_code == 401
    assert get_user("alice").check_password("a-new-pass-42")


def test_a_password_is_reset_by_e_mail(demo, client):
    alice = get_user("alice")
    alice.email = "alice@example.org"
    alice.save()
    _, key = token_create(user=alice)
    response = client.post("/account/password/reset/", {"email": "alice@example.org"})
    assert response.status_code == 302 and len(mail.outbox) == 1
    link = re.search(r"https?://[^/]+(/account/password/reset/\S+/)", mail.outbox[0].body).group(1)
    form = client.get(link, follow=True)
    assert form.status_code == 200 and b"new_password1" in form.content
    new = {"new_password1": "reset-pass-77", "new_password2": "reset-pass-77"}
    response = client.post(form.redirect_chain[-1][0], new)
    assert response.status_code == 302
    assert get_user("alice").check_password("reset-pass-77")
    assert get_with(client, key).status_code == 401
    # An address no account has: the same answer, and no mail.
    client.post("/account/password/reset/", {"email": "nobody@example.org"})
    assert len(mail.outbox) == 1


@pytest.fixture
def rates(monkeypatch):
    def set_rate(scope, rate):
        monkeypatch.setitem(SimpleRateThrottle.THROTTLE_RATES, scope, rate)
    return set_rate


def test_api_calls_are_throttled_per_user_and_per_address(demo, client, rates):
    rates("user", "3/min")
    key = login(client).json()["token"]
    assert [get_with(client, key).status_code for _ in range(4)] == [200, 200, 200, 429]
    assert "throttled" in get_with(client, key).json()["detail"]
    rates("user", "100/min")
    rates("ip", "2/min")
    _, bob = token_create(user=get_user("bob"))
    assert client.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {bob}", REMOTE_ADDR="198.51.100.1").status_code == 200
    assert client.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {bob}", REMOTE_ADDR="198.51.100.1").status_code == 200
    assert client.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {bob}", REMOTE_ADDR="198.51.100.1").status_code == 429
    assert client.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {bob}", REMOTE_ADDR="198.51.100.2").status_code == 200


def test_token_logins_are_throttled_per_address(demo, client, rates):
    rates("login", "2/min")
    assert [login(client, address="203.0.113.5").status_code for _ in range(3)] == [200, 200, 429]
    assert login(client, address="203.0.113.6").status_code == 200


def test_what_if_runs_are_throttled_per_request_and_per_user(demo, api, rates):
    from budgets.services import budget_request_create
    from topology.models import Cluster

    rates("what_if_request", "2/hour")
    rates("what_if_user", "3/hour")
    alice = get_user("alice")
    first = budget_request_create(user=alice, unit=alice.memberships.get(unit__name="olmo").unit,
                                  cluster=Cluster.objects.get(), share=60, justification="more")
    client = api.as_user(alice)
    path = f"/api/v1/budget-requests/{first.pk}/what-if/"
    codes = [client.post(path, {"force": True, "share": share}, format="json").status_code for share in (55, 60, 65)]
    assert codes == [201, 201, 429]
    assert client.get(path).status_code == 200  # reading the result is not a run
    # pat may still run one for it? No: the request's budget of runs is spent, whoever asks.
    assert api.as_user(get_user("pat")).post(path, {"force": True}, format="json").status_code == 429


def test_what_if_runs_from_the_page_share_the_api_s_throttle(demo, api, client, rates):
    from budgets.models import WhatIf
    from budgets.services import budget_request_create
    from topology.models import Cluster

    rates("what_if_request", "1/hour")
    alice = get_user("alice")
    request = budget_request_create(user=alice, unit=alice.memberships.get(unit__name="olmo").unit,
                                    cluster=Cluster.objects.get(), share=60, justification="more")
    assert api.as_user(alice).post(f"/api/v1/budget-requests/{request.pk}/what-if/", {"force": True},
                                   format="json").status_code == 201
    client.force_login(get_user("pat"))
    response = client.post(f"/budgets/requests/{request.pk}/what-if/", {"force": "1"})
    assert response.status_code == 429
    assert "Too many what-if runs" in response.content.decode()
    assert WhatIf.objects.filter(budget_request=request).count() == 1

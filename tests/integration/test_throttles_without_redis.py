"""With Redis down, the throttles let requests through: a guard against abuse never stops the service."""

import pytest
from django.core.cache.backends.redis import RedisCache

from accounts.throttles import THROTTLE_CACHE, FailOpenCache
from tests.conftest import get_user

pytestmark = pytest.mark.django_db


def test_an_unreachable_throttle_cache_lets_requests_through(demo, api, monkeypatch):
    # A Redis nobody listens on (port 9 on this machine: discard, closed).
    unreachable = RedisCache("redis://127.0.0.1:9/0", {"OPTIONS": {"socket_connect_timeout": 0.2}})
    monkeypatch.setattr(THROTTLE_CACHE, "_cache", unreachable)
    response = api.as_user(get_user("alice")).get("/api/v1/jobs/")
    assert response.status_code == 200
    assert FailOpenCache(unreachable).get("x", []) == []

"""DRF throttles: per user and per client address for every call, tighter for logins and what-if runs.

Rates are settings (REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], from ALLOT_THROTTLE_* in the environment);
counts live in Django's cache (Redis when REDIS_URL is set, so every server process shares them).
A host's agent is not throttled here: it reports on its own clock, and its token stands for one host.
"""

import logging

from django.core.cache import cache as default_cache
from rest_framework.throttling import SimpleRateThrottle, UserRateThrottle

log = logging.getLogger(__name__)


class FailOpenCache:
    """The throttles' cache: if it is unreachable (Redis down), requests are let through, not failed.

    A throttle is a guard against abuse, not a reason to stop serving: with Redis down the pages, the API
    and the scheduler keep going (tests/faults/test_redis_down.py), unthrottled until Redis returns.
    """

    def __init__(self, cache):
        self._cache = cache

    def get(self, key, default=None):
        try:
            return self._cache.get(key, default)
        except Exception as error:  # noqa: BLE001 - whatever the backend raises when it is unreachable
            log.warning("throttle cache unreachable (%s): not throttling", error.__class__.__name__)
            return default

    def set(self, key, value, timeout=None):
        try:
            self._cache.set(key, value, timeout)
        except Exception as error:  # noqa: BLE001
            log.warning("throttle cache unreachable (%s): not throttling", error.__class__.__name__)


THROTTLE_CACHE = FailOpenCache(default_cache)


def _is_agent(request) -> bool:
    """An agent's principal (scheduler/api/authentication.py `AgentPrincipal`) says so; users do not."""
    return getattr(getattr(request, "user", None), "is_agent", False) is True


class UserThrottle(UserRateThrottle):
    """Per signed-in user (per address for anonymous callers)."""

    scope = "user"
    cache = THROTTLE_CACHE

    def allow_request(self, request, view):
        return _is_agent(request) or super().allow_request(request, view)


class AddressThrottle(SimpleRateThrottle):
    """Per client address, whoever is signed in."""

    scope = "ip"
    cache = THROTTLE_CACHE

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def allow_request(self, request, view):
        return _is_agent(request) or super().allow_request(request, view)


class LoginThrottle(AddressThrottle):
    """Token logins per client address (the lockout counts failures per account and address besides)."""

    scope = "login"


class _PostOnly(SimpleRateThrottle):
    cache = THROTTLE_CACHE

    def allow_request(self, request, view):
        return request.method != "POST" or super().allow_request(request, view)


class WhatIfUserThrottle(_PostOnly):
    """What-if runs per user: each one simulates a week of the cluster twice."""

    scope = "what_if_user"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk or self.get_ident(request)}


class WhatIfRequestThrottle(_PostOnly):
    """What-if runs per budget request, whoever asks."""

    scope = "what_if_request"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": view.kwargs.get("pk")}


def what_if_wait(request, budget_request_pk) -> float | None:
    """For the pages (no DRF view): None when one more what-if run of this request may start now, else the
    seconds to wait — the same two throttles and counts as the API's."""
    view = type("WhatIfPage", (), {"kwargs": {"pk": budget_request_pk}})()
    waits = []
    for throttle in (WhatIfUserThrottle(), WhatIfRequestThrottle()):
        if not throttle.allow_request(request, view):
            waits.append(throttle.wait() or 0)
    return max(waits) if waits else None

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from rest_framework.test import APIClient

from accounts.services import token_create

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "demo"


@pytest.fixture
def demo(db):
    """The demo cluster and org, loaded through the real loaders."""
    from budgets.loaders import load_org_file
    from topology.loaders import load_cluster_file

    cluster, _ = load_cluster_file(DEMO / "cluster.yaml")
    load_org_file(DEMO / "org.yaml")
    return cluster


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user("ursula", password="ursula-password")


@pytest.fixture
def api():
    """An API client; `api.as_user(user)` authenticates with a new API token of the user's."""

    class Client(APIClient):
        def as_user(self, who):
            self.credentials(HTTP_AUTHORIZATION=f"Token {api_key(who)}")
            return self

    return Client()


def api_key(user, name="tests") -> str:
    """The key of a new API token for `user`, as `allot login` would get one."""
    return token_create(user=user, name=name)[1]


@pytest.fixture(autouse=True)
def fresh_throttles():
    """Throttle counts live in the cache: each test starts with none."""
    cache.clear()
    yield
    cache.clear()


def get_user(username):
    return get_user_model().objects.get(username=username)


@pytest.fixture
def demo_org_units(db):
    """The demo org's units with no cluster shares (for tests that load their own cluster)."""
    from budgets.models import Unit

    nlp = Unit.objects.create(name="nlp")
    for name in ("olmo", "tulu"):
        Unit.objects.create(name=name, parent=nlp)
    get_user_model().objects.create_user("alice", password="allot-demo")
    return nlp


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Demo users have passwords; the production hasher would make every test slow."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

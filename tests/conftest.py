from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

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
    """An API client; `api.as_user(user)` authenticates with the user's token."""

    class Client(APIClient):
        def as_user(self, who):
            token, _ = Token.objects.get_or_create(user=who)
            self.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
            return self

    return Client()


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

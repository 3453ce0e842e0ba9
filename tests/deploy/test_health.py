"""/healthz says the process serves; /readyz says whether this deployment can do its job, and why not."""

from datetime import timedelta

import pytest
import time_machine
from django.db import OperationalError
from django.utils import timezone

import config.health
from scheduler.tick import run_tick

pytestmark = pytest.mark.django_db


def test_healthz_answers_without_login_or_database(client, monkeypatch):
    monkeypatch.setattr(config.health, "_database", lambda: pytest.fail("healthz touched the database"))
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_ready_once_every_cluster_ticked_recently(client, demo):
    run_tick(demo)
    response = client.get("/readyz")
    assert response.status_code == 200, response.json()
    assert response.json() == {"status": "ready",
                               "checks": {"database": "ok", "migrations": "ok", "scheduler": "ok"}}


def test_not_ready_while_a_cluster_was_never_ticked(client, demo):
    response = client.get("/readyz")
    assert response.status_code == 503
    assert "gb200-east never ticked" in response.json()["checks"]["scheduler"]


def test_not_ready_when_the_last_tick_is_older_than_three_intervals(client, demo, settings):
    settings.ALLOT_TICK_SECONDS = 5
    now = timezone.now()
    with time_machine.travel(now, tick=False):
        run_tick(demo, now=now - timedelta(seconds=16))
        reason = client.get("/readyz").json()["checks"]["scheduler"]
        assert "no leader ticked within 3 ticks (15 s)" in reason
        assert "gb200-east last ticked 16 s ago" in reason
        run_tick(demo, now=now - timedelta(seconds=14))
        assert client.get("/readyz").status_code == 200


def test_not_ready_when_the_broker_is_unreachable(client, demo, settings):
    run_tick(demo)
    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # nothing listens on the discard port
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["broker"].startswith("unreachable")
    assert response.json()["checks"]["scheduler"] == "ok"


def test_not_ready_with_migrations_pending_naming_them(client, demo, monkeypatch):
    run_tick(demo)
    monkeypatch.setattr(config.health, "_migrations_done", False)

    class Migration:
        app_label, name = "scheduler", "0099_future"

    monkeypatch.setattr(config.health.MigrationExecutor, "migration_plan", lambda self, targets: [(Migration, False)])
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["migrations"] == (
        "1 not applied (scheduler.0099_future): run `manage.py migrate`")


def test_not_ready_when_the_database_is_unreachable(client, monkeypatch):
    def refuse():
        raise OperationalError("connection to server at \"db\" failed: Connection refused")

    monkeypatch.setattr(config.health.connection, "cursor", refuse)
    response = client.get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"].startswith("unreachable: OperationalError: connection to server")
    assert checks["scheduler"] == "not checked: database unreachable"

"""Two approvals race for the same room: one wins, the other fails naming the room left.

Each approval runs in its own thread with its own database connection. A
slowed-down room check keeps both inside `budget_request_approve` at once, so
without the parent's row lock both would see the room and both would commit.
Runs on SQLite (IMMEDIATE transactions) and PostgreSQL (SELECT ... FOR UPDATE).
"""

import threading
import time
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, connections

from budgets import services
from budgets.choices import RequestStatus
from budgets.models import Allocation, AllocationChange, BudgetRequest, Unit
from budgets.services import allocations_expire, budget_request_approve, budget_request_create
from tests.conftest import get_user

pytestmark = pytest.mark.django_db(transaction=True)


def in_threads(*calls, timeout=60):
    """Run each call in its own thread (own connection), all released at once; → results or exceptions."""
    barrier = threading.Barrier(len(calls))
    results = [None] * len(calls)

    def run(index, call):
        try:
            barrier.wait()
            results[index] = call()
        except Exception as error:  # noqa: BLE001 — the test inspects what each thread got
            results[index] = error
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(index, call)) for index, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    return results


@pytest.fixture
def slow_room_check(monkeypatch):
    """Hold each approval between reading the room and writing its share, long enough for the other to arrive."""
    real = services.room_for

    def slow(*args, **kwargs):
        found = real(*args, **kwargs)
        time.sleep(0.4)
        return found

    monkeypatch.setattr(services, "room_for", slow)


def test_of_two_approvals_racing_for_the_same_room_one_fails_with_the_room_left(demo, slow_room_check):
    # multimodal's children hold 90 %: 10 % of room. Two requests want 8 % of it each.
    cluster = demo
    molmo = budget_request_create(user=get_user("dan"), unit=Unit.objects.get(name="molmo"), cluster=cluster,
                                  share="78", justification="video pretraining")
    pixmo = budget_request_create(user=get_user("erin"), unit=Unit.objects.get(name="pixmo"), cluster=cluster,
                                  share="28", justification="more captions")
    mia = get_user("mia")

    results = in_threads(
        lambda: budget_request_approve(request=BudgetRequest.objects.get(pk=molmo.pk), approver=mia),
        lambda: budget_request_approve(request=BudgetRequest.objects.get(pk=pixmo.pk), approver=mia),
    )

    failures = [result for result in results if isinstance(result, Exception)]
    assert len(failures) == 1, results
    assert isinstance(failures[0], ValidationError), repr(failures[0])
    message = failures[0].message_dict["share"][0]
    assert ("so molmo can have at most 72 %, 2 % more than its 70 %; 78 % was asked" in message
            or "so pixmo can have at most 22 %, 2 % more than its 20 %; 28 % was asked" in message), message
    statuses = sorted(BudgetRequest.objects.values_list("status", flat=True))
    assert statuses == [RequestStatus.APPROVED, RequestStatus.PENDING]
    current = Allocation.objects.current().filter(unit__parent__name="multimodal")
    assert sum(row.share_percent for row in current) == Decimal("98")
    assert AllocationChange.objects.filter(source="request").count() == 1


def test_two_approvals_of_the_same_request_grant_it_once(demo, slow_room_check):
    request = budget_request_create(user=get_user("dan"), unit=Unit.objects.get(name="pixmo"), cluster=demo,
                                    share="25", justification="more captions")
    mia = get_user("mia")
    approve = lambda: budget_request_approve(request=BudgetRequest.objects.get(pk=request.pk), approver=mia)  # noqa: E731
    results = in_threads(approve, approve)
    failures = [result for result in results if isinstance(result, Exception)]
    assert len(failures) == 1 and "is approved" in str(failures[0]), results
    assert AllocationChange.objects.filter(source="request").count() == 1


def test_two_expiry_runs_at_once_record_each_expiry_once(demo):
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    request = budget_request_create(user=get_user("dan"), unit=Unit.objects.get(name="pixmo"), cluster=demo,
                                    share="25", ends_at=now + timedelta(hours=1), justification="a week of labels")
    budget_request_approve(request=request, approver=get_user("mia"), now=now)
    later = now + timedelta(hours=2)
    results = in_threads(lambda: allocations_expire(now=later), lambda: allocations_expire(now=later))
    assert not any(isinstance(result, Exception) for result in results), results
    assert sorted(len(result) for result in results) == [0, 1]
    assert AllocationChange.objects.filter(source="expiry").count() == 1


def test_the_database_under_test(demo):
    """Say which backend ran the races (both must pass in CI)."""
    assert connection.vendor in {"sqlite", "postgresql"}

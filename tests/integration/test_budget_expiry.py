"""Time-limited grants end on their own at ends_at; the expiry is recorded once; the earlier share comes back."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.utils import timezone

from budgets.choices import ChangeSource
from budgets.models import Allocation, AllocationChange, Unit
from budgets.selectors import current_shares
from budgets.services import (
    allocation_set_shares,
    allocations_expire,
    budget_request_approve,
    budget_request_create,
)
from budgets.tasks import expire_allocations
from tests.conftest import get_user

pytestmark = pytest.mark.django_db

MONDAY = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def unit(name):
    return Unit.objects.get(name=name)


def shares_now(cluster, *names):
    current = current_shares(cluster, timezone.now())
    return tuple(current.get(unit(name).pk) for name in names)


@pytest.fixture
def week_grant(demo):
    """From Monday, olmo has 70 % of nlp for a week, 15 % of it lent by tulu."""
    with time_machine.travel(MONDAY, tick=False):
        request = budget_request_create(
            user=get_user("alice"), unit=unit("olmo"), cluster=demo, share="70", ends_at=MONDAY + timedelta(days=7),
            justification="a week of long-context runs",
        )
        budget_request_approve(request=request, approver=get_user("pat"), take_from={unit("tulu"): "15"})
    return request


def test_a_time_limited_grant_stops_counting_at_its_end_with_no_task_run(demo, week_grant):
    with time_machine.travel(MONDAY + timedelta(days=6, hours=23), tick=False):
        assert shares_now(demo, "olmo", "tulu") == (Decimal(70), Decimal(15))
    with time_machine.travel(MONDAY + timedelta(days=7), tick=False):
        # The scheduler reads current_shares: the earlier shares are back at the very moment, unrecorded yet.
        assert shares_now(demo, "olmo", "tulu") == (Decimal(55), Decimal(30))
        assert not AllocationChange.objects.filter(source=ChangeSource.EXPIRY).exists()


def test_the_expiry_is_recorded_once_with_the_system_as_actor(demo, week_grant):
    end = MONDAY + timedelta(days=7)
    with time_machine.travel(end - timedelta(minutes=1), tick=False):
        assert allocations_expire(now=timezone.now()) == []
    with time_machine.travel(end + timedelta(minutes=3), tick=False):
        changes = allocations_expire(now=timezone.now())
        assert allocations_expire(now=timezone.now()) == []  # exactly once
    by_unit = {change.unit.name: change for change in changes}
    assert set(by_unit) == {"olmo", "tulu"}
    olmo = by_unit["olmo"]
    assert (olmo.actor, olmo.source, olmo.at) == ("system:expiry", ChangeSource.EXPIRY, end)
    assert (olmo.before_percent, olmo.after_percent) == (Decimal(70), Decimal(55))
    assert olmo.budget_request == week_grant
    assert olmo.reason == (
        f"the time-limited grant of request #{week_grant.pk} ended; olmo returns to 55 % of nlp"
    )
    tulu = by_unit["tulu"]
    assert (tulu.before_percent, tulu.after_percent) == (Decimal(15), Decimal(30))
    assert tulu.reason.startswith(f"room lent to olmo for request #{week_grant.pk} came back")
    assert AllocationChange.objects.filter(source=ChangeSource.EXPIRY).count() == 2


def test_a_grant_for_a_unit_with_no_share_before_leaves_it_with_none(demo):
    Unit.objects.create(name="grounding", parent=unit("multimodal"))
    from budgets.models import Membership

    Membership.objects.create(user=get_user("dan"), unit=unit("grounding"), role="member")
    with time_machine.travel(MONDAY, tick=False):
        request = budget_request_create(
            user=get_user("dan"), unit=unit("grounding"), cluster=demo, share="10",
            ends_at=MONDAY + timedelta(days=2), justification="a two-day sprint",
        )
        budget_request_approve(request=request, approver=get_user("mia"))
        assert shares_now(demo, "grounding") == (Decimal(10),)
    with time_machine.travel(MONDAY + timedelta(days=3), tick=False):
        assert shares_now(demo, "grounding") == (None,)
        (change,) = allocations_expire(now=timezone.now())
    assert change.after_percent is None and change.reason.endswith("grounding has no share of gb200-east now")


def test_a_grant_cut_short_by_a_direct_edit_is_not_recorded_as_an_expiry(demo, week_grant):
    with time_machine.travel(MONDAY + timedelta(days=2), tick=False):
        allocation_set_shares(
            parent=unit("nlp"), cluster=demo, actor=get_user("pat"), reason="olmo's run finished early",
            shares={unit("olmo"): "55", unit("tulu"): "30"},
        )
    with time_machine.travel(MONDAY + timedelta(days=8), tick=False):
        assert allocations_expire(now=timezone.now()) == []
        assert shares_now(demo, "olmo", "tulu") == (Decimal(55), Decimal(30))
    ended = Allocation.objects.get(unit__name="olmo", budget_request=week_grant)
    assert ended.valid_to == MONDAY + timedelta(days=2)


def test_the_celery_task_takes_no_arguments_and_records_the_expiries(demo, week_grant):
    from config.celery import app

    app.loader.import_default_modules()  # what a worker does at start
    assert "budgets.tasks.expire_allocations" in app.tasks
    with time_machine.travel(MONDAY + timedelta(days=8), tick=False):
        assert expire_allocations() == 2
        assert expire_allocations() == 0

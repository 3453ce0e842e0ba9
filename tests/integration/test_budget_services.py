"""Budget workflows on the demo org: requests, decisions, room, escalation, direct edits, the ledger.

The demo org on gb200-east: nlp 60 % (pat) → olmo 55 % (lee; alice, bob), tulu 30 % (carol),
safety 15 % (bob, erin); multimodal 40 % (mia) → molmo 70 % (dan), pixmo 20 % (dan, erin).
nlp's children hold 100 % of it; multimodal's hold 90 %; the top level holds 100 %.
"""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from budgets.choices import ChangeSource, RequestStatus
from budgets.models import Allocation, AllocationChange, BudgetRequest, Unit
from budgets.selectors import waiting_count, waiting_for
from budgets.services import (
    allocation_set_shares,
    budget_request_approve,
    budget_request_cancel,
    budget_request_create,
    budget_request_deny,
    budget_request_escalate,
)
from tests.conftest import get_user

pytestmark = pytest.mark.django_db


def unit(name):
    return Unit.objects.get(name=name)


def share(name, at=None):
    row = Allocation.objects.current(at).filter(unit__name=name).first()
    return row.share_percent if row else None


def ask(username, unit_name, percent, cluster, **fields):
    fields.setdefault("justification", "a 7B ablation sweep before the deadline")
    return budget_request_create(
        user=get_user(username), unit=unit(unit_name), cluster=cluster, share=percent, **fields,
    )


def messages_of(error) -> str:
    return " ".join(message for messages in error.value.message_dict.values() for message in messages)


def test_it_sends_a_request_to_the_managers_of_the_parent(demo):
    request = ask("alice", "olmo", "60", demo)
    assert request.status == RequestStatus.PENDING and request.decider_unit.name == "nlp"
    assert list(waiting_for(get_user("pat"))) == [request]
    assert waiting_count(get_user("pat")) == 1
    for nobody in ("lee", "mia", "alice", "admin", "olga"):
        assert waiting_count(get_user(nobody)) == 0
        assert not waiting_for(get_user(nobody)).exists()
    assert share("olmo") == Decimal("55")  # nothing changes until someone decides


def test_an_approval_closes_the_old_allocation_opens_a_new_one_and_records_who_and_why(demo):
    request = ask("dan", "pixmo", "30", demo, justification="image data pipeline at full speed")
    before = Allocation.objects.current().get(unit__name="pixmo")

    budget_request_approve(request=request, approver=get_user("mia"), comment="fits")

    request.refresh_from_db()
    assert (request.status, request.granted_percent, request.decided_by.username) == ("approved", Decimal(30), "mia")
    assert share("pixmo") == Decimal("30")
    before.refresh_from_db()
    assert before.valid_to is not None and before.share_percent == Decimal("20")  # closed, never edited
    assert Allocation.objects.filter(unit__name="pixmo").count() == 2
    change = AllocationChange.objects.filter(unit__name="pixmo").first()
    assert (change.actor, change.source, change.before_percent, change.after_percent) == (
        "mia", ChangeSource.REQUEST, Decimal(20), Decimal(30))
    assert change.budget_request == request and change.allocation == request.allocation
    assert f"request #{request.pk}" in change.reason and "fits" in change.reason


def test_a_manager_approves_a_smaller_amount_only_with_a_comment(demo):
    request = ask("dan", "pixmo", "30", demo)
    with pytest.raises(ValidationError) as refused:
        budget_request_approve(request=request, approver=get_user("mia"), share="25")
    assert "comment" in refused.value.message_dict

    budget_request_approve(request=request, approver=get_user("mia"), share="25", comment="25 % until Q3")
    request.refresh_from_db()
    assert (request.requested_percent, request.granted_percent, request.comment) == (
        Decimal(30), Decimal(25), "25 % until Q3")
    assert share("pixmo") == Decimal("25")


def test_a_denial_needs_a_comment_and_changes_no_share(demo):
    request = ask("dan", "pixmo", "30", demo)
    with pytest.raises(ValidationError) as refused:
        budget_request_deny(request=request, decider=get_user("mia"), comment="  ")
    assert "comment" in refused.value.message_dict
    budget_request_deny(request=request, decider=get_user("mia"), comment="use the unallocated time")
    request.refresh_from_db()
    assert request.status == RequestStatus.DENIED and request.decided_by.username == "mia"
    assert share("pixmo") == Decimal(20) and not AllocationChange.objects.filter(source="request").exists()
    with pytest.raises(ValidationError, match="denied"):
        budget_request_approve(request=request, approver=get_user("mia"))


def test_without_room_the_approval_is_refused_naming_the_room_left(demo):
    request = ask("alice", "olmo", "70", demo)
    with pytest.raises(ValidationError) as refused:
        budget_request_approve(request=request, approver=get_user("pat"))
    message = messages_of(refused)
    assert message == (
        "Not enough room: the other children of nlp hold 45 % of it on gb200-east, so olmo can have at most 55 %; "
        "70 % was asked. Approve at most that, take room from a sibling, or escalate."
    )
    assert share("olmo") == Decimal(55)
    request.refresh_from_db()
    assert request.status == RequestStatus.PENDING


def test_a_manager_takes_the_room_from_a_sibling_in_the_same_decision(demo):
    request = ask("alice", "olmo", "70", demo)
    budget_request_approve(
        request=request, approver=get_user("pat"), take_from={unit("tulu"): "15"}, comment="tulu is idle",
    )
    assert (share("olmo"), share("tulu"), share("safety")) == (Decimal(70), Decimal(15), Decimal(15))
    tulu = AllocationChange.objects.filter(unit__name="tulu").first()
    assert tulu.actor == "pat" and tulu.budget_request == request and "room for request" in tulu.reason
    with pytest.raises(ValidationError, match="not a sibling"):
        budget_request_approve(
            request=ask("dan", "molmo", "80", demo), approver=get_user("mia"), take_from={unit("olmo"): "10"},
        )


def test_escalation_asks_the_level_above_and_the_request_comes_back_with_the_room(demo):
    request = ask("alice", "olmo", "70", demo)
    escalation = budget_request_escalate(request=request, decider=get_user("pat"), comment="nlp is full")

    request.refresh_from_db()
    assert request.status == RequestStatus.ESCALATED
    assert (escalation.unit.name, escalation.requested_by.username, escalation.decider_unit) == ("nlp", "pat", None)
    assert escalation.requested_percent == Decimal("69.00")  # 60 % × (45 + 70) / 100: siblings keep GPU-hours
    assert escalation.escalated_from == request and escalation.origin == request
    assert waiting_count(get_user("admin")) == 1 and waiting_count(get_user("pat")) == 0

    budget_request_approve(
        request=escalation, approver=get_user("admin"), take_from={unit("multimodal"): "31"}, comment="ok",
    )
    request.refresh_from_db()
    assert request.status == RequestStatus.PENDING and share("nlp") == Decimal(69)
    assert waiting_count(get_user("pat")) == 1
    # pat now shares out the new room: olmo's 42 % of the cluster is 60.87 % of the larger nlp.
    budget_request_approve(
        request=request, approver=get_user("pat"), share="60.87", comment="as asked, in GPU-hours",
        take_from={unit("tulu"): "26.08", unit("safety"): "13.04"},
    )
    assert share("olmo") * share("nlp") / 100 == pytest.approx(Decimal("42"), abs=Decimal("0.01"))


def test_a_denied_escalation_returns_the_request_to_its_deciders(demo):
    request = ask("alice", "olmo", "70", demo)
    escalation = budget_request_escalate(request=request, decider=get_user("pat"))
    budget_request_deny(request=escalation, decider=get_user("admin"), comment="no room at the top")
    request.refresh_from_db()
    assert request.status == RequestStatus.PENDING
    budget_request_deny(request=request, decider=get_user("pat"), comment="not this quarter")


def test_escalation_is_only_for_a_request_that_does_not_fit_and_has_a_level_above(demo):
    with pytest.raises(ValidationError, match="has room"):
        budget_request_escalate(request=ask("dan", "pixmo", "25", demo), decider=get_user("mia"))
    top = ask("pat", "nlp", "70", demo)
    with pytest.raises(ValidationError, match="top-level"):
        budget_request_escalate(request=top, decider=get_user("admin"))


def test_a_future_dated_grant_counts_against_the_room_from_its_start(demo):
    now = timezone.now()
    later = ask("dan", "pixmo", "30", demo, starts_at=now + timedelta(days=5))
    budget_request_approve(request=later, approver=get_user("mia"), now=now)
    assert share("pixmo", now) == Decimal(20) and share("pixmo", now + timedelta(days=5, seconds=1)) == Decimal(30)

    # multimodal has 10 % free today, none from day 5: a permanent +5 % for molmo now cannot fit.
    more = ask("dan", "molmo", "75", demo)
    with pytest.raises(ValidationError) as refused:
        budget_request_approve(request=more, approver=get_user("mia"), now=now)
    assert "hold 30 % of it on gb200-east from " in messages_of(refused)
    assert "so molmo can have at most 70 %; 75 % was asked" in messages_of(refused)
    # ...but a time-limited one that ends before day 5 fits.
    budget_request_deny(request=more, decider=get_user("mia"), comment="ask for four days")
    short = ask("dan", "molmo", "80", demo, ends_at=now + timedelta(days=4))
    budget_request_approve(request=short, approver=get_user("mia"), now=now)
    assert share("molmo", now + timedelta(days=1)) == Decimal(80)
    assert share("molmo", now + timedelta(days=4, seconds=1)) == Decimal(70)


def test_a_time_limited_grant_lends_a_siblings_room_and_gives_it_back_at_the_end(demo):
    now = timezone.now()
    ends = now + timedelta(days=7)
    request = ask("alice", "olmo", "70", demo, ends_at=ends)
    budget_request_approve(request=request, approver=get_user("pat"), take_from={unit("tulu"): "15"}, now=now)
    assert (share("olmo", now), share("tulu", now)) == (Decimal(70), Decimal(15))
    after = ends + timedelta(seconds=1)
    assert (share("olmo", after), share("tulu", after)) == (Decimal(55), Decimal(30))


@pytest.mark.parametrize(
    "value, message",
    [("101", "between 0 and 100"), ("-1", "between 0 and 100"), ("12.345", "two decimals"),
     ("lots", "not a percentage"), ("", "required")],
)
def test_a_bad_share_is_refused_naming_the_field_and_the_limit(demo, value, message):
    with pytest.raises(ValidationError) as refused:
        ask("alice", "olmo", value, demo)
    assert list(refused.value.message_dict) == ["share"] and message in messages_of(refused)


def test_bad_dates_and_empty_justifications_are_refused_naming_the_field(demo):
    now = timezone.now()
    cases = [
        ({"ends_at": now - timedelta(hours=1)}, "ends_at"),
        ({"starts_at": now + timedelta(days=2), "ends_at": now + timedelta(days=1)}, "ends_at"),
        ({"starts_at": now - timedelta(days=1)}, "starts_at"),
        ({"justification": "   "}, "justification"),
        ({"justification": "x" * 2001}, "justification"),
    ]
    for fields, field in cases:
        with pytest.raises(ValidationError) as refused:
            ask("alice", "olmo", "60", demo, **fields)
        assert list(refused.value.message_dict) == [field], fields
    assert not BudgetRequest.objects.exists()


def test_one_open_request_per_requester_unit_and_cluster_and_no_request_for_the_current_share(demo):
    """Finding 10: one open request per unit let any member block everyone else in the unit."""
    first = ask("alice", "olmo", "60", demo)
    with pytest.raises(ValidationError) as refused:
        ask("alice", "olmo", "65", demo)
    assert f"your request #{first.pk}" in messages_of(refused)
    # Another member of the unit is not blocked by alice's request.
    bobs = ask("bob", "olmo", "65", demo)
    assert bobs.status == RequestStatus.PENDING
    budget_request_cancel(request=first, user=get_user("alice"))
    ask("alice", "olmo", "62", demo)
    with pytest.raises(ValidationError, match="already has 30 %"):
        ask("carol", "tulu", "30", demo)


def test_the_requester_cancels_and_an_escalation_above_goes_with_it(demo):
    request = ask("alice", "olmo", "70", demo)
    escalation = budget_request_escalate(request=request, decider=get_user("pat"))
    with pytest.raises(PermissionDenied):
        budget_request_cancel(request=request, user=get_user("bob"))
    budget_request_cancel(request=request, user=get_user("alice"))
    request.refresh_from_db()
    escalation.refresh_from_db()
    assert (request.status, escalation.status) == (RequestStatus.CANCELLED, RequestStatus.CANCELLED)
    with pytest.raises(ValidationError, match="cancelled"):
        budget_request_cancel(request=request, user=get_user("alice"))


def test_a_manager_reallocates_the_children_directly_with_a_reason(demo):
    changes = allocation_set_shares(
        parent=unit("nlp"), cluster=demo, actor=get_user("pat"), reason="olmo ships in March",
        shares={unit("olmo"): "60", unit("tulu"): "25", unit("safety"): "15"},
    )
    assert [(c.unit.name, c.before_percent, c.after_percent) for c in changes] == [
        ("olmo", Decimal(55), Decimal(60)), ("tulu", Decimal(30), Decimal(25))]  # safety did not change
    assert all(c.actor == "pat" and c.source == ChangeSource.DIRECT and c.reason == "olmo ships in March"
               for c in changes)


def test_a_direct_edit_that_passes_100_percent_or_has_no_reason_changes_nothing(demo):
    with pytest.raises(ValidationError) as refused:
        allocation_set_shares(parent=unit("nlp"), cluster=demo, actor=get_user("pat"), reason="more",
                              shares={unit("olmo"): "60"})
    assert "105 %" in messages_of(refused) and "over 100 %" in messages_of(refused)
    with pytest.raises(ValidationError) as refused:
        allocation_set_shares(parent=unit("nlp"), cluster=demo, actor=get_user("pat"), reason=" ",
                              shares={unit("olmo"): "50"})
    assert list(refused.value.message_dict) == ["reason"]
    with pytest.raises(ValidationError) as refused:
        allocation_set_shares(parent=unit("nlp"), cluster=demo, actor=get_user("pat"), reason="x",
                              shares={unit("molmo"): "50"})
    assert "not a child of nlp" in messages_of(refused)
    assert share("olmo") == Decimal(55) and not AllocationChange.objects.filter(source="direct").exists()


def test_a_direct_edit_ends_a_time_limited_grant_in_effect(demo):
    now = timezone.now()
    request = ask("dan", "pixmo", "30", demo, ends_at=now + timedelta(days=3))
    budget_request_approve(request=request, approver=get_user("mia"), now=now)
    later = now + timedelta(hours=1)
    allocation_set_shares(parent=unit("multimodal"), cluster=demo, actor=get_user("mia"), reason="rebalance",
                          shares={unit("pixmo"): "25"}, now=later)
    assert share("pixmo", later) == Decimal(25)
    assert share("pixmo", now + timedelta(days=4)) == Decimal(25)  # no revert to 20: the edit replaced it
    granted = Allocation.objects.get(budget_request=request, unit__name="pixmo")
    assert granted.valid_to == later and granted.end_recorded  # cut short and recorded by the edit


def test_a_reloaded_org_file_must_leave_room_for_scheduled_grants(demo, tmp_path):
    import yaml

    from budgets.loaders import load_org_file
    from tests.conftest import DEMO
    from topology.loaders import LoadError

    now = timezone.now()
    request = ask("dan", "pixmo", "30", demo, starts_at=now + timedelta(days=2), ends_at=now + timedelta(days=3))
    budget_request_approve(request=request, approver=get_user("mia"), now=now)
    spec = yaml.safe_load((DEMO / "org.yaml").read_text())
    spec["units"][1]["children"][0]["share"] = {"gb200-east": 80}  # molmo 80 + pixmo 20 = 100, but 110 on day 2
    path = tmp_path / "org.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(LoadError) as refused:
        load_org_file(path)
    assert "110 %" in str(refused.value) and "multimodal" in str(refused.value)
    assert share("molmo") == Decimal(70)

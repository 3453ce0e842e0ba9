"""Budget workflows: requests, decisions, direct reallocation and expiry.

Every function is keyword-only and atomic, and every change of a share goes
through `apply_share`, which rewrites the unit's timeline (budgets.lib.timeline)
and appends one entry to the ledger with who, when, why, before and after.

The 100 % rule: the children of a unit never hold more than 100 % of it on a
cluster at any moment, future-dated and time-limited periods included. Every
write locks the parent's row first (the cluster's row for top-level units,
which share the cluster), then checks the whole future of the siblings'
timelines, so of two approvals that race for the same room one waits for the
other and then fails with the room that is left. On SQLite, transactions
start IMMEDIATE (config/env.py), which serialises writers the same way.

Errors: ValidationError({field: [message]}) for what the user can fix,
PermissionDenied for who may not act.
"""

from datetime import datetime, timedelta
from decimal import ROUND_CEILING, Decimal, InvalidOperation

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from budgets.choices import ChangeSource, RequestStatus
from budgets.lib.timeline import Period, grant_temporary, peak_total, permanent_boundary, reuse_rows, set_from, share_at
from budgets.models import Allocation, AllocationChange, BudgetRequest, Unit
from budgets.permissions import belongs_to, can_decide, can_edit_shares, decision_unit, requesters_of
from budgets.selectors import children_timelines, deciders, room_for, share_of_cluster, span_end, unit_timeline
from notifications.models import Kind
from notifications.services import notify
from topology.models import Cluster

EXPIRY_ACTOR = "system:expiry"
HUNDRED = Decimal(100)
CENT = Decimal("0.01")
# A start a little in the past (the minute a form was filled in) means "now".
PAST_START_TOLERANCE = timedelta(minutes=10)
TEXT_LIMIT = 2000


# ---------------------------------------------------------------- helpers


def percent(value, field: str) -> Decimal:
    """A share as given by a user: 0 to 100 with at most two decimals, or a ValidationError naming the field."""
    if isinstance(value, bool) or value is None or value == "":
        raise ValidationError({field: ["required: a percentage from 0 to 100"]})
    try:
        number = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise ValidationError({field: [f"{value!r} is not a percentage"]}) from None
    if not number.is_finite() or number < 0 or number > HUNDRED:
        raise ValidationError({field: [f"{value} must be between 0 and 100"]})
    if number != number.quantize(CENT):
        raise ValidationError({field: [f"{value} has more than two decimals"]})
    return number.quantize(CENT)


def _text(value, field: str, *, required: bool, what: str) -> str:
    text = (value or "").strip()
    if required and not text:
        raise ValidationError({field: [f"required: {what}"]})
    if len(text) > TEXT_LIMIT:
        raise ValidationError({field: [f"at most {TEXT_LIMIT} characters (got {len(text)})"]})
    return text


def _fmt(value: Decimal | None) -> str:
    if value is None:
        return "none"
    return f"{value.normalize():f} %" if value == value.to_integral() else f"{value:.2f} %"


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "further notice"
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M %Z")


def _actor(user) -> str:
    return user.get_username()


def _lock_scope(parent: Unit | None, cluster: Cluster) -> None:
    """Serialise every change to the children of `parent` on any cluster: lock the parent's row.

    Top-level units share the cluster itself, so their changes lock the cluster's row.
    """
    if parent is not None:
        Unit.objects.select_for_update().filter(pk=parent.pk).first()
    else:
        Cluster.objects.select_for_update().filter(pk=cluster.pk).first()


def _lock_requests(*requests: BudgetRequest) -> dict[int, BudgetRequest]:
    """Lock requests (always in id order, so two decisions on one chain cannot deadlock) and read them afresh."""
    ids = sorted({r.pk for r in requests if r is not None})
    locked = BudgetRequest.objects.select_for_update().filter(pk__in=ids).order_by("pk")
    return {row.pk: row for row in locked}


def _write_timeline(unit: Unit, cluster: Cluster, old: list[Period], new: list[Period], *, now: datetime) -> dict:
    """Store `new` over `old`: close cut periods, drop replaced ones that never began, create the rest.

    Returns start → Allocation for the periods created.
    """
    new = reuse_rows(old, new)
    kept = {period.row_id: period for period in new if period.row_id is not None}
    for period in old:
        if period.row_id not in kept:
            if period.start < now:
                raise AssertionError(f"refusing to delete allocation {period.row_id}, which has begun")
            Allocation.objects.filter(pk=period.row_id).delete()
        elif kept[period.row_id].end != period.end:
            fields = {"valid_to": kept[period.row_id].end}
            if period.temporary:
                fields["end_recorded"] = True  # cut short by the change being recorded, not an expiry
            Allocation.objects.filter(pk=period.row_id).update(**fields)
    created = {}
    for period in new:
        if period.row_id is None:
            created[period.start] = Allocation.objects.create(
                unit=unit, cluster=cluster, share_percent=period.share, valid_from=period.start,
                valid_to=period.end, temporary=period.temporary, resumes=period.resumes,
                budget_request_id=period.request_id,
            )
    return created


def apply_share(
    *, unit: Unit, cluster: Cluster, start: datetime, end: datetime | None, share: Decimal | None,
    actor: str, source: str, reason: str, budget_request: BudgetRequest | None = None, now: datetime,
) -> AllocationChange:
    """Set the unit's share for [start, end) (a time-limited grant) or from `start` on (end None); record it."""
    old = unit_timeline(unit, cluster, since=now)
    before = share_at(old, start)
    request_id = budget_request.pk if budget_request else None
    if end is not None:
        new = grant_temporary(old, start=start, end=end, share=share, request_id=request_id)
        applies_until = end
    else:
        applies_until = permanent_boundary(old, start)
        new = set_from(old, start=start, share=share, request_id=request_id)
    created = _write_timeline(unit, cluster, old, new, now=now)
    opened = created.get(start) or Allocation.objects.filter(unit=unit, cluster=cluster, valid_from=start).first()
    return AllocationChange.objects.create(
        unit=unit, cluster=cluster, at=now, actor=actor, source=source, reason=reason[:TEXT_LIMIT],
        before_percent=before.share if before else None, after_percent=share,
        valid_from=start, valid_to=applies_until, allocation=opened, budget_request=budget_request,
    )


def check_children_fit(parent: Unit | None, cluster: Cluster, *, now: datetime, field: str = "shares") -> None:
    """The 100 % rule over the whole future: raise naming the moment and the total when it breaks."""
    total, at = peak_total(children_timelines(parent, cluster, since=now).values(), start=now)
    if total > HUNDRED:
        moment = "now" if at <= now else f"from {_when(at)}"
        whole = f"the children of {parent.name} would hold {_fmt(total)} of {parent.name}'s share on {cluster.name}" \
            if parent else f"the top-level units would hold {_fmt(total)} of {cluster.name}"
        raise ValidationError({field: [f"{whole[0].upper()}{whole[1:]} {moment}: over 100 %."]})


def _no_room(unit: Unit, cluster: Cluster, room: dict, *, before, granted, now) -> str:
    """The refusal when a grant does not fit: who holds what, and how much is left for this unit."""
    moment = "" if room["at"] <= now else f" from {_when(room['at'])}"
    if unit.parent:
        holders = f"the other children of {unit.parent.name} hold {_fmt(room['held'])} of it on {cluster.name}"
        ways = "Approve at most that, take room from a sibling, or escalate."
    else:
        holders = f"the other top-level units hold {_fmt(room['held'])} of {cluster.name}"
        ways = "Approve at most that or take room from another top-level unit."
    left = f"{unit.name} can have at most {_fmt(room['room'])}"
    if before is not None and room["room"] > before:
        left += f", {_fmt(room['room'] - before)} more than its {_fmt(before)}"
    return f"Not enough room: {holders}{moment}, so {left}; {_fmt(granted)} was asked. {ways}"


def _current_percent(unit: Unit, cluster: Cluster, at: datetime) -> Decimal | None:
    row = Allocation.objects.current(at).filter(unit=unit, cluster=cluster).first()
    return row.share_percent if row else None


def _reopen_escalated_from(budget_request: BudgetRequest) -> None:
    """An escalation was decided or withdrawn: the request it was for goes back to its deciders."""
    if budget_request.escalated_from_id is None:
        return
    BudgetRequest.objects.filter(pk=budget_request.escalated_from_id, status=RequestStatus.ESCALATED).update(
        status=RequestStatus.PENDING
    )


# ---------------------------------------------------------------- requests


@transaction.atomic
def budget_request_create(
    *, user, unit: Unit, cluster: Cluster, share, justification: str,
    starts_at: datetime | None = None, ends_at: datetime | None = None, now: datetime | None = None,
) -> BudgetRequest:
    """A member (or manager) of `unit` asks for a new or changed share of `cluster`."""
    now = now or timezone.now()
    if not belongs_to(user, unit):
        raise ValidationError({"unit": [
            f"you are not a member of {unit.name}: only its members and managers may ask for its budget"
        ]})
    share = percent(share, "share")
    justification = _text(justification, "justification", required=True, what="say what the GPU time is for")
    if starts_at is not None:
        if starts_at < now - PAST_START_TOLERANCE:
            raise ValidationError({"starts_at": [
                f"{_when(starts_at)} is in the past; leave it empty to start on approval"
            ]})
        if starts_at <= now:
            starts_at = None
    if ends_at is not None and ends_at <= (starts_at or now):
        raise ValidationError({"ends_at": [
            f"must be after the start ({_when(starts_at or now)}); leave it empty for no end"
        ]})
    # One open request per requester and unit (not per unit: one member cannot block the others), with the
    # unit locked so a double submit cannot slip two in.
    Unit.objects.select_for_update().filter(pk=unit.pk).first()
    already = BudgetRequest.objects.open().filter(unit=unit, cluster=cluster, requested_by=user).first()
    if already is not None:
        raise ValidationError({"unit": [
            f"your request #{already.pk} for {unit.name} on {cluster.name} is still {already.status}; "
            "wait for its decision or cancel it first"
        ]})
    current = _current_percent(unit, cluster, now)
    if starts_at is None and ends_at is None and current == share:
        raise ValidationError({"share": [f"{unit.name} already has {_fmt(share)} on {cluster.name}"]})
    parent_fraction = share_of_cluster(unit.parent, cluster, now) if unit.parent else 1.0
    created = BudgetRequest.objects.create(
        unit=unit, cluster=cluster, requested_by=user, created_at=now, requested_percent=share,
        starts_at=starts_at, ends_at=ends_at, justification=justification,
        parent_fraction_at_request=parent_fraction, decider_unit=decision_unit(unit, [user]),
    )
    _tell_deciders(created, now=now)
    return created


def _tell_deciders(budget_request: BudgetRequest, *, now: datetime) -> None:
    """Those who may decide it are told it waits for them (if they subscribed)."""
    from django.contrib.auth import get_user_model
    from django.urls import reverse


    names = deciders(budget_request)
    ids = get_user_model().objects.filter(username__in=names).values_list("pk", flat=True)
    who = budget_request.requested_by.get_username()
    notify(Kind.BUDGET_WAITING, user_ids=ids, at=now,
           path=reverse("budget-request-detail", args=[budget_request.pk]),
           subject=f"Allot: budget request #{budget_request.pk} waits for your decision",
           text=f"{who} asks for {_fmt(budget_request.requested_percent)} of {budget_request.cluster.name} for "
                f"{budget_request.unit.name}: {budget_request.justification[:300]}")


def _decidable(budget_request: BudgetRequest, user, verb: str) -> None:
    if budget_request.status != RequestStatus.PENDING:
        raise ValidationError({"status": [
            f"request #{budget_request.pk} is {budget_request.status}; only a pending request can be {verb}"
        ]})
    if not can_decide(user, budget_request):
        if user.pk in requesters_of(budget_request):
            raise PermissionDenied(f"nobody decides their own request: #{budget_request.pk} goes to the managers above")
        who = (f"managers of {budget_request.decider_unit.name}" if budget_request.decider_unit
               else "the operators")
        raise PermissionDenied(f"only {who} decide request #{budget_request.pk}")


@transaction.atomic
def budget_request_approve(
    *, request: BudgetRequest, approver, comment: str = "", share=None,
    take_from: dict[Unit, object] | None = None, now: datetime | None = None,
) -> BudgetRequest:
    """Grant the request, or a different amount (`share`); `take_from` lowers siblings first to make room.

    Room taken from a sibling is taken for the same period as the grant: for
    a time-limited grant the sibling gets it back when the grant ends.
    """
    now = now or timezone.now()
    unit, cluster = request.unit, request.cluster
    _lock_scope(unit.parent, cluster)
    request = _lock_requests(request)[request.pk]
    _decidable(request, approver, "approved")
    granted = request.requested_percent if share in (None, "") else percent(share, "share")
    comment = _text(comment, "comment", required=granted != request.requested_percent,
                    what="say why you approve a different amount")
    start, end = request.effective_start(now), request.ends_at
    if end is not None and end <= start:
        raise ValidationError({"ends_at": [
            f"the period asked for ended at {_when(end)}; deny it and ask for new dates"
        ]})
    before = _current_percent(unit, cluster, start)
    label = f"request #{request.pk} ({unit.name} {_fmt(before)} → {_fmt(granted)})"
    for sibling, value in (take_from or {}).items():
        if sibling.parent_id != unit.parent_id or sibling.pk == unit.pk:
            raise ValidationError({"take_from": [f"{sibling.name} is not a sibling of {unit.name}"]})
        lowered = percent(value, f"take_from.{sibling.name}")
        if lowered == _current_percent(sibling, cluster, start):
            continue
        apply_share(
            unit=sibling, cluster=cluster, start=start, end=end, share=lowered, actor=_actor(approver),
            source=ChangeSource.REQUEST, budget_request=request, now=now,
            reason=f"room for {label}" + (f": {comment}" if comment else ""),
        )
    room = room_for(unit, cluster, start=start, end=span_end(unit, cluster, start, end, now), now=now)
    if granted > room["room"]:
        raise ValidationError({"share": [_no_room(unit, cluster, room, before=before, granted=granted, now=now)]})
    change = apply_share(
        unit=unit, cluster=cluster, start=start, end=end, share=granted, actor=_actor(approver),
        source=ChangeSource.REQUEST, budget_request=request, now=now,
        reason=f"{label} approved" + (f": {comment}" if comment else f"; asked: {request.justification}"),
    )
    check_children_fit(unit.parent, cluster, now=now, field="share")
    request.status = RequestStatus.APPROVED
    request.granted_percent = granted
    request.decided_by, request.decided_at, request.comment = approver, now, comment
    request.allocation = change.allocation
    request.save(update_fields=["status", "granted_percent", "decided_by", "decided_at", "comment", "allocation"])
    _reopen_escalated_from(request)
    return request


@transaction.atomic
def budget_request_deny(*, request: BudgetRequest, decider, comment: str, now: datetime | None = None) -> BudgetRequest:
    now = now or timezone.now()
    request = _lock_requests(request)[request.pk]
    _decidable(request, decider, "denied")
    request.comment = _text(comment, "comment", required=True, what="say why, so the requester knows what to change")
    request.status = RequestStatus.DENIED
    request.decided_by, request.decided_at = decider, now
    request.save(update_fields=["status", "decided_by", "decided_at", "comment"])
    _reopen_escalated_from(request)
    return request


@transaction.atomic
def budget_request_escalate(
    *, request: BudgetRequest, decider, comment: str = "", now: datetime | None = None,
) -> BudgetRequest:
    """No room under the parent: ask one level up for the parent to grow by what the request needs.

    The new request is for the parent unit; it asks for the parent's share
    that would let this request fit while every sibling keeps its GPU-hours.
    When it is decided (or withdrawn), this request returns to its deciders,
    who then share out the new room.
    """
    now = now or timezone.now()
    request = _lock_requests(request)[request.pk]
    _decidable(request, decider, "escalated")
    comment = _text(comment, "comment", required=False, what="")
    unit, cluster, parent = request.unit, request.cluster, request.unit.parent
    if parent is None:
        raise ValidationError({"status": [
            f"{unit.name} is a top-level unit: there is no level above to escalate to"
        ]})
    start, end = request.effective_start(now), request.ends_at
    room = room_for(unit, cluster, start=start, end=span_end(unit, cluster, start, end, now), now=now)
    if request.requested_percent <= room["room"]:
        raise ValidationError({"status": [
            f"{parent.name} has room for this request ({_fmt(room['room'])} left): approve it instead"
        ]})
    parent_now = _current_percent(parent, cluster, start)
    if parent_now is None:
        raise ValidationError({"status": [
            f"{parent.name} has no share of {cluster.name} to grow; its own managers must ask for one first"
        ]})
    needed = parent_now * (room["held"] + request.requested_percent) / HUNDRED
    needed = min(needed.quantize(CENT, rounding=ROUND_CEILING), HUNDRED)
    origin = request.origin or request
    escalation = BudgetRequest.objects.create(
        unit=parent, cluster=cluster, requested_by=decider, created_at=now, requested_percent=needed,
        starts_at=request.starts_at, ends_at=request.ends_at,
        justification=(
            f"Escalated by {decider.get_username()} from request #{request.pk} ({unit.name} "
            f"{_fmt(_current_percent(unit, cluster, start))} → {_fmt(request.requested_percent)} of {parent.name}): "
            f"the other children of {parent.name} hold {_fmt(room['held'])}, so {parent.name} needs "
            f"{_fmt(needed)} of its parent instead of {_fmt(parent_now)} for it to fit with every sibling keeping "
            f"its GPU-hours." + (f" {comment}" if comment else "") + f" Asked for: {request.justification}"
        )[:TEXT_LIMIT],
        parent_fraction_at_request=share_of_cluster(parent.parent, cluster, now) if parent.parent else 1.0,
        decider_unit=decision_unit(parent, [decider, origin.requested_by]),
        escalated_from=request, origin=origin,
    )
    request.status = RequestStatus.ESCALATED
    request.comment = comment
    request.save(update_fields=["status", "comment"])
    _tell_deciders(escalation, now=now)
    return escalation


@transaction.atomic
def budget_request_cancel(*, request: BudgetRequest, user, now: datetime | None = None) -> BudgetRequest:
    """The requester withdraws an open request, and with it any escalation still open above it."""
    now = now or timezone.now()
    chain = [request]
    while True:
        above = BudgetRequest.objects.open().filter(escalated_from=chain[-1]).first()
        if above is None:
            break
        chain.append(above)
    locked = _lock_requests(*chain)
    request = locked[request.pk]
    if user.pk != request.requested_by_id:
        raise PermissionDenied(f"only {request.requested_by.get_username()} may cancel request #{request.pk}")
    if not request.is_open:
        raise ValidationError({"status": [
            f"request #{request.pk} is {request.status}; only an open request can be cancelled"
        ]})
    for row in locked.values():
        if row.is_open and (row.pk == request.pk or row.escalated_from_id in locked):
            row.status = RequestStatus.CANCELLED
            row.decided_at = now
            row.save(update_fields=["status", "decided_at"])
    _reopen_escalated_from(request)
    request.refresh_from_db()
    return request


# ---------------------------------------------------------------- direct edits and expiry


@transaction.atomic
def allocation_set_shares(
    *, parent: Unit | None, cluster: Cluster, shares: dict[Unit, object], actor, reason: str,
    now: datetime | None = None,
) -> list[AllocationChange]:
    """A manager of `parent` sets its children's shares (None: no allocation), from now on.

    Each new share applies until that child's next scheduled permanent change;
    a time-limited grant in effect now ends, later ones stay. The sum is
    checked over the whole future.
    """
    now = now or timezone.now()
    if not can_edit_shares(actor, parent):
        where = f"children of {parent.name}" if parent else "top-level units"
        raise PermissionDenied(f"only managers of {parent.name if parent else 'the cluster (operators)'} "
                               f"may set the shares of the {where}")
    reason = _text(reason, "reason", required=True, what="say why the shares change")
    _lock_scope(parent, cluster)
    wanted = {}
    for unit, value in shares.items():
        if unit.parent_id != (parent.pk if parent else None):
            raise ValidationError({unit.name: [
                f"{unit.name} is not a child of {parent.name if parent else 'the cluster'}"
            ]})
        wanted[unit] = None if value in (None, "") else percent(value, unit.name)
    changes = []
    for unit, value in sorted(wanted.items(), key=lambda item: item[0].name):
        if value == _current_percent(unit, cluster, now):
            continue
        changes.append(apply_share(
            unit=unit, cluster=cluster, start=now, end=None, share=value, actor=_actor(actor),
            source=ChangeSource.DIRECT, reason=reason, now=now,
        ))
    check_children_fit(parent, cluster, now=now)
    return changes


@transaction.atomic
def allocations_expire(*, now: datetime) -> list[AllocationChange]:
    """Record in the ledger, exactly once each, every time-limited period that has ended by `now`.

    The shares themselves change on time without this: the period's end is
    stored, and what follows it (the share in effect before the grant) was
    stored when the grant was approved. This writes the audit entry.
    """
    due = (
        Allocation.objects.filter(temporary=True, end_recorded=False, valid_to__lte=now)
        .select_related("unit__parent", "cluster", "budget_request__unit")
        .order_by("valid_to", "pk")
    )
    changes = []
    for allocation in due:
        # Compare-and-swap: of two runs at once, one records the expiry.
        if Allocation.objects.filter(pk=allocation.pk, end_recorded=False).update(end_recorded=True) != 1:
            continue
        unit, cluster = allocation.unit, allocation.cluster
        after = Allocation.objects.current(allocation.valid_to).filter(unit=unit, cluster=cluster).first()
        granted_by = allocation.budget_request
        if granted_by is not None and granted_by.unit_id != unit.pk:
            what = f"room lent to {granted_by.unit.name} for request #{granted_by.pk} came back"
        elif granted_by is not None:
            what = f"the time-limited grant of request #{granted_by.pk} ended"
        else:
            what = "a time-limited share ended"
        of_parent = f"of {unit.parent.name}" if unit.parent else f"of {cluster.name}"
        then = (
            f"{unit.name} returns to {_fmt(after.share_percent)} {of_parent}" if after
            else f"{unit.name} has no share of {cluster.name} now"
        )
        changes.append(AllocationChange.objects.create(
            unit=unit, cluster=cluster, at=allocation.valid_to, actor=EXPIRY_ACTOR, source=ChangeSource.EXPIRY,
            reason=f"{what}; {then}", before_percent=allocation.share_percent,
            after_percent=after.share_percent if after else None,
            valid_from=allocation.valid_to, valid_to=after.valid_to if after else None,
            allocation=allocation, budget_request=granted_by,
        ))
    return changes

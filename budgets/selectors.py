"""Reads for the org and budget pages and the API: a handful of set-based queries each."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_FLOOR, Decimal

from django.db import connection
from django.db.models import Q

from budgets.choices import RequestStatus, Role
from budgets.lib.timeline import Period, peak_total, permanent_boundary, share_at
from budgets.models import Allocation, AllocationChange, BudgetRequest, Membership, Unit, UserProfile, WhatIf
from budgets.permissions import managed_unit_ids, requesters_of
from scheduler.core import fairshare
from scheduler.core import model as core

HOURS_PER_WEEK = 168
HUNDRED = Decimal(100)
CENT = Decimal("0.01")
# The usage plot: about this many buckets over the window (hourly for 7 days).
PLOT_BUCKETS = 168
# How far ahead the plot shows scheduled changes of the entitlement.
PLOT_HORIZON = timedelta(days=30)


@dataclass
class UnitShare:
    unit: Unit
    depth: int
    percent_of_parent: Decimal | None
    fraction_of_cluster: float
    gpu_hours_per_window: float


def current_shares(cluster, at=None) -> dict[int, Decimal]:
    """Unit id → percent of its parent's share on `cluster`, for allocations valid at `at`."""
    return dict(
        Allocation.objects.current(at).filter(cluster=cluster).values_list("unit_id", "share_percent")
    )


def walk_units() -> list[tuple[Unit, int]]:
    """Every unit with its depth, parents before children, siblings by name; one query."""
    children: dict[int | None, list[Unit]] = {}
    for unit in Unit.objects.order_by("name"):
        children.setdefault(unit.parent_id, []).append(unit)
    rows: list[tuple[Unit, int]] = []

    def visit(parent_id, depth):
        for unit in children.get(parent_id, []):
            rows.append((unit, depth))
            visit(unit.pk, depth + 1)

    visit(None, 0)
    return rows


def core_units(rows: list[tuple[Unit, int]], percents: dict[int, Decimal], usage: dict | None = None
               ) -> tuple[core.Unit, ...]:
    """The org tree as the scheduler's core sees it on one cluster (as the tick's snapshot builds it): each
    unit's share, and its own usage when given (project id → `scheduler.usage.Usage`)."""
    usage = usage or {}
    names = {unit.pk: unit.name for unit, _ in rows}
    return tuple(
        core.Unit(
            name=unit.name, parent=names.get(unit.parent_id),
            share=float(percents[unit.pk]) if unit.pk in percents else None,
            allocated_usage=usage[unit.pk].allocated if unit.pk in usage else 0.0,
            unallocated_usage=usage[unit.pk].unallocated if unit.pk in usage else 0.0,
        )
        for unit, _ in rows
    )


def unit_shares(cluster, schedulable_gpus: int, at=None) -> list[UnitShare]:
    """Every unit in tree order with its share on `cluster`: % of parent, of the cluster (the core's
    `share_of_cluster`), GPU-hours per window of the cluster's `schedulable_gpus`."""
    percents = current_shares(cluster, at)
    window_hours = cluster.window_seconds / 3600
    rows = walk_units()
    fractions = fairshare.share_of_cluster(core_units(rows, percents))
    return [
        UnitShare(
            unit=unit, depth=depth, percent_of_parent=percents.get(unit.pk),
            fraction_of_cluster=fractions[unit.name],
            gpu_hours_per_window=fractions[unit.name] * schedulable_gpus * window_hours,
        )
        for unit, depth in rows
    ]


def people_by_unit() -> dict[int, dict[str, list[str]]]:
    """Unit id → {"manager": [...], "member": [...]} usernames, in one query."""
    people: dict[int, dict[str, list[str]]] = {}
    for unit_id, role, username in Membership.objects.values_list("unit_id", "role", "user__username").order_by(
        "user__username"
    ):
        people.setdefault(unit_id, {Role.MANAGER: [], Role.MEMBER: []})[role].append(username)
    return people


def share_of_cluster(unit: Unit, cluster, at=None) -> float:
    """The fraction of `cluster` the unit is entitled to: its share times every ancestor's; 0 without one."""
    chain = [unit, *unit.ancestors()]
    percents = dict(
        Allocation.objects.current(at).filter(cluster=cluster, unit__in=chain).values_list("unit_id", "share_percent")
    )
    fraction = 1.0
    for member in chain:
        if member.pk not in percents:
            return 0.0
        fraction *= float(percents[member.pk]) / 100
    return fraction


# ---------------------------------------------------------------- timelines and room


def period_of(row: Allocation) -> Period:
    return Period(
        start=row.valid_from, end=row.valid_to, share=row.share_percent, temporary=row.temporary,
        resumes=row.resumes, request_id=row.budget_request_id, row_id=row.pk,
    )


def unit_timeline(unit: Unit, cluster, *, since: datetime) -> list[Period]:
    """The unit's periods on the cluster still in effect or to come at `since`."""
    rows = (
        Allocation.objects.filter(unit=unit, cluster=cluster)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=since))
        .order_by("valid_from")
    )
    return [period_of(row) for row in rows]


def children_timelines(parent: Unit | None, cluster, *, since: datetime) -> dict[int, list[Period]]:
    """Unit id → periods still in effect or to come, for every child of `parent` (top-level units for None)."""
    rows = (
        Allocation.objects.filter(cluster=cluster, unit__parent=parent)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=since))
        .order_by("unit_id", "valid_from")
    )
    timelines: dict[int, list[Period]] = {}
    for row in rows:
        timelines.setdefault(row.unit_id, []).append(period_of(row))
    return timelines


def span_end(unit: Unit, cluster, start: datetime, end: datetime | None, now: datetime) -> datetime | None:
    """Until when a change from `start` applies: its end, or the unit's next scheduled permanent change."""
    return end if end is not None else permanent_boundary(unit_timeline(unit, cluster, since=now), start)


def room_for(unit: Unit, cluster, *, start: datetime, end: datetime | None, now: datetime) -> dict:
    """How much of its parent `unit` may hold during [start, end): 100 % less its siblings' peak, and when."""
    others = children_timelines(unit.parent, cluster, since=now)
    others.pop(unit.pk, None)
    held, at = peak_total(others.values(), start=start, end=end)
    return {"room": max(HUNDRED - held, Decimal(0)), "held": held, "at": at}


def suggested_take_from(unit: Unit, cluster, granted: Decimal, *, at: datetime) -> dict[int, Decimal]:
    """Siblings' shares lowered in proportion so that `granted` fits: unit id → suggested share.

    When the parent has just grown (an approved escalation), this keeps every
    sibling's GPU-hours as they were.
    """
    shares = {
        row.unit_id: row.share_percent
        for row in Allocation.objects.current(at).filter(cluster=cluster, unit__parent=unit.parent).exclude(unit=unit)
    }
    held = sum(shares.values(), Decimal(0))
    if held <= 0 or held + granted <= HUNDRED:
        return shares
    factor = max(HUNDRED - granted, Decimal(0)) / held
    return {pk: (share * factor).quantize(CENT, rounding=ROUND_FLOOR) for pk, share in shares.items()}


def scheduled_periods(unit: Unit, cluster, *, now: datetime) -> list[Allocation]:
    """The period in effect and those to come, with the requests that set them."""
    return list(
        Allocation.objects.filter(unit=unit, cluster=cluster)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=now))
        .select_related("budget_request")
        .order_by("valid_from")
    )


# ---------------------------------------------------------------- budgets with usage


def top_level_percent(cluster, *, at: datetime) -> Decimal:
    return sum(
        Allocation.objects.current(at).filter(cluster=cluster, unit__parent__isnull=True)
        .values_list("share_percent", flat=True),
        Decimal(0),
    )


def subtree_ids(unit: Unit) -> set[int]:
    """The unit and every unit under it; one query."""
    children: dict[int | None, list[int]] = defaultdict(list)
    for pk, parent_id in Unit.objects.values_list("pk", "parent_id"):
        children[parent_id].append(pk)
    found, stack = set(), [unit.pk]
    while stack:
        pk = stack.pop()
        if pk not in found:
            found.add(pk)
            stack.extend(children[pk])
    return found


def entitled_gpu_seconds(cluster, *, start: datetime, end: datetime, schedulable_gpus: int) -> dict[int, float]:
    """Unit id → GPU-seconds it was entitled to over [start, end): its fraction of the cluster (its share times
    every ancestor's, as each stood at every moment, as on the unit page's plot) times `schedulable_gpus`. Two
    queries."""
    rows = list(
        Allocation.objects.filter(cluster=cluster, valid_from__lt=end)
        .filter(Q(valid_to__isnull=True) | Q(valid_to__gt=start)).order_by("valid_from")
    )
    timelines: dict[int, list[Period]] = defaultdict(list)
    for row in rows:
        timelines[row.unit_id].append(period_of(row))
    moments = sorted({start, end, *(m for row in rows for m in (row.valid_from, row.valid_to)
                                    if m is not None and start < m < end)})
    entitled: dict[int, float] = defaultdict(float)
    units = walk_units()
    for begin, finish in zip(moments, moments[1:], strict=False):
        seconds = (finish - begin).total_seconds()
        fractions: dict[int | None, float] = {None: 1.0}
        for unit, _ in units:
            found = share_at(timelines.get(unit.pk, []), begin)
            fractions[unit.pk] = fractions.get(unit.parent_id, 0.0) * float(found.share) / 100 if found else 0.0
            entitled[unit.pk] += fractions[unit.pk] * schedulable_gpus * seconds
    return dict(entitled)


def unit_history(unit: Unit, cluster=None, *, limit: int = 200) -> list[AllocationChange]:
    changes = AllocationChange.objects.filter(unit=unit).select_related("cluster", "budget_request")
    if cluster is not None:
        changes = changes.filter(cluster=cluster)
    return list(changes[:limit])


# ---------------------------------------------------------------- requests: who sees and decides what


def _decidable_filter(user) -> Q:
    managed = managed_unit_ids(user)
    decidable = Q(decider_unit_id__in=managed) if managed else Q(pk__in=[])
    if user.is_superuser:
        decidable |= Q(decider_unit__isnull=True)
    return decidable


def _own_filter(user) -> Q:
    return Q(requested_by=user) | Q(origin__requested_by=user)


def _affected_filter(user) -> Q:
    """Requests whose decision changed the share of a unit the user belongs to, or of one above it."""
    units = {unit.pk: unit.parent_id for unit in Unit.objects.only("pk", "parent_id")}
    affected, stack = set(), list(Membership.objects.filter(user=user).values_list("unit_id", flat=True))
    while stack:
        pk = stack.pop()
        if pk is not None and pk not in affected:
            affected.add(pk)
            stack.append(units.get(pk))
    if not affected:
        return Q(pk__in=[])
    return Q(pk__in=AllocationChange.objects.filter(unit_id__in=affected, budget_request__isnull=False)
             .values("budget_request_id"))


def visible_requests(user):
    """Who sees a request: its requester (and of the escalations made for it), the managers of its unit and
    of every unit above (who decide it), the members of units whose share its decision changed, and the
    operators (superusers), who see them all."""
    related = ("unit__parent", "cluster", "requested_by", "decided_by", "decider_unit", "origin")
    if user.is_superuser:
        return BudgetRequest.objects.select_related(*related)
    managed = managed_unit_ids(user)
    managers = Q(unit_id__in=managed) if managed else Q(pk__in=[])
    return BudgetRequest.objects.filter(
        _own_filter(user) | _decidable_filter(user) | managers | _affected_filter(user)
    ).select_related(*related)


def visible_request_ids(user, ids) -> set[int]:
    """Those of `ids` the user may open: a page links to a request only then."""
    ids = {pk for pk in ids if pk is not None}
    return set(visible_requests(user).filter(pk__in=ids).values_list("pk", flat=True)) if ids else set()


def waiting_for(user):
    """Pending requests this user may decide (never their own)."""
    return (
        visible_requests(user).filter(_decidable_filter(user), status=RequestStatus.PENDING)
        .exclude(_own_filter(user))
    )


def waiting_count(user) -> int:
    """How many pending requests wait for this user's decision: one query, for the nav on every page."""
    if not user.is_authenticated:
        return 0
    requests, memberships, units = (
        BudgetRequest._meta.db_table, Membership._meta.db_table, Unit._meta.db_table,
    )
    sql = f"""
        WITH RECURSIVE managed(id) AS (
            SELECT unit_id FROM {memberships} WHERE user_id = %s AND role = %s
            UNION
            SELECT child.id FROM {units} child JOIN managed ON child.parent_id = managed.id
        )
        SELECT COUNT(*) FROM {requests} request
        LEFT JOIN {requests} origin ON origin.id = request.origin_id
        WHERE request.status = %s
          AND request.requested_by_id <> %s
          AND (origin.id IS NULL OR origin.requested_by_id <> %s)
          AND (request.decider_unit_id IN (SELECT id FROM managed)
               OR (request.decider_unit_id IS NULL AND %s))
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [user.pk, Role.MANAGER, RequestStatus.PENDING, user.pk, user.pk, bool(user.is_superuser)])
        return cursor.fetchone()[0]


def deciders(budget_request: BudgetRequest) -> list[str]:
    """Usernames of who may decide the request now (the requester excluded)."""
    from django.contrib.auth import get_user_model

    excluded = requesters_of(budget_request)
    if budget_request.decider_unit is None:
        users = get_user_model().objects.filter(is_superuser=True)
    else:
        chain = [budget_request.decider_unit, *budget_request.decider_unit.ancestors()]
        users = get_user_model().objects.filter(
            memberships__unit__in=chain, memberships__role=Role.MANAGER
        )
    return sorted({user.get_username() for user in users.exclude(pk__in=excluded)})


def latest_what_if(budget_request: BudgetRequest) -> WhatIf | None:
    """The request's most recent what-if, whatever its status (the page and the API show it)."""
    return WhatIf.objects.filter(budget_request=budget_request).select_related("requested_by").first()


def posix_account(user) -> str:
    """The OS account `user`'s jobs run as on agent hosts: their `posix_user`, else their username."""
    profile = UserProfile.objects.filter(user=user).values_list("posix_user", flat=True).first()
    return profile or user.username

"""Reads for the org pages and API."""

from dataclasses import dataclass
from decimal import Decimal

from budgets.choices import Role
from budgets.models import Allocation, Membership, Unit

HOURS_PER_WEEK = 168


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


def unit_shares(cluster, healthy_gpus: int, at=None) -> list[UnitShare]:
    """Every unit in tree order with its share on `cluster`: % of parent, of the cluster, GPU-hours per window."""
    percents = current_shares(cluster, at)
    window_hours = cluster.window_seconds / 3600
    fractions: dict[int | None, float] = {None: 1.0}
    rows = []
    for unit, depth in walk_units():
        percent = percents.get(unit.pk)
        fraction = fractions[unit.parent_id] * float(percent) / 100 if percent is not None else 0.0
        fractions[unit.pk] = fraction
        rows.append(UnitShare(
            unit=unit, depth=depth, percent_of_parent=percent, fraction_of_cluster=fraction,
            gpu_hours_per_window=fraction * healthy_gpus * window_hours,
        ))
    return rows


def people_by_unit() -> dict[int, dict[str, list[str]]]:
    """Unit id → {"manager": [...], "member": [...]} usernames, in one query."""
    people: dict[int, dict[str, list[str]]] = {}
    for unit_id, role, username in Membership.objects.values_list("unit_id", "role", "user__username").order_by(
        "user__username"
    ):
        people.setdefault(unit_id, {Role.MANAGER: [], Role.MEMBER: []})[role].append(username)
    return people

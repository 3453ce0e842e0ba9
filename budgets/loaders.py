"""`load_org`: the org spec of FORMATS.md into units, memberships and allocations.

Checked whole (`budgets.spec.parse_org`, against the database's clusters and
users) before anything is written. The file is authoritative for the units it
lists: their parents, members, managers and shares. Every share that changes
is recorded in the allocation ledger with the loader as actor.
"""

from collections.abc import Collection
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

import budgets.spec
from budgets.choices import ChangeSource, Role
from budgets.models import Allocation, AllocationChange, Membership, Unit, UserProfile
from budgets.permissions import ONCALL_GROUP
from budgets.services import apply_share, check_children_fit
from budgets.spec import OrgSpec
from topology.models import Cluster
from topology.spec import LoadError, read_yaml

LOADER_ACTOR = "system:load_org"


def parse_org(data, *, clusters: Collection[str] | None = None) -> OrgSpec:
    """Check an org spec against itself and the database; raise LoadError listing every problem.

    With `clusters` (names), shares are checked against those instead and
    the database is not read at all: users are then checked only against
    the file's own `users` list where it has one (as the simulator does,
    calling `budgets.spec.parse_org`).
    """
    if clusters is not None:
        return budgets.spec.parse_org(data, clusters=clusters)
    return budgets.spec.parse_org(
        data, clusters=Cluster.objects.values_list("name", flat=True),
        users=get_user_model().objects.values_list("username", flat=True), from_database=True,
    )


def _fmt_percent(value: Decimal | None) -> str:
    return "none" if value is None else f"{value.normalize():f} %"


def changed_since_loaded(spec: OrgSpec, *, now) -> dict[tuple[str, str], str]:
    """Shares the load would change that someone changed since the org file last set them.

    (unit, cluster) → what happened, for the refusal. A share is "changed since loaded" when its value now
    differs from what the loader last wrote for it (or the loader never wrote it and it is set): an
    approved request, a direct edit. An expired grant that brought the loaded value back is no change.
    """
    wanted = {(unit.name, cluster): share for unit in spec.units for cluster, share in unit.shares.items()}
    listed = {unit.name for unit in spec.units}
    live = {
        (row.unit.name, row.cluster.name): row.share_percent
        for row in Allocation.objects.current(now).filter(unit__name__in=listed).select_related("unit", "cluster")
    }
    conflicts = {}
    for key in sorted(set(wanted) | set(live)):
        current, after = live.get(key), wanted.get(key)
        if current == after:
            continue
        ledger = AllocationChange.objects.filter(unit__name=key[0], cluster__name=key[1], at__lte=now)
        loaded = ledger.filter(source=ChangeSource.LOADER).order_by("-at", "-id").first()
        if loaded is None and current is None:
            continue
        if loaded is not None and loaded.after_percent == current:
            continue
        other = ledger.exclude(source__in=[ChangeSource.LOADER, ChangeSource.EXPIRY]).order_by("-at", "-id").first()
        who = (f" by {other.actor} ({other.get_source_display()}) at {timezone.localtime(other.at):%Y-%m-%d %H:%M %Z}"
               if other is not None else "")
        conflicts[key] = (f"{key[0]} on {key[1]}: {_fmt_percent(current)} now, set{who} since the org file was "
                          f"last loaded ({_fmt_percent(loaded.after_percent if loaded else None)}); "
                          f"the file says {_fmt_percent(after)}")
    return conflicts


@transaction.atomic
def apply_org(spec: OrgSpec, *, actor: str = LOADER_ACTOR, reason: str = "org file loaded",
              overwrite: bool = False) -> dict:
    """Create or update users, units, memberships and allocations to match `spec`.

    A share changed since the file last set it (an approved request, a direct edit) is not reverted
    silently: the load is refused naming each one, unless `overwrite`, when each overwrite says in the
    ledger what it replaced.
    """
    User = get_user_model()
    now = timezone.now()
    changes = {"users": 0, "units": 0, "memberships": 0, "allocations": 0}
    conflicts = changed_since_loaded(spec, now=now)
    if conflicts and not overwrite:
        raise LoadError([*conflicts.values(),
                         "edit the file to keep these shares, or load it with --overwrite to put the file's back"])

    oncall, _ = Group.objects.get_or_create(name=ONCALL_GROUP)
    for user_spec in spec.users:
        user, created = User.objects.get_or_create(
            username=user_spec.username,
            defaults={"email": user_spec.email, "first_name": user_spec.first_name, "last_name": user_spec.last_name},
        )
        dirty = created
        for key in ("email", "first_name", "last_name"):
            value = getattr(user_spec, key)
            if value and getattr(user, key) != value:
                setattr(user, key, value)
                dirty = True
        if user_spec.password and not user.check_password(user_spec.password):
            user.set_password(user_spec.password)
            dirty = True
        if user_spec.admin and not (user.is_staff and user.is_superuser):
            user.is_staff = user.is_superuser = True
            dirty = True
        if dirty:
            user.save()
            changes["users"] += 1
        in_group = user.groups.filter(pk=oncall.pk).exists()
        if user_spec.oncall and not in_group:
            user.groups.add(oncall)
            changes["users"] += 1
        elif not user_spec.oncall and in_group:
            user.groups.remove(oncall)
            changes["users"] += 1
        if user_spec.posix_user is not None:
            profile, _ = UserProfile.objects.get_or_create(user=user)
            if profile.posix_user != user_spec.posix_user:
                profile.posix_user = user_spec.posix_user
                profile.save(update_fields=["posix_user"])
                changes["users"] += 1

    users = {user.username: user for user in User.objects.all()}
    touched: set[tuple[int | None, str]] = set()
    units = {unit.name: unit for unit in Unit.objects.all()}
    clusters = {cluster.name: cluster for cluster in Cluster.objects.all()}

    for unit_spec in spec.units:
        parent = units[unit_spec.parent] if unit_spec.parent else None
        unit = units.get(unit_spec.name)
        if unit is None:
            unit = Unit.objects.create(name=unit_spec.name, parent=parent, description=unit_spec.description)
            units[unit.name] = unit
            changes["units"] += 1
        elif unit.parent_id != (parent.pk if parent else None) or unit.description != unit_spec.description:
            unit.parent, unit.description = parent, unit_spec.description
            unit.save(update_fields=["parent", "description"])
            changes["units"] += 1

        wanted = {(users[name].pk, Role.MANAGER) for name in unit_spec.managers}
        wanted |= {(users[name].pk, Role.MEMBER) for name in unit_spec.members}
        current = {(m.user_id, m.role): m for m in unit.memberships.all()}
        for key in sorted(wanted - set(current)):
            Membership.objects.create(unit=unit, user_id=key[0], role=key[1])
            changes["memberships"] += 1
        for key in sorted(set(current) - wanted):
            current[key].delete()
            changes["memberships"] += 1

        live = {a.cluster.name: a for a in Allocation.objects.current(now).filter(unit=unit).select_related("cluster")}
        for cluster_name in sorted(set(live) | set(unit_spec.shares)):
            before = live.get(cluster_name)
            after = unit_spec.shares.get(cluster_name)
            if before is not None and after is not None and before.share_percent == after:
                continue
            # The same timeline rules as a direct edit: from now on, up to any scheduled permanent change.
            conflict = conflicts.get((unit.name, cluster_name))
            apply_share(
                unit=unit, cluster=clusters[cluster_name], start=now, end=None, share=after, actor=actor,
                source=ChangeSource.LOADER, now=now,
                reason=f"{reason} with --overwrite, replacing {conflict}" if conflict else reason,
            )
            touched.add((unit.parent_id, cluster_name))
            changes["allocations"] += 1

    # Scheduled grants (future-dated or time-limited) must still fit under the new shares.
    problems = []
    for parent_id, cluster_name in sorted(touched, key=lambda key: (key[0] or 0, key[1])):
        parent = Unit.objects.get(pk=parent_id) if parent_id else None
        try:
            check_children_fit(parent, clusters[cluster_name], now=now)
        except ValidationError as error:
            problems.extend(message for messages in error.message_dict.values() for message in messages)
    if problems:
        raise LoadError([f"{problem} (counting grants already scheduled and units the file does not list)"
                         for problem in problems])
    return changes


def load_org_file(path, *, actor: str = LOADER_ACTOR, overwrite: bool = False) -> dict:
    return apply_org(parse_org(read_yaml(path)), actor=actor, reason=f"org file {path} loaded", overwrite=overwrite)

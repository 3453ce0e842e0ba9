"""`load_org`: the org spec of FORMATS.md into units, memberships and allocations.

Checked whole before anything is written. The file is authoritative for the
units it lists: their parents, members, managers and shares. Every share that
changes is recorded in the allocation ledger with the loader as actor.
"""

from collections.abc import Collection
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from budgets.choices import ChangeSource, Role
from budgets.models import POSIX_USER, Allocation, AllocationChange, Membership, Unit, UserProfile
from budgets.permissions import ONCALL_GROUP
from budgets.services import apply_share, check_children_fit
from topology.loaders import LoadError, read_yaml
from topology.models import Cluster

LOADER_ACTOR = "system:load_org"
USER_KEYS = {"username", "email", "first_name", "last_name", "password", "oncall", "admin", "posix_user"}
UNIT_KEYS = {"name", "description", "managers", "members", "share", "children"}
MAX_DEPTH = 12


@dataclass
class UserSpec:
    username: str
    email: str = ""
    first_name: str = ""
    last_name: str = ""
    password: str | None = None
    oncall: bool = False
    admin: bool = False
    posix_user: str | None = None  # the OS account jobs run as; None: left as it is ("" resets to the username)


@dataclass
class UnitSpec:
    name: str
    parent: str | None
    description: str = ""
    managers: list[str] = field(default_factory=list)
    members: list[str] = field(default_factory=list)
    shares: dict[str, Decimal] = field(default_factory=dict)


@dataclass
class OrgSpec:
    users: list[UserSpec]
    units: list[UnitSpec]  # parents before children


def _percent(value, where: str, problems: list[str]) -> Decimal | None:
    if isinstance(value, bool):
        problems.append(f"{where}: {value!r} is not a percentage")
        return None
    try:
        percent = Decimal(str(value))
    except InvalidOperation:
        problems.append(f"{where}: {value!r} is not a percentage")
        return None
    if not percent.is_finite() or percent < 0 or percent > 100:
        problems.append(f"{where}: {value} must be between 0 and 100")
        return None
    if percent != percent.quantize(Decimal("0.01")):
        problems.append(f"{where}: {value} has more than two decimals")
        return None
    return percent.quantize(Decimal("0.01"))


def _names(value, where: str, problems: list[str]) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        problems.append(f"{where}: must be a list of usernames")
        return []
    return list(value)


def parse_org(data, *, clusters: Collection[str] | None = None) -> OrgSpec:
    """Check an org spec against itself and the database; raise LoadError listing every problem.

    With `clusters` (names), shares are checked against those instead and
    the database is not read at all: users are then checked only against
    the file's own `users` list where it has one (the simulator's use).
    """
    problems: list[str] = []
    if not isinstance(data, dict):
        raise LoadError(["the file must be a mapping with units (and optionally users)"])
    for key in sorted(set(map(str, data)) - {"users", "units"}):
        problems.append(f"{key}: unknown top-level key")

    users: list[UserSpec] = []
    seen_users: set[str] = set()
    raw_users = data.get("users") or []
    if not isinstance(raw_users, list):
        problems.append("users: must be a list")
        raw_users = []
    for number, entry in enumerate(raw_users):
        where = f"users[{number}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("username"), str) or not entry["username"]:
            problems.append(f"{where}.username: required")
            continue
        username = entry["username"]
        where = f"users[{number}] ({username})"
        for key in sorted(set(entry) - USER_KEYS):
            problems.append(f"{where}.{key}: unknown key")
        if username in seen_users:
            problems.append(f"{where}.username: {username} is listed twice")
        seen_users.add(username)
        if len(username) > 150:
            problems.append(f"{where}.username: longer than 150 characters")
        for key in ("oncall", "admin"):
            if key in entry and not isinstance(entry[key], bool):
                problems.append(f"{where}.{key}: must be true or false")
        password = entry.get("password")
        if password is not None and (not isinstance(password, str) or len(password) < 8):
            problems.append(f"{where}.password: must be at least 8 characters")
        posix_user = entry.get("posix_user")
        if posix_user is not None:
            try:
                if not isinstance(posix_user, str):
                    raise ValidationError("")
                if posix_user:
                    POSIX_USER(posix_user)
            except ValidationError:
                problems.append(f"{where}.posix_user: {posix_user!r} is not {POSIX_USER.message}")
        users.append(
            UserSpec(
                username=username,
                email=str(entry.get("email") or ""),
                first_name=str(entry.get("first_name") or ""),
                last_name=str(entry.get("last_name") or ""),
                password=password,
                oncall=bool(entry.get("oncall", False)),
                admin=bool(entry.get("admin", False)),
                posix_user=posix_user if isinstance(posix_user, str) else None,
            )
        )

    from_database = clusters is None
    if from_database:
        known_users = seen_users | set(get_user_model().objects.values_list("username", flat=True))
        clusters = set(Cluster.objects.values_list("name", flat=True))
    else:
        # No database: a file without a users list names people we cannot check.
        known_users = seen_users if raw_users else None
        clusters = set(clusters)
    hint = " (load it first)" if from_database else f" (the cluster file defines {', '.join(sorted(clusters))})"

    units: list[UnitSpec] = []
    seen_units: dict[str, str] = {}

    def walk(entries, parent: str | None, where_prefix: str, depth: int):
        if not isinstance(entries, list):
            problems.append(f"{where_prefix}: must be a list of units")
            return
        if depth > MAX_DEPTH:
            problems.append(f"{where_prefix}: the tree is deeper than {MAX_DEPTH} levels")
            return
        sibling_totals: dict[str, Decimal] = {}
        for number, entry in enumerate(entries):
            where = f"{where_prefix}[{number}]"
            if not isinstance(entry, dict):
                problems.append(f"{where}: must be a mapping")
                continue
            name = entry.get("name")
            where = f"{where_prefix}[{number}] ({name})"
            if not isinstance(name, str) or not name or slugify(name) != name or len(name) > 64:
                problems.append(f"{where}.name: {name!r} must be a lower-case name of letters, digits and dashes")
                continue
            if name in seen_units:
                problems.append(f"{where}.name: unit {name} is defined twice (also at {seen_units[name]})")
                continue
            seen_units[name] = where
            for key in sorted(set(map(str, entry)) - UNIT_KEYS):
                problems.append(f"{where}.{key}: unknown key")
            spec = UnitSpec(name=name, parent=parent, description=str(entry.get("description") or ""))
            for role in ("managers", "members"):
                names = _names(entry.get(role), f"{where}.{role}", problems)
                for username in names:
                    if known_users is not None and username not in known_users:
                        problems.append(f"{where}.{role}: unknown user {username!r} (add it under users)")
                setattr(spec, role, names)
            raw_share = entry.get("share") or {}
            if not isinstance(raw_share, dict):
                problems.append(f"{where}.share: must map cluster names to percentages")
                raw_share = {}
            for cluster_name, value in raw_share.items():
                if cluster_name not in clusters:
                    problems.append(f"{where}.share.{cluster_name}: no such cluster{hint}")
                    continue
                percent = _percent(value, f"{where}.share.{cluster_name}", problems)
                if percent is not None:
                    spec.shares[cluster_name] = percent
                    sibling_totals[cluster_name] = sibling_totals.get(cluster_name, Decimal(0)) + percent
            units.append(spec)
            if entry.get("children") is not None:
                walk(entry["children"], name, f"{where}.children", depth + 1)
        for cluster_name, total in sorted(sibling_totals.items()):
            if total > 100:
                owner = f"children of {parent}" if parent else "top-level units"
                problems.append(
                    f"{where_prefix}: shares of the {owner} on {cluster_name} add up to {total} %, over 100 %"
                )

    walk(data.get("units"), None, "units", 1)
    if not data.get("units"):
        problems.append("units: at least one unit is required")

    if problems:
        raise LoadError(problems)
    return OrgSpec(users=users, units=units)


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

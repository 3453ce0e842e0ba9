"""The org file of FORMATS.md, parsed and checked into plain specs: no Django, no database.

`parse_org` checks a file against itself and against the clusters and users
it may name, given by the caller: `budgets.loaders` passes those of the
database (and then writes the spec), the simulator those of its cluster file.
"""

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from topology.spec import LoadError, is_slug

USER_KEYS = {"username", "email", "first_name", "last_name", "password", "oncall", "admin", "posix_user"}
UNIT_KEYS = {"name", "description", "managers", "members", "share", "children"}
MAX_DEPTH = 12
# A POSIX account name as useradd takes it (portable: lower case, digits, `_`, `-`; a trailing `$` for
# machine accounts), at most 32 characters. `budgets.models.POSIX_USER` validates the profile field with it.
POSIX_USER_PATTERN = r"^[a-z_][a-z0-9_-]{0,30}[a-z0-9_$-]?\Z"
POSIX_USER_MESSAGE = ("a POSIX account name: lower case letters, digits, _ and -, starting with a letter or _, "
                      "at most 32 characters")
_POSIX_USER = re.compile(POSIX_USER_PATTERN)


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


def parse_org(data, *, clusters: Collection[str], users: Collection[str] | None = None,
              from_database: bool = False) -> OrgSpec:
    """Check an org spec against itself, `clusters` (names) and `users`; raise LoadError listing every problem.

    `users` are the usernames that exist besides the file's own `users` list;
    None when nobody knows (the simulator's use): users are then checked only
    against the file's list, where it has one. `from_database`: the clusters
    and users are those of the database, and a missing cluster is to be
    loaded first (the loader's use); else they come from a cluster file.
    """
    problems: list[str] = []
    if not isinstance(data, dict):
        raise LoadError(["the file must be a mapping with units (and optionally users)"])
    for key in sorted(set(map(str, data)) - {"users", "units"}):
        problems.append(f"{key}: unknown top-level key")

    user_specs: list[UserSpec] = []
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
        if posix_user is not None and (
            not isinstance(posix_user, str) or (posix_user and not _POSIX_USER.search(posix_user))
        ):
            problems.append(f"{where}.posix_user: {posix_user!r} is not {POSIX_USER_MESSAGE}")
        user_specs.append(
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

    if users is not None:
        known_users = seen_users | set(users)
    else:
        # Nobody else known: a file without a users list names people we cannot check.
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
            if not isinstance(name, str) or not name or not is_slug(name) or len(name) > 64:
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
    return OrgSpec(users=user_specs, units=units)

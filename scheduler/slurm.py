"""Slurm's accounting, as Allot's inputs: `manage.py import_slurm` (the command) and its tests use this module.
No Django here: it reads text and returns plain data.

- `sacctmgr show associations --parsable2` (columns as its header names them; `Account`, `User` and `Share`
  are needed, `ParentName` or the `tree` option's indented Account say where an account sits, `Cluster`
  which cluster a row is on) becomes an org spec (FORMATS.md): accounts → units (root's children at the
  top), fairshare → `share` in percent of the parent, normalised over siblings, users → members. Slurm
  lets users sit on an account beside sub-accounts; Allot charges only leaf units, so such users go into
  a leaf `<account>-own` that takes their shares' part.
- `sacct --parsable2 --allocations` (needs `JobID`, `Account`, `AllocTRES`, `Submit`, `Start`, `End`,
  `TimelimitRaw`, `State`; `User` if there) becomes workload rows (FORMATS.md's columns; submit in seconds
  from the first submission) and usage rows (who held how many GPUs from when to when).

Whatever cannot be mapped is reported line by line (`Problem`), never silently dropped.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

ROOT_ACCOUNT = "root"
_UNIT_NAME = re.compile(r"[^a-z0-9_.-]+")


@dataclass(frozen=True)
class Problem:
    source: str  # "associations" or "jobs"
    line: int  # 1-based line in that file
    text: str

    def __str__(self) -> str:
        return f"{self.source} line {self.line}: {self.text}"


@dataclass
class Account:
    name: str
    parent: str | None
    share: int | None = None
    children: list[str] = field(default_factory=list)
    users: dict[str, int | None] = field(default_factory=dict)


@dataclass
class Import:
    org: dict = field(default_factory=dict)
    workload: list[dict] = field(default_factory=list)
    usage: list[dict] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    # Slurm account → the Allot unit its jobs are charged to.
    projects: dict[str, str] = field(default_factory=dict)


def _rows(text: str):
    """(line number, {column: value}) for each data line of a `--parsable2` file."""
    lines = text.splitlines()
    header_at = next((i for i, line in enumerate(lines) if line.strip()), None)
    if header_at is None:
        return [], []
    header = [name.strip() for name in lines[header_at].split("|")]
    rows = []
    for number, line in enumerate(lines[header_at + 1:], start=header_at + 2):
        if not line.strip():
            continue
        values = line.split("|")
        rows.append((number, dict(zip(header, values, strict=False)), len(values) == len(header)))
    return header, rows


def unit_name(account: str) -> str:
    return _UNIT_NAME.sub("-", account.strip().lower()).strip("-") or "unnamed"


def _share(value: str) -> int | None:
    value = value.strip()
    if value.isdigit():
        return int(value)
    return None  # "parent" (or empty): no share of its own


def parse_associations(text: str, *, cluster: str, slurm_cluster: str | None = None) -> tuple[dict, dict,
                                                                                               list[Problem]]:
    """The org spec (a dict ready for YAML) with shares on `cluster`, the account → unit map, and problems."""
    header, rows = _rows(text)
    problems: list[Problem] = []
    missing = {"Account", "Share"} - set(header)
    if missing:
        return {"units": []}, {}, [Problem("associations", 1, f"no column {', '.join(sorted(missing))} in the "
                                           f"header (run `sacctmgr show associations --parsable2`)")]
    accounts: dict[str, Account] = {ROOT_ACCOUNT: Account(ROOT_ACCOUNT, None)}
    stack: list[tuple[int, str]] = []  # (indent, account) of the `tree` layout
    clusters = {row.get("Cluster", "").strip() for _, row, _ in rows} - {""}
    if slurm_cluster is None and len(clusters) > 1:
        problems.append(Problem("associations", 1, f"rows of several clusters ({', '.join(sorted(clusters))}): "
                                "only the first is imported; choose one with --slurm-cluster"))
        slurm_cluster = sorted(clusters)[0]
    for number, row, complete in rows:
        if not complete:
            problems.append(Problem("associations", number, "not as many fields as the header has columns"))
            continue
        if slurm_cluster and row.get("Cluster", "").strip() not in ("", slurm_cluster):
            continue
        raw_account = row["Account"]
        name = raw_account.strip()
        user = row.get("User", "").strip()
        if not name:
            problems.append(Problem("associations", number, "no account"))
            continue
        indent = len(raw_account) - len(raw_account.lstrip(" "))
        if user:
            if name not in accounts:
                accounts[name] = Account(name, ROOT_ACCOUNT)
            accounts[name].users[user] = _share(row["Share"])
            if row.get("Partition", "").strip():
                problems.append(Problem("associations", number, f"user {user}'s association is for partition "
                                        f"{row['Partition'].strip()}: Allot has no partitions; imported as "
                                        f"a member of {name}"))
            continue
        parent = row.get("ParentName", "").strip() or None
        if parent is None and name != ROOT_ACCOUNT:
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1] if stack else ROOT_ACCOUNT
        stack.append((indent, name))
        account = accounts.setdefault(name, Account(name, parent))
        account.parent = parent if name != ROOT_ACCOUNT else None
        account.share = _share(row["Share"])
        if account.share is None and name != ROOT_ACCOUNT:
            problems.append(Problem("associations", number, f"account {name}'s share {row['Share'].strip()!r} is "
                                    "not a number: counted as 1"))
    for account in accounts.values():
        if account.parent is not None:
            if account.parent not in accounts:
                problems.append(Problem("associations", 1, f"account {account.name}'s parent {account.parent} "
                                        "has no row: placed at the top"))
                account.parent = ROOT_ACCOUNT
            accounts[account.parent].children.append(account.name)

    projects: dict[str, str] = {}
    taken: set[str] = set()

    def unique(wanted: str) -> str:
        name, n = wanted, 2
        while name in taken:
            name, n = f"{wanted}-{n}", n + 1
        taken.add(name)
        return name

    def build(account: Account) -> list[dict]:
        """The units for `account`'s children (sub-accounts, and `<account>-own` for users beside them)."""
        entries: list[tuple[int, dict]] = []
        for child_name in account.children:
            child = accounts[child_name]
            unit = {"name": unique(unit_name(child.name))}
            members = sorted(child.users)
            children = build(child)
            if children:
                unit["children"] = children
                if members:
                    # Slurm's users beside sub-accounts are siblings of them in fairshare.
                    own_share = sum(share or 1 for share in child.users.values())
                    own = {"name": unique(f"{unit['name']}-own"), "members": members}
                    unit["children"] = _normalised([*_weighted(children, child), (own_share, own)], cluster)
                    projects[child.name] = own["name"]
            else:
                if members:
                    unit["members"] = members
                projects[child.name] = unit["name"]
            entries.append((child.share if child.share is not None else 1, unit))
        return _normalised(entries, cluster)

    units = build(accounts[ROOT_ACCOUNT])
    if accounts[ROOT_ACCOUNT].users:
        problems.append(Problem("associations", 1, f"users on root ({', '.join(sorted(accounts[ROOT_ACCOUNT].users))})"
                                ": Allot charges jobs to projects, and root is none; their jobs are not imported"))
    members = {user for account in accounts.values() if account.name != ROOT_ACCOUNT for user in account.users}
    org = {"users": [{"username": user} for user in sorted(members)], "units": units}
    return org, projects, problems


def _weighted(units: list[dict], parent: Account) -> list[tuple[int, dict]]:
    """Units already normalised, with the raw share each came from, to normalise again with a new sibling."""
    return [(unit.pop("_raw"), unit) for unit in units]


def _normalised(entries: list[tuple[int, dict]], cluster: str) -> list[dict]:
    """Siblings' raw fairshares as percents of their parent that sum to 100 (rounded down to 0.01 %)."""
    total = sum(raw for raw, _ in entries)
    units = []
    for raw, unit in entries:
        percent = math.floor(raw / total * 10000) / 100 if total else 0
        unit["share"] = {cluster: int(percent) if percent == int(percent) else percent}
        unit["_raw"] = raw
        units.append(unit)
    return units


def strip_raw(units: list[dict]) -> list[dict]:
    """Drop the raw shares kept for normalising; keys in the order FORMATS.md writes them."""
    order = ("name", "managers", "members", "share", "children")
    for index, unit in enumerate(units):
        unit.pop("_raw", None)
        strip_raw(unit.get("children", []))
        units[index] = {key: unit[key] for key in order if key in unit}
    return units


# ------------------------------------------------------------------------------------------------- jobs

_TRES = re.compile(r"([\w/:.-]+)=([\w.]+)")
_MEMORY = {"K": 1 / 1024 / 1024, "M": 1 / 1024, "G": 1, "T": 1024, "P": 1024 * 1024}


def _time(value: str) -> datetime | None:
    value = value.strip()
    if not value or value in {"Unknown", "None", "N/A"}:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def parse_tres(text: str) -> dict:
    """`billing=8,cpu=8,gres/gpu:a100=4,mem=64G,node=1` → gpus, gpu_type, cpus, memory_gib, nodes."""
    tres = {"gpus": 0, "gpu_type": "", "cpus": 0, "memory_gib": 0, "nodes": 1}
    for key, value in _TRES.findall(text):
        if key == "gres/gpu" and value.isdigit():
            tres["gpus"] = max(tres["gpus"], int(value))
        elif key.startswith("gres/gpu:") and value.isdigit():
            tres["gpus"] = max(tres["gpus"], int(value))
            tres["gpu_type"] = key.split(":", 1)[1]
        elif key == "cpu" and value.isdigit():
            tres["cpus"] = int(value)
        elif key == "node" and value.isdigit():
            tres["nodes"] = max(1, int(value))
        elif key == "mem":
            match = re.fullmatch(r"([\d.]+)([KMGTP]?)", value)
            if match:
                tres["memory_gib"] = math.ceil(float(match.group(1)) * _MEMORY[match.group(2) or "M"])
    return tres


def parse_jobs(text: str, *, projects: dict[str, str], min_runtime: int, resumable: bool,
               gpu_types: dict[str, str] | None = None) -> tuple[list[dict], list[dict], list[Problem]]:
    """Workload rows, usage rows and problems from `sacct --parsable2 --allocations` output. A typed GPU request
    (`gres/gpu:h100=8`) keeps its type only through `gpu_types` (Slurm's gres name → Allot's GPU type)."""
    gpu_types = gpu_types or {}
    header, rows = _rows(text)
    problems: list[Problem] = []
    needed = {"JobID", "Account", "AllocTRES", "Submit", "Start", "End", "TimelimitRaw", "State"}
    missing = needed - set(header)
    if missing:
        return [], [], [Problem("jobs", 1, f"no column {', '.join(sorted(missing))} in the header (run `sacct "
                                "--parsable2 --allocations --format=JobID,User,Account,AllocTRES,Submit,Start,End,"
                                "TimelimitRaw,State`)")]
    ran = []
    seen: set[str] = set()
    for number, row, complete in rows:
        if not complete:
            problems.append(Problem("jobs", number, "not as many fields as the header has columns"))
            continue
        job_id, state = row["JobID"].strip(), row["State"].strip().split(" ")[0]
        if "." in job_id:
            problems.append(Problem("jobs", number, f"{job_id} is a job step, not an allocation: skipped "
                                    "(use --allocations)"))
            continue
        if job_id in seen:
            problems.append(Problem("jobs", number, f"{job_id} appears twice: the first row is kept"))
            continue
        account = row["Account"].strip()
        if account not in projects:
            problems.append(Problem("jobs", number, f"{job_id}: account {account!r} is not in the associations: "
                                    "skipped"))
            continue
        submit, start, end = _time(row["Submit"]), _time(row["Start"]), _time(row["End"])
        if submit is None:
            problems.append(Problem("jobs", number, f"{job_id}: no submit time ({row['Submit'].strip()!r}): skipped"))
            continue
        if start is None or end is None:
            problems.append(Problem("jobs", number, f"{job_id} ({state}) never ran to an end: skipped"))
            continue
        if end < start or start < submit:
            problems.append(Problem("jobs", number, f"{job_id}: times out of order (submit {row['Submit']}, start "
                                    f"{row['Start']}, end {row['End']}): skipped"))
            continue
        tres = parse_tres(row["AllocTRES"])
        limit = row["TimelimitRaw"].strip()
        limit_seconds = int(limit) * 60 if limit.isdigit() else None
        if limit_seconds is None and limit not in {"", "UNLIMITED", "Partition_Limit"}:
            problems.append(Problem("jobs", number, f"{job_id}: time limit {limit!r} is not minutes: none kept"))
        seen.add(job_id)
        ran.append((number, job_id, state, row, submit, start, end, tres, limit_seconds))
    if not ran:
        return [], [], problems
    epoch = min(item[4] for item in ran)
    workload, usage = [], []
    for number, job_id, state, row, submit, start, end, tres, limit_seconds in sorted(ran, key=lambda r: r[4]):
        duration = max(1, round((end - start).total_seconds()))
        gpus, nodes = tres["gpus"], tres["nodes"]
        job = {
            "job_id": job_id, "submit": round((submit - epoch).total_seconds()),
            "project": projects[row["Account"].strip()], "user": row.get("User", "").strip() or "",
            "gpus": gpus, "gpus_per_host": gpus // nodes if nodes > 1 and gpus % nodes == 0 else "",
            "gpu_type": tres["gpu_type"], "min_runtime": min(min_runtime, limit_seconds or min_runtime),
            "resumable": 1 if resumable else 0, "duration": duration, "cpus": tres["cpus"],
            "memory_gib": tres["memory_gib"], "slurm_state": state,
        }
        if not job["user"]:
            job["user"] = job["project"]
        if tres["gpu_type"]:
            job["gpu_type"] = gpu_types.get(tres["gpu_type"], "")
            if not job["gpu_type"]:
                problems.append(Problem("jobs", number, f"{job_id}: GPU type {tres['gpu_type']!r} has no Allot type "
                                        f"(--gpu-type-map {tres['gpu_type']}=TYPE): imported as any GPU"))
        if nodes > 1 and gpus % nodes:
            problems.append(Problem("jobs", number, f"{job_id}: {gpus} GPUs on {nodes} nodes do not divide evenly: "
                                    "imported without gpus_per_host"))
        workload.append(job)
        usage.append({"project": job["project"], "user": job["user"], "job_id": job_id,
                      "start": start.isoformat(), "end": end.isoformat(), "gpus": gpus,
                      "gpu_hours": round(gpus * duration / 3600, 4)})
    return workload, usage, problems


WORKLOAD_COLUMNS = ["job_id", "submit", "project", "user", "gpus", "gpus_per_host", "gpu_type", "min_runtime",
                    "resumable", "duration", "cpus", "memory_gib"]
USAGE_COLUMNS = ["project", "user", "job_id", "start", "end", "gpus", "gpu_hours"]


def import_slurm(associations: str, jobs: str | None, *, cluster: str, slurm_cluster: str | None = None,
                 min_runtime: int = 3600, resumable: bool = True, gpu_types: dict[str, str] | None = None) -> Import:
    org, projects, problems = parse_associations(associations, cluster=cluster, slurm_cluster=slurm_cluster)
    strip_raw(org["units"])
    result = Import(org=org, projects=projects, problems=problems)
    if jobs is not None:
        result.workload, result.usage, job_problems = parse_jobs(jobs, projects=projects, min_runtime=min_runtime,
                                                                 resumable=resumable, gpu_types=gpu_types)
        result.problems += job_problems
    return result

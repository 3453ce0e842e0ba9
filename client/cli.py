"""`allot`: the researcher's and on-call's command line.

Exit codes: 0 done; 1 the server refused (the message says why); 2 bad usage;
3 not logged in or the server unreachable.
"""

import argparse
import getpass
import json
import os
import re
import shlex
import shutil
import sys
import time
from datetime import UTC, datetime

from client.api import DEFAULT_SERVER, ApiError, Client, Unreachable, load_config, save_config
from client.execution import RESERVED_NAMES, RESERVED_PREFIXES
from client.text import terminal_safe
from scheduler.core import jobspec
from scheduler.core.durations import format_duration, parse_cli_duration
from scheduler.core.hostlist import compress

EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3
EXIT_PIPE = 141  # as a shell reports a command killed by SIGPIPE (`allot queue | head -1`)
LIVE = ("pending", "starting", "running", "preempting")
STATES = (*LIVE, "completed", "failed", "cancelled", "preempted")
# `allot submit` offers every field of the job table (scheduler/core/jobspec.py) as the option the table names;
# these it shapes itself: global options, the command after --, the directory it runs from, --env/--export.
SHAPED_HERE = ("cluster", "project", "command", "workdir", "env")
SUBMIT_OPTIONS = tuple(spec for spec in jobspec.SUBMIT if spec.cli and spec.name not in SHAPED_HERE)
# Options whose value may start with "-" (a negative duration gets our message, not "expected one argument").
DURATION_OPTIONS = (*(option for spec in SUBMIT_OPTIONS if spec.kind == jobspec.SECONDS for option in spec.cli),
                    "--since", "--until")
REASON_MIN_WIDTH = 24


class Fail(Exception):
    def __init__(self, message: str, code: int):
        self.code = code
        super().__init__(message)


class Parser(argparse.ArgumentParser):
    """argparse, speaking with the CLI's one voice: `allot: <what is wrong>` on standard error, exit 2."""

    def error(self, message):
        message = re.sub(r"^argument (\S+?)(/\S+)?: ", r"\1: ", message)
        raise Fail(f"{message} (see `{self.prog} --help`)", EXIT_USAGE)


def duration(text: str) -> int:
    try:
        return parse_cli_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def states(text: str) -> str:
    """`--state running,pending`: each one known, else exit 2 naming the allowed ones."""
    wanted = [part.strip().lower() for part in text.split(",") if part.strip()]
    unknown = [state for state in wanted if state not in STATES]
    if unknown or not wanted:
        raise argparse.ArgumentTypeError(f"unknown state {', '.join(unknown) or repr(text)}: "
                                         f"use one or more of {', '.join(STATES)}, comma-separated")
    return ",".join(wanted)


def setting(args, name: str) -> str | None:
    """A global option: given on the command line (before or after the command), else $ALLOT_<NAME>, else
    the config file's `name` (`allot login` keeps server, and cluster and project when given)."""
    return getattr(args, name, None) or os.environ.get(f"ALLOT_{name.upper()}") or load_config().get(name) or None


def client_from_config(args) -> Client:
    server, token = setting(args, "server"), setting(args, "token")
    if not token or not server:
        raise Fail("not logged in: run `allot login` first", EXIT_UNREACHABLE)
    return Client(server, token=token)


def parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def ago(value: str | None, now: datetime) -> str:
    moment = parse_time(value)
    return format_duration((now - moment).total_seconds()) if moment else "-"


def clock(value: str | None) -> str:
    """A time in this machine's zone, labelled: "2026-12-01 14:05 UTC" ($TZ chooses the zone)."""
    moment = parse_time(value)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M %Z") if moment else "-"


def zone_label() -> str:
    return datetime.now().astimezone().strftime("%Z")


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 1)] + "…"


def print_table(rows: list[list[str]], headers: list[str], *, wide_last: bool = False) -> None:
    """Columns as wide as their widest cell; the last one (a reason) cut to fit the terminal ($COLUMNS,
    else 100) unless `wide_last` (`--long`)."""
    rows = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=False)]
    if not wide_last and rows:
        room = shutil.get_terminal_size((100, 24)).columns - sum(widths[:-1]) - 2 * (len(widths) - 1)
        widths[-1] = min(widths[-1], max(room, REASON_MIN_WIDTH, len(headers[-1])))
        rows = [[*row[:-1], shorten(row[-1], widths[-1])] for row in rows]
    for row in [headers, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("  ".join(cells).rstrip())


def emit(args, data, render) -> int:
    if getattr(args, "json", False):
        json.dump(data, sys.stdout, indent=2, default=str)
        print()
    else:
        render(data)
    return 0


# ---------------------------------------------------------------- commands


def cmd_login(args) -> int:
    server = setting(args, "server") or DEFAULT_SERVER
    username = args.username or input("Username: ")
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = os.environ.get("ALLOT_PASSWORD") or getpass.getpass("Password: ")
    body = Client(server).post("auth/token/", {"username": username, "password": password})
    config = {key: value for key, value in load_config().items() if key in ("cluster", "project")}
    # --cluster and --project given to login become this machine's defaults.
    config.update({key: getattr(args, key) for key in ("cluster", "project") if getattr(args, key, None)})
    path = save_config({"server": server, "username": username, "token": body["token"], **config})
    defaults = ", ".join(f"{key} {value}" for key, value in config.items())
    print(f"Logged in to {server} as {username}; token kept in {path} (readable only by you)."
          + (f" Defaults: {defaults}." if defaults else ""))
    return 0


def cmd_logout(args) -> int:
    """Revoke the token this machine holds, on the server, and forget it here."""
    config = load_config()
    token = config.get("token")
    server = setting(args, "server")
    if not token:
        print("Not logged in: no token kept here.")
        return 0
    try:
        Client(server or DEFAULT_SERVER, token=token).post("auth/tokens/logout/")
        outcome, code = f"token revoked on {server}", 0
    except ApiError as error:
        # Expired or revoked already (401): nothing left to revoke.
        if error.status != 401:
            raise
        outcome, code = "the token had expired or was revoked already", 0
    except Unreachable as error:
        outcome, code = (f"{error}: the token was NOT revoked there; revoke it on your account page", EXIT_UNREACHABLE)
    save_config({key: value for key, value in config.items() if key != "token"})
    print(f"Logged out ({outcome}); the token is forgotten here.")
    return code


def gpus_label(job: dict) -> str:
    """"4 GPUs", "1 GPU x 500 milli", "1 GPU as a 1g.10gb MIG instance"."""
    label = f"{job['gpus']} GPU{'s' if job['gpus'] != 1 else ''}"
    if job.get("mig_profile"):
        return f"{label} as a {job['mig_profile']} MIG instance"
    return label + (f" x {job['gpu_milli']} milli" if job["gpu_milli"] < 1000 else "")


def gpus_cell(job: dict) -> str:
    """The GPUS column of `allot queue`: "8", "0.5", "1g.10gb" for a MIG instance."""
    if job.get("mig_profile"):
        return job["mig_profile"]
    return f"{job['gpu_milli'] / 1000:g}" if job["gpus"] == 1 and job["gpu_milli"] < 1000 else str(job["gpus"])


# Never copied by `--export ALL`: what the agent sets for every job (the server refuses those; ALLOT_* holds
# this CLI's own token and server) and what belongs to this shell only.
SHELL_ONLY = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})


def job_env(export: str, pairs: list[str]) -> dict[str, str]:
    """The job's own variables: those `--export` copies from this shell (NAME,NAME | ALL | NONE, as sbatch;
    NAME=VALUE items too), then each `--env NAME=VALUE`, which wins."""
    env: dict[str, str] = {}
    for item in [part.strip() for part in export.split(",") if part.strip()]:
        if item.upper() == "NONE":
            continue
        if item.upper() == "ALL":
            env.update({name: value for name, value in os.environ.items()
                        if name not in RESERVED_NAMES | SHELL_ONLY and not name.startswith(RESERVED_PREFIXES)})
        elif "=" in item:
            name, value = item.split("=", 1)
            env[name] = value
        elif item in os.environ:
            env[item] = os.environ[item]
        else:
            print(f"allot: --export {item}: not set in this shell, not exported", file=sys.stderr)
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise Fail(f"--env {pair!r}: expected NAME=VALUE", EXIT_USAGE)
        env[name] = value
    return env


def cmd_submit(args) -> int:
    if not args.command:
        raise Fail("give the command after --, e.g. allot submit ... -- python train.py", EXIT_USAGE)
    for name in ("cluster", "project"):
        setattr(args, name, setting(args, name))
        if not getattr(args, name):
            raise Fail(f"--{name} is required (or ALLOT_{name.upper()}, or `allot login --{name} NAME` to keep a "
                       "default)", EXIT_USAGE)
    if args.gpus is None and args.mig_profile:
        args.gpus = 1  # a MIG instance is one GPU's slice
    for spec in SUBMIT_OPTIONS:
        if spec.required and getattr(args, spec.name) is None:
            extra = " (a MIG instance, --mig-profile, is one GPU's slice)" if spec.name == "gpus" else ""
            raise Fail(f"{spec.cli[0]} is required{extra}", EXIT_USAGE)
    body = {
        "cluster": args.cluster, "project": args.project,
        "command": shlex.join(args.command) if len(args.command) > 1 else args.command[0],
        # As sbatch: the job starts where it was submitted from, unless --chdir says elsewhere.
        "workdir": os.path.abspath(args.chdir) if args.chdir else os.getcwd(),
        "env": job_env(args.export, args.env),
        # The rest as given; what is not given takes the server's default.
        **{spec.name: getattr(args, spec.name) for spec in SUBMIT_OPTIONS if getattr(args, spec.name) is not None},
    }
    job = client_from_config(args).post("jobs/", body)

    def render(job):
        if args.parsable:
            print(job["id"])
            return
        kind = "allocated" if job["allocation"] == "allocated" else "unallocated (free, preemptible)"
        print(f"Submitted job {job['id']} to {job['cluster']} for {job['project']}: {gpus_label(job)}, {kind}.")
        print(f"Follow it with `allot queue --mine`, `allot show {job['id']}` or `allot logs {job['id']} -f`.")

    return emit(args, job, render)


def cmd_queue(args) -> int:
    client = client_from_config(args)
    wanted = args.state or (None if args.all else ",".join(LIVE))
    jobs = client.get_all("jobs/", cluster=getattr(args, "cluster", None), project=getattr(args, "project", None),
                          state=wanted, mine="1" if args.mine else None, user=args.user)
    order = {"pending": 1, "starting": 0, "running": 0, "preempting": 0}
    jobs.sort(key=lambda j: (j["cluster"], order.get(j["state"], 2), j["queue_position"] or 0, j["id"]))
    now = datetime.now(UTC)

    def render(jobs):
        rows = []
        for job in jobs:
            if job["state"] == "pending":
                where = job["pending_reason"] or "-"
                if job["estimated_start"]:
                    where = f"(est. start {clock(job['estimated_start'])}) {where}"
                position = f"{job['queue_position'] or '-'}/{job['project_position'] or '-'}"
            else:
                where = compress(job["hosts"]) or (job["stop_cause"] or "-")
                position = "-"
            rows.append([job["id"], job["cluster"], job["project"], job["user"], job["state"], gpus_cell(job),
                         position, ago(job["submitted_at"], now), where])
        print_table(rows, ["ID", "CLUSTER", "PROJECT", "USER", "STATE", "GPUS", "POS", "AGE", "REASON/HOSTS"],
                    wide_last=args.long)
        if not jobs:
            print("(no jobs)")
        else:
            print("POS is the place in the cluster's fair-share order / in the project; start times are estimates"
                  + ("" if args.long else "; --long for whole reasons") + ".")

    return emit(args, jobs, render)


# The job table's fields `allot show` prints in lines of their own; any other one not at its default is in
# "Also asks".
SHOWN = ("cluster", "project", "gpus", "gpu_type", "gpu_milli", "mig_profile", "topology", "min_runtime",
         "max_runtime", "resumable", "name", "command", "workdir", "env")


def cmd_show(args) -> int:
    job = client_from_config(args).get(f"jobs/{args.id}/")

    def render(job):
        contract = (f"allocated, protected for {format_duration(job['min_runtime'])}" if job["min_runtime"]
                    else "unallocated: free, preemptible at any time")
        lines = [
            ("Job", f"{job['id']} {job['name'] or ''}".rstrip()),
            ("State", job["state"] + (f" ({job['stop_cause']})" if job["stop_cause"] else "")),
            ("Cluster / project / user", f"{job['cluster']} / {job['project']} / {job['user']}"),
            ("GPUs", gpus_label(job) + f", topology {job['topology']}"
             + (f", type {job['gpu_type']}" if job["gpu_type"] else "")),
            ("Contract", contract + (", resumable" if job["resumable"] else ", not resumable")
             + (f", max {format_duration(job['max_runtime'])}" if job["max_runtime"] else "")),
            ("Submitted", clock(job["submitted_at"])),
            ("Started", clock(job["started_at"])),
            ("Ended", clock(job["ended_at"])),
            ("Preemptions", str(job["preemptions"])),
        ]
        also = jobspec.also_asked(job, shown=SHOWN)
        if also:
            lines.insert(5, ("Also asks", "; ".join(f"{label} {value}" for label, value in also)))
        if job["state"] == "pending":
            lines += [
                ("Queue position", f"{job['queue_position'] or '-'} in {job['cluster']}, "
                                   f"{job['project_position'] or '-'} in {job['project']}"),
                ("Why it waits", job["pending_reason"] or "-"),
                ("Estimated start",
                 f"{clock(job['estimated_start'])} (an estimate)" if job["estimated_start"] else "-"),
            ]
        if job.get("failure_reason"):
            lines.append(("Why it failed", job["failure_reason"]))
        if job["gpu_ids"]:
            lines.append(("Hosts", compress(job["hosts"])))
            lines.append(("GPUs held", " ".join(job["gpu_ids"])))
        if job.get("command"):
            lines.append(("Command", job["command"]))
        if job.get("workdir"):
            lines.append(("Directory", job["workdir"]))
        if job.get("env"):
            lines.append(("Environment", " ".join(sorted(job["env"]))))
        width = max(len(label) for label, _ in lines)
        for label, value in lines:
            print(f"{label.ljust(width)}  {value}")
        print("\nEvents:")
        for event in job["events"]:
            cause = f" [{event['cause']}]" if event["cause"] and event["kind"] != "start" else ""
            print(f"  {clock(event['at'])}  {event['kind']:<9}{cause} {event['detail']}  ({event['actor']})")
        for output in job.get("output") or []:
            print(f"\nOutput of rank {output['rank']} on {output['host']} ({output['state']}):")
            if output.get("error"):
                print(f"  {output['error']}")
            print(output["tail"].rstrip() or ("  (no output)" if output["state"] in ("exited", "lost")
                                              else "  (nothing yet)"))

    return emit(args, job, render)


def cmd_cancel(args) -> int:
    job = client_from_config(args).post(f"jobs/{args.id}/cancel/", {"reason": args.reason or ""})

    def render(job):
        if job["state"] == "cancelled":
            print(f"Cancelled job {job['id']}.")
        else:
            print(f"Stopping job {job['id']}: its processes get SIGTERM, then SIGKILL after the grace period.")

    return emit(args, job, render)


def drain_line(progress) -> str:
    """A draining host's progress: "; 2 jobs left, the last leaves by 14:05 (at its minimum runtime)"."""
    if not progress:
        return ""
    if not progress["jobs_left"]:
        return "; no jobs left: drained at the next tick"
    jobs = f"{progress['jobs_left']} job{'s' if progress['jobs_left'] != 1 else ''} left"
    if not progress["last_leaves_at"]:  # the scheduler has yet to decide (its next tick)
        return f"; {jobs} ({progress['why']})"
    return f"; {jobs}, the last leaves by {clock(progress['last_leaves_at'])} ({progress['why']})"


def cmd_hosts(args) -> int:
    client = client_from_config(args)
    if args.action:
        if not args.name or not args.reason:
            raise Fail(f"usage: allot hosts {args.action} NAME --reason TEXT", EXIT_USAGE)
        host = client.post(f"hosts/{args.name}/{args.action}/", {"reason": args.reason})
        return emit(args, host, lambda h: print(f"{h['name']}: {h['state']} — {h['state_reason']}"
                                                + drain_line(h.get("drain_progress"))))
    hosts = client.get_all("hosts/", cluster=getattr(args, "cluster", None), state=args.state)
    now = datetime.now(UTC)

    def render(hosts):
        rows = [[h["name"], h["cluster"], h["domain"], f"{h['gpu_count']}x{h['gpu_type']}", h["state"],
                 ago(h["last_heartbeat_at"], now), h["state_reason"] or "-"] for h in hosts]
        print_table(rows, ["HOST", "CLUSTER", "DOMAIN", "GPUS", "STATE", "HEARTBEAT", "REASON"], wide_last=args.long)

    return emit(args, hosts, render)


def moment(text: str) -> str:
    """`--since 30d` (that long ago), `--since 2026-11-01` or an ISO time (this machine's zone unless it names
    one): an ISO time in UTC for the API."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?[smhdw](\d+[smhdw])*", text):
        return datetime.fromtimestamp(datetime.now(UTC).timestamp() - parse_cli_duration(text), UTC).isoformat()
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: use a span back from now (30d, 12h) or a date "
                                         "(2026-11-01, 2026-11-01T09:00)") from None
    return (value if value.tzinfo else value.astimezone()).astimezone(UTC).isoformat()


def elapsed(job: dict, now: datetime) -> str:
    start, end = parse_time(job["started_at"]), parse_time(job["ended_at"]) or now
    return format_duration((end - start).total_seconds()) if start else "-"


def write_csv(rows: list[list], headers: list[str]) -> None:
    import csv

    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(rows)


def cmd_history(args) -> int:
    """Ended and live jobs over a period, as sacct: mine unless --all-users, --user, --project or --unit."""
    everyone = args.all_users or args.user or getattr(args, "project", None) or args.unit
    jobs = client_from_config(args).get_all(
        "jobs/", cluster=getattr(args, "cluster", None), project=getattr(args, "project", None), unit=args.unit,
        user=args.user, state=args.state, since=args.since or moment("7d"), until=args.until,
        mine=None if everyone or args.my_projects else "1", my_projects="1" if args.my_projects else None)
    now = datetime.now(UTC)
    headers = ["ID", "NAME", "CLUSTER", "PROJECT", "USER", "STATE", "GPUS", "SUBMITTED", "START", "END",
               "ELAPSED", "EXIT", "REASON"]

    def rows(jobs):
        return [[job["id"], job["name"] or "-", job["cluster"], job["project"], job["user"], job["state"],
                 gpus_cell(job), clock(job["submitted_at"]), clock(job["started_at"]), clock(job["ended_at"]),
                 elapsed(job, now), "-" if job["exit_code"] is None else job["exit_code"],
                 job["failure_reason"] or job["stop_cause"] or job["pending_reason"] or "-"] for job in jobs]

    def render(jobs):
        if args.csv:
            write_csv(rows(jobs), headers)
            return
        print_table(rows(jobs), headers, wide_last=args.long)
        print(f"({len(jobs)} job{'s' if len(jobs) != 1 else ''}; times in {zone_label()})" if jobs else "(no jobs)")

    return emit(args, jobs, render)


def gpu_hours(value: float) -> str:
    return f"{value:,.1f}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def cmd_usage(args) -> int:
    """GPU-hours used over a period by unit and by user against entitlement, as sreport."""
    report = client_from_config(args).get(
        "usage/", cluster=setting(args, "cluster"), unit=args.unit, since=args.since or moment("30d"),
        until=args.until)

    def render(report):
        headers = ["CLUSTER", "UNIT", "USER", "ALLOCATED", "UNALLOCATED", "ENTITLED", "USED/ENTITLED"]
        rows = []  # (depth, cells) with numbers as numbers
        for cluster in report["clusters"]:
            for unit in cluster["units"]:
                rows.append((unit["depth"], [cluster["cluster"], unit["unit"], "-", unit["allocated_gpu_hours"],
                                             unit["unallocated_gpu_hours"], unit["entitled_gpu_hours"],
                                             unit["percent_of_entitlement"]]))
                if not args.no_users:
                    rows += [(unit["depth"] + 1, [cluster["cluster"], unit["unit"], user["user"],
                                                  user["allocated_gpu_hours"], user["unallocated_gpu_hours"], None,
                                                  None]) for user in unit["users"]]
        if args.csv:
            write_csv([["" if cell is None else cell for cell in cells] for _, cells in rows], headers)
            return
        print(f"GPU-hours from {clock(report['since'])} to {clock(report['until'])} "
              f"({format_duration(report['seconds'])}); allocated ones are charged, unallocated ones are free.")
        print_table([[cluster, "  " * depth + unit, user, gpu_hours(allocated), gpu_hours(unallocated),
                      "-" if entitled is None else gpu_hours(entitled), percent(share)]
                     for depth, (cluster, unit, user, allocated, unallocated, entitled, share) in rows],
                    headers, wide_last=True)
        if not rows:
            print("(no units)")

    return emit(args, report, render)


def new_text(before: str, after: str) -> tuple[str, bool]:
    """What `after` (a rank's output tail now) adds to `before` (the tail printed already): (the new text,
    whether some output was lost between the two: the tail moved past what was printed)."""
    if after.startswith(before):
        return after[len(before):], False
    anchor = before[-200:]
    at = after.rfind(anchor)
    if at >= 0:
        return after[at + len(anchor):], False
    return after, True


def cmd_logs(args) -> int:
    """A job's output, every rank (or --rank N) of its current run (or --run N); -f follows it until it ends."""
    client = client_from_config(args)
    params = {"rank": args.rank, "run": args.run}
    printed: dict[tuple[int, int], str] = {}
    errors: set[tuple[int, int]] = set()
    many = None
    while True:
        logs = client.get(f"jobs/{args.id}/logs/", **params)
        if getattr(args, "json", False) and not args.follow:
            return emit(args, logs, None)
        if many is None:
            many = len(logs["ranks"]) > 1
            if not logs["ranks"]:
                print(f"job {logs['job']} ({logs['state']}): no output yet" if logs["state"] in LIVE
                      else f"job {logs['job']} ({logs['state']}): no output", file=sys.stderr)
        for rank in logs["ranks"]:
            key = (rank["run"], rank["rank"])
            prefix = f"[rank {rank['rank']} {rank['host']}] " if many else ""
            text, lost = new_text(printed.get(key, ""), rank["tail"])
            if lost:
                print(f"{prefix}[… earlier output is no longer kept by the server]")
            held = ""
            if args.follow and logs["state"] in LIVE and not text.endswith("\n"):
                text, _, held = text.rpartition("\n")  # a line still being written: printed once it ends
                text += "\n" if text else ""
            printed[key] = rank["tail"][: len(rank["tail"]) - len(held)]
            for line in text.splitlines(keepends=True):
                sys.stdout.write(prefix + line + ("" if line.endswith("\n") else "\n"))
            if rank["error"] and key not in errors:
                errors.add(key)
                print(f"{prefix}{rank['error']}", file=sys.stderr)
        sys.stdout.flush()
        if not args.follow or logs["state"] not in LIVE:
            return 0
        pause(args.interval)


def pause(seconds: float) -> None:
    time.sleep(seconds)


def submit_option(parser: argparse.ArgumentParser, spec: jobspec.JobField) -> None:
    """`allot submit`'s option for a field of the job table: a flag for a yes/no, choices, a duration."""
    words = spec.help.rstrip(".")
    if spec.kind == jobspec.BOOL:
        parser.add_argument(*spec.cli, dest=spec.name, action="store_true", help=words)
        return
    kind = {jobspec.INT: int, jobspec.SECONDS: duration}.get(spec.kind, str)
    choices = spec.values if spec.kind == jobspec.CHOICE else None
    if spec.kind == jobspec.SECONDS:
        words += " (a duration: 90 (minutes), 2h30m, 02:30:00)"
    parser.add_argument(*spec.cli, dest=spec.name, type=kind, choices=choices, help=words)


def global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """Options every command takes, before or after its name; defaults come from $ALLOT_<NAME>, then the config
    file (`allot login` keeps them). SUPPRESS: a command's parser must not overwrite what was given before it."""
    default = None if top else argparse.SUPPRESS
    group = parser.add_argument_group("global options (before or after the command)")
    group.add_argument("--server", default=default,
                       help=f"Allot's URL (default: $ALLOT_SERVER, the one `allot login` kept, else {DEFAULT_SERVER})")
    group.add_argument("--token", default=default, help="an API token (default: $ALLOT_TOKEN, the one kept here)")
    group.add_argument("--cluster", default=default, help="the cluster (default for submit and usage: "
                       "$ALLOT_CLUSTER or the config file's)")
    group.add_argument("--project", default=default, help="the project (default for submit: $ALLOT_PROJECT or the "
                       "config file's)")
    group.add_argument("--json", action="store_true", default=False if top else argparse.SUPPRESS,
                       help="print the data as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="allot", description="Submit and follow GPU jobs on Allot. Durations: "
                    "90 (minutes, as Slurm), 90s, 2h30m, 02:30:00, 1-12:00:00.")
    global_options(parser, top=True)
    commands = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND", parser_class=Parser)

    def command(name, **kwargs):
        sub = commands.add_parser(name, **kwargs)
        global_options(sub, top=False)
        return sub

    login = command("login", help="log in and keep a token (and --cluster, --project as defaults) here")
    login.add_argument("--username", "-u")
    login.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    login.set_defaults(handler=cmd_login)

    logout = command("logout", help="revoke the token kept by `allot login` and forget it")
    logout.set_defaults(handler=cmd_logout)

    submit = command("submit", help="submit a job: allot submit [options] -- COMMAND")
    for spec in SUBMIT_OPTIONS:
        submit_option(submit, spec)
    submit.add_argument("--chdir", "-D", metavar="DIR",
                        help="the directory the job starts in on its hosts (default: this one, as with sbatch)")
    submit.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a variable for the job (repeatable); wins over --export")
    submit.add_argument("--export", default="NONE", metavar="NAME,NAME|ALL|NONE",
                        help="variables of this shell the job gets, as sbatch --export (default NONE: only what the "
                             "agent sets and --env)")
    submit.add_argument("--parsable", action="store_true", help="print only the job id, as sbatch --parsable: "
                        "JOB=$(allot submit --parsable ...)")
    submit.add_argument("command", nargs=argparse.REMAINDER, help="after --: the command to run")
    submit.set_defaults(handler=cmd_submit)

    queue = command("queue", aliases=["squeue"], help="pending and running jobs, in fair-share order")
    queue.add_argument("--user")
    queue.add_argument("--mine", action="store_true")
    queue.add_argument("--state", type=states, help=f"comma-separated: {','.join(STATES)}")
    queue.add_argument("--all", action="store_true", help="ended jobs too")
    queue.add_argument("--long", "-l", action="store_true", help="whole reasons, however wide")
    queue.set_defaults(handler=cmd_queue)

    history = command("history", aliases=["sacct"], help="jobs over a period, ended ones too (mine by default)")
    history.add_argument("--since", "-S", type=moment, default=None,
                         help="jobs live at or after this: 30d (ago), 2026-11-01, 2026-11-01T09:00 (default 7d)")
    history.add_argument("--until", "-E", type=moment, help="jobs submitted before this")
    history.add_argument("--state", "-s", type=states, help=f"comma-separated: {','.join(STATES)}")
    history.add_argument("--user", "-u", help="that user's jobs")
    history.add_argument("--unit", help="jobs of every project in that unit")
    history.add_argument("--my-projects", action="store_true", help="jobs of the projects I belong to")
    history.add_argument("--all-users", "-a", action="store_true", help="everyone's jobs")
    history.add_argument("--csv", action="store_true", help="CSV, for a spreadsheet")
    history.add_argument("--long", "-l", action="store_true", help="whole reasons, however wide")
    history.set_defaults(handler=cmd_history)

    usage = command("usage", aliases=["sreport"],
                    help="GPU-hours used by unit and user over a period, against entitlement")
    usage.add_argument("--unit", help="this unit and those under it (default: every unit)")
    usage.add_argument("--since", "-S", type=moment, default=None, help="30d (ago, the default), 2026-11-01, …")
    usage.add_argument("--until", "-E", type=moment, help="default: now")
    usage.add_argument("--no-users", action="store_true", help="units only")
    usage.add_argument("--csv", action="store_true", help="CSV, for a spreadsheet")
    usage.set_defaults(handler=cmd_usage)

    logs = command("logs", help="a job's output: every rank, or --rank N; -f follows it")
    logs.add_argument("id", type=int)
    logs.add_argument("--follow", "-f", action="store_true", help="print new output until the job ends")
    logs.add_argument("--rank", type=int, help="only this rank")
    logs.add_argument("--run", type=int, help="an earlier run (0 is the first; default: the current one)")
    logs.add_argument("--interval", type=float, default=2.0, help=argparse.SUPPRESS)
    logs.set_defaults(handler=cmd_logs)

    show = command("show", help="a job: contract, place in the queue, events, output")
    show.add_argument("id", type=int)
    show.set_defaults(handler=cmd_show)

    cancel = command("cancel", aliases=["scancel"], help="cancel a job")
    cancel.add_argument("id", type=int)
    cancel.add_argument("--reason")
    cancel.set_defaults(handler=cmd_cancel)

    hosts = command("hosts", aliases=["sinfo"], help="hosts and their state; on-call: cordon, drain, resume")
    hosts.add_argument("action", nargs="?", choices=["cordon", "drain", "resume"])
    hosts.add_argument("name", nargs="?")
    hosts.add_argument("--reason")
    hosts.add_argument("--state")
    hosts.add_argument("--long", "-l", action="store_true", help="whole reasons, however wide")
    hosts.set_defaults(handler=cmd_hosts)
    return parser


def joined_durations(argv: list[str]) -> list[str]:
    """`--min-runtime -5m` → `--min-runtime=-5m`, so that the duration's own check answers."""
    out, index = [], 0
    while index < len(argv):
        token = argv[index]
        if token == "--":
            return out + argv[index:]
        if token in DURATION_OPTIONS and index + 1 < len(argv) and re.match(r"^-\d", argv[index + 1]):
            out.append(f"{token}={argv[index + 1]}")
            index += 2
            continue
        out.append(token)
        index += 1
    return out


def quiet_closed_pipe() -> int:
    """Standard output's reader went away (`allot queue | head -1`): stop without a traceback, and keep
    Python's exit-time flush from reporting it."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return EXIT_PIPE


@terminal_safe
def main(argv=None) -> int:
    argv = joined_durations(list(sys.argv[1:] if argv is None else argv))
    try:
        args = build_parser().parse_args(argv)
        if getattr(args, "command", None) and args.command[:1] == ["--"]:
            args.command = args.command[1:]
        return args.handler(args)
    except SystemExit as done:  # --help
        return done.code if isinstance(done.code, int) else 0
    except Fail as error:
        print(f"allot: {error}", file=sys.stderr)
        return error.code
    except ApiError as error:
        if error.status == 401:
            print("allot: not logged in or token revoked: run `allot login`", file=sys.stderr)
            return EXIT_UNREACHABLE
        print(f"allot: {error}", file=sys.stderr)
        return EXIT_REFUSED
    except Unreachable as error:
        print(f"allot: {error}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except BrokenPipeError:
        return quiet_closed_pipe()
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""`allot`: the researcher's and on-call's command line.

Exit codes: 0 done; 1 the server refused (the message says why); 2 bad usage;
3 not logged in or the server unreachable.
"""

import argparse
import getpass
import json
import os
import shlex
import sys
from datetime import UTC, datetime

from client.api import DEFAULT_SERVER, ApiError, Client, Unreachable, load_config, save_config
from client.execution import RESERVED_NAMES, RESERVED_PREFIXES
from client.text import terminal_safe
from scheduler.core.durations import format_duration, parse_duration

EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3
LIVE = ("pending", "starting", "running", "preempting")


class Fail(Exception):
    def __init__(self, message: str, code: int):
        self.code = code
        super().__init__(message)


def duration(text: str) -> int:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def client_from_config(args) -> Client:
    config = load_config()
    server = args.server or os.environ.get("ALLOT_SERVER") or config.get("server")
    token = os.environ.get("ALLOT_TOKEN") or config.get("token")
    if not token or not server:
        raise Fail("not logged in: run `allot login` first", EXIT_UNREACHABLE)
    return Client(server, token=token)


def parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def ago(value: str | None, now: datetime) -> str:
    moment = parse_time(value)
    return format_duration((now - moment).total_seconds()) if moment else "-"


def clock(value: str | None) -> str:
    moment = parse_time(value)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M") if moment else "-"


def print_table(rows: list[list[str]], headers: list[str]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    for row in [headers, *rows]:
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)]
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
    server = args.server or os.environ.get("ALLOT_SERVER") or load_config().get("server") or DEFAULT_SERVER
    username = args.username or input("Username: ")
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = os.environ.get("ALLOT_PASSWORD") or getpass.getpass("Password: ")
    body = Client(server).post("auth/token/", {"username": username, "password": password})
    path = save_config({"server": server, "username": username, "token": body["token"]})
    print(f"Logged in to {server} as {username}; token kept in {path} (readable only by you).")
    return 0


def cmd_logout(args) -> int:
    """Revoke the token this machine holds, on the server, and forget it here."""
    config = load_config()
    token = config.get("token")
    server = args.server or os.environ.get("ALLOT_SERVER") or config.get("server")
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
    if args.gpus is None:
        if not args.mig_profile:
            raise Fail("--gpus is required (a MIG instance, --mig-profile, is one GPU's slice)", EXIT_USAGE)
        args.gpus = 1
    body = {
        "cluster": args.cluster, "project": args.project, "gpus": args.gpus, "min_runtime": args.min_runtime,
        "resumable": args.resumable, "topology": args.topology, "priority": args.priority,
        "command": shlex.join(args.command) if len(args.command) > 1 else args.command[0],
        "gpu_milli": args.gpu_milli, "cpus": args.cpus, "memory_gib": args.memory_gib,
        # As sbatch: the job starts where it was submitted from, unless --chdir says elsewhere.
        "workdir": os.path.abspath(args.chdir) if args.chdir else os.getcwd(),
        "env": job_env(args.export, args.env),
    }
    for key in ("gpus_per_host", "gpu_type", "max_runtime", "name", "simulated_duration", "mig_profile"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    job = client_from_config(args).post("jobs/", body)

    def render(job):
        kind = "allocated" if job["allocation"] == "allocated" else "unallocated (free, preemptible)"
        print(f"Submitted job {job['id']} to {job['cluster']} for {job['project']}: {gpus_label(job)}, {kind}.")
        print(f"Follow it with `allot queue --mine` or `allot show {job['id']}`.")

    return emit(args, job, render)


def cmd_queue(args) -> int:
    client = client_from_config(args)
    states = args.state or (None if args.all else ",".join(LIVE))
    jobs = client.get_all("jobs/", cluster=args.cluster, project=args.project, state=states,
                          mine="1" if args.mine else None, user=args.user)
    order = {"pending": 1, "starting": 0, "running": 0, "preempting": 0}
    jobs.sort(key=lambda j: (j["cluster"], order.get(j["state"], 2), j["queue_position"] or 0, j["id"]))
    now = datetime.now(UTC)

    def render(jobs):
        rows = []
        for job in jobs:
            if job["state"] == "pending":
                where = job["pending_reason"] or "-"
                if job["estimated_start"]:
                    where += f" (est. start {clock(job['estimated_start'])})"
                position = f"{job['queue_position'] or '-'}/{job['project_position'] or '-'}"
            else:
                where = ",".join(job["hosts"]) or (job["stop_cause"] or "-")
                position = "-"
            rows.append([job["id"], job["cluster"], job["project"], job["user"], job["state"], gpus_cell(job),
                         position, ago(job["submitted_at"], now), where])
        print_table(rows, ["ID", "CLUSTER", "PROJECT", "USER", "STATE", "GPUS", "POS", "AGE", "REASON/HOSTS"])
        if not jobs:
            print("(no jobs)")
        else:
            print("POS is the place in the cluster's fair-share order / in the project; start times are estimates.")

    return emit(args, jobs, render)


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
    return f"; {jobs}, the last leaves by {clock(progress['last_leaves_at'])} ({progress['why']})"


def cmd_hosts(args) -> int:
    client = client_from_config(args)
    if args.action:
        if not args.name or not args.reason:
            raise Fail(f"usage: allot hosts {args.action} NAME --reason TEXT", EXIT_USAGE)
        host = client.post(f"hosts/{args.name}/{args.action}/", {"reason": args.reason})
        return emit(args, host, lambda h: print(f"{h['name']}: {h['state']} — {h['state_reason']}"
                                                + drain_line(h.get("drain_progress"))))
    hosts = client.get_all("hosts/", cluster=args.cluster, state=args.state)
    now = datetime.now(UTC)

    def render(hosts):
        rows = [[h["name"], h["cluster"], h["domain"], f"{h['gpu_count']}x{h['gpu_type']}", h["state"],
                 ago(h["last_heartbeat_at"], now), h["state_reason"] or "-"] for h in hosts]
        print_table(rows, ["HOST", "CLUSTER", "DOMAIN", "GPUS", "STATE", "HEARTBEAT", "REASON"])

    return emit(args, hosts, render)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="allot", description="Submit and follow GPU jobs on Allot.")
    parser.add_argument("--server", help=f"Allot's URL (default: from `allot login`, else {DEFAULT_SERVER})")
    commands = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")

    login = commands.add_parser("login", help="log in and keep a token in your config directory")
    login.add_argument("--username", "-u")
    login.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    login.set_defaults(handler=cmd_login)

    logout = commands.add_parser("logout", help="revoke the token kept by `allot login` and forget it")
    logout.set_defaults(handler=cmd_logout)

    submit = commands.add_parser("submit", help="submit a job: allot submit [options] -- COMMAND")
    submit.add_argument("--cluster", required=True)
    submit.add_argument("--project", required=True)
    submit.add_argument("--gpus", type=int, help="GPUs in total (required; 1 when --mig-profile is given)")
    submit.add_argument("--min-runtime", type=duration, required=True,
                        help="protected (and charged) for this long: 90s, 15m, 2h; 0 = unallocated")
    submit.add_argument("--resumable", action="store_true", help="requeue it when preempted (it checkpoints)")
    submit.add_argument("--gpus-per-host", type=int)
    submit.add_argument("--gpu-type", help="e.g. H100, or GB200|H100")
    submit.add_argument("--gpu-milli", type=int, default=1000, help="a fraction of one GPU, 1..1000")
    submit.add_argument("--mig-profile", help="a MIG instance instead of a whole GPU: 1g.10gb, 1g.20gb, 2g.20gb, "
                                              "3g.40gb, 4g.40gb or 7g.80gb (with --gpus 1)")
    submit.add_argument("--topology", choices=["any", "domain", "preferred"], default="any")
    submit.add_argument("--max-runtime", type=duration)
    submit.add_argument("--priority", choices=["low", "normal", "high"], default="normal")
    submit.add_argument("--cpus", type=int, default=0)
    submit.add_argument("--memory-gib", type=int, default=0)
    submit.add_argument("--name")
    submit.add_argument("--simulated-duration", type=duration, help="simulated clusters: the work it needs")
    submit.add_argument("--chdir", "-D", metavar="DIR",
                        help="the directory the job starts in on its hosts (default: this one, as with sbatch)")
    submit.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a variable for the job (repeatable); wins over --export")
    submit.add_argument("--export", default="NONE", metavar="NAME,NAME|ALL|NONE",
                        help="variables of this shell the job gets, as sbatch --export (default NONE: only what the "
                             "agent sets and --env)")
    submit.add_argument("--json", action="store_true")
    submit.add_argument("command", nargs=argparse.REMAINDER, help="after --: the command to run")
    submit.set_defaults(handler=cmd_submit)

    queue = commands.add_parser("queue", help="pending and running jobs, in fair-share order")
    queue.add_argument("--cluster")
    queue.add_argument("--project")
    queue.add_argument("--user")
    queue.add_argument("--mine", action="store_true")
    queue.add_argument("--state", help="comma-separated states")
    queue.add_argument("--all", action="store_true", help="ended jobs too")
    queue.add_argument("--json", action="store_true")
    queue.set_defaults(handler=cmd_queue)

    show = commands.add_parser("show", help="a job: contract, place in the queue, events, output")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=cmd_show)

    cancel = commands.add_parser("cancel", help="cancel a job")
    cancel.add_argument("id", type=int)
    cancel.add_argument("--reason")
    cancel.add_argument("--json", action="store_true")
    cancel.set_defaults(handler=cmd_cancel)

    hosts = commands.add_parser("hosts", help="hosts and their state; on-call: cordon, drain, resume")
    hosts.add_argument("action", nargs="?", choices=["cordon", "drain", "resume"])
    hosts.add_argument("name", nargs="?")
    hosts.add_argument("--reason")
    hosts.add_argument("--cluster")
    hosts.add_argument("--state")
    hosts.add_argument("--json", action="store_true")
    hosts.set_defaults(handler=cmd_hosts)
    return parser


@terminal_safe
def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "command", None) and args.command[:1] == ["--"]:
        args.command = args.command[1:]
    try:
        return args.handler(args)
    except Fail as error:
        print(f"allot: {error}", file=sys.stderr)
        return error.code
    except ApiError as error:
        print(f"allot: {error}" if error.status != 401 else "allot: not logged in or token revoked: run `allot login`",
              file=sys.stderr)
        return EXIT_REFUSED if error.status != 401 else EXIT_UNREACHABLE
    except Unreachable as error:
        print(f"allot: {error}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

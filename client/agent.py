"""`allot-agent`: runs on each host, runs the jobs Allot assigns to it, each as its submitter.

Every heartbeat it reports the host's GPUs (through NVML when the machine has it, client/nvml.py, else
the configured list) with their health events, how it contains jobs, and each job rank it runs; the reply
says what to start and what to stop.

Run as root (the production set-up, deploy/systemd/allot-agent.service), it starts each rank under the
submitter's POSIX account (client/execution.py: `initgroups`, gid, then uid; never uid 0 unless the
cluster allows root jobs), in the job's working directory, with an environment it builds itself (the
account's, the job's own variables, CUDA_VISIBLE_DEVICES and the variables torchrun reads: nothing of its
own, its token least of all), in its own cgroup (client/cgroups.py). A stop freezes the cgroup, signals
every process in it (SIGTERM, the grace period, SIGKILL) and the exit is reported only when the cgroup is
empty; when a rank's command ends, whatever it left behind is killed. Run as any other user — or with
`--single-user` — it is a single-user agent: every job runs as its own account, only that account's jobs
are run, and with no cgroup it falls back to process groups (`containment: none` in the heartbeat).

Each rank's first process is a monitor (client/monitor.py) that outlives an agent restart and writes the
command's exit status to the agent's root-only state directory: the agent keeps its ranks in
`<state>/agent-state.json`, adopts them at start and lets the server decide whether they may go on.

Checkpoint times are file times on this host's clock; they are sent in the server's clock (the offset
measured at each heartbeat), so a host whose clock is off does not move its jobs' checkpoints.
"""

import argparse
import json
import logging
import os
import pwd
import random
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path

from client.api import ApiError, Client, Unreachable
from client.cgroups import Containment, ContainmentError, Group, detect, gpu_device_numbers
from client.execution import (
    Account,
    Refused,
    account_of,
    job_environment,
    owned_mtime,
    prepare_job_dir,
    read_tail,
    resolve_account,
)
from client.nvml import NvmlProbe
from client.text import clean_output

log = logging.getLogger("allot-agent")
TAIL_BYTES = 8000
POLL_SECONDS = 0.2
DEFAULT_TOKEN_FILE = "/etc/allot/agent.token"
TOKEN_VARIABLE = "ALLOT_AGENT_TOKEN"
MAX_UNSENT_EVENTS = 1000
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)  # where `python -m client.monitor` finds `client`


@dataclass
class Process:
    """One rank this agent runs (or refused to run), as kept in its state file across restarts."""

    job: int
    run: int
    rank: int
    pid: int | None  # the command's process (the head of its session)
    output: str = ""
    checkpoint_file: str = ""
    started_at: float = 0.0
    exit_code: int | None = None  # None after it ended: unknown (its monitor was killed), or never started
    ended: bool = False
    stop_deadline: float | None = None  # monotonic time at which SIGKILL falls
    killed: bool = False
    reported_exit: bool = False
    exit_file: str = ""  # written by the monitor when the command ends
    monitor_pid: int | None = None
    cgroup: str = ""  # the rank's cgroup name ("" with no containment)
    uid: int | None = None  # the account it runs as: what the agent reads back must be that account's
    error: str = ""  # why it did not start, or how it ended (out of memory)
    memory_mib: int = 0
    host: str = ""
    popen: subprocess.Popen | None = field(default=None, repr=False, compare=False)
    group: Group | None = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.job, self.run, self.rank)

    def monitor_running(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return self.monitor_pid is not None and pid_running(self.monitor_pid)

    def leftovers(self) -> list[int]:
        """Processes of the rank still there: its cgroup's, or with no cgroup its session's and the
        monitor's descendants (a subreaper's orphans are its children)."""
        if self.group is not None:
            return self.group.pids() if self.group.exists() else []
        found = set()
        if self.pid is not None:
            found |= processes_in_session(self.pid)
        if self.monitor_pid is not None:
            found |= descendants(self.monitor_pid)
        return sorted(found)

    def signal(self, signum: int) -> None:
        if self.group is not None and self.group.exists():
            if signum == signal.SIGKILL:
                self.group.kill()
            else:
                self.group.signal(signum)
            return
        for pid in self.leftovers():
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def alive(self) -> bool:
        """Whether the rank still runs; once its command ended, nothing it left behind may stay."""
        if self.ended:
            return False
        monitor = self.monitor_running()
        ended = read_exit_file(self.exit_file)
        if ended is None and monitor:
            return True
        if self.leftovers():
            self.signal(signal.SIGKILL)  # the command ended: whatever it left behind goes with it
            return True
        if monitor:
            return True  # it reaps the last of them and writes nothing more
        if ended is not None:
            self.exit_code, error = ended
            self.error = self.error or error
        if self.group is not None:
            if self.group.oom_kills() and not self.error:
                limit = f"its memory limit of {self.memory_mib} MiB" if self.memory_mib else "the host's memory"
                self.error = f"rank {self.rank} out of memory on {self.host}: killed by the kernel at {limit}"
            self.group.remove()
        self.ended = True
        return False


def pid_running(pid: int) -> bool:
    """A live process, not a zombie: an orphan whose new parent does not reap it (a container's
    init that is not an init) stays a zombie, and signal 0 still reaches it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (not Linux): signal 0 is all we know


def _proc_stats() -> dict[int, tuple[int, int]]:
    """pid → (parent pid, session id) of every live process (Linux /proc)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields_ = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields_[0] != "Z":
            stats[int(entry)] = (int(fields_[1]), int(fields_[3]))
    return stats


def processes_in_session(session: int) -> set[int]:
    return {pid for pid, (_, sid) in _proc_stats().items() if sid == session}


def descendants(ancestor: int) -> set[int]:
    stats = _proc_stats()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(), list(children.get(ancestor, []))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def read_exit_file(path: str) -> tuple[int | None, str] | None:
    """(exit code, error) from the monitor's exit file; None while there is none."""
    try:
        text = Path(path).read_text().strip() if path else ""
    except OSError:
        return None
    if not text:
        return None
    try:
        facts = json.loads(text)
    except ValueError:
        return None
    if isinstance(facts, int):  # written by an agent before this one
        return facts, ""
    return facts.get("code"), str(facts.get("error") or "")


def cuda_visible_devices(assignment: dict, probe: NvmlProbe | None = None) -> str:
    """CUDA_VISIBLE_DEVICES for an assignment.

    Whole GPUs and fractions: the GPU indices ("0,1"). A MIG job: its
    instances ("mig" in the assignment). With NVML on the host each is the
    instance's real UUID, ``MIG-<uuid>`` (found by GPU index and start slot,
    `NvmlProbe.mig_uuid`); without NVML, or when NVML does not show that
    instance, the stable id the server sends, ``MIG-<host>-<gpu index>-<start slot>``:
    what tests and hosts without GPUs see, which CUDA itself would not know.
    """
    instances = assignment.get("mig") or []
    if not instances:
        return ",".join(str(index) for index in assignment["gpus"])
    probe = probe or NvmlProbe()
    return ",".join(probe.mig_uuid(instance["gpu"], instance["start"]) or instance["id"] for instance in instances)


class Agent:
    def __init__(self, *, server: str, token: str, host: str, gpus: list[int] | None, workdir: Path,
                 address: str | None = None, single_user: bool = False, probe: NvmlProbe | None = None,
                 containment: Containment | None = None, dev_dir: Path = Path("/dev"), cgroup_parent: str = "allot"):
        self.client = Client(server, token=token, scheme="Agent")
        self.host = host
        self.configured_gpus = gpus
        self.address = address or socket.gethostname()
        self.root = os.geteuid() == 0
        # A root agent runs each job as its submitter; any other runs every job as itself, only its own.
        self.own: Account | None = None if self.root and not single_user else account_of(pwd.getpwuid(os.getuid()))
        self.probe = probe if probe is not None else NvmlProbe()
        self.containment = (containment if containment is not None
                            else detect(host=host, privileged=self.root, parent=cgroup_parent))
        self.dev_dir = dev_dir
        self.minors: dict[int, int] = {}
        # <workdir>: the state directory (root-only) and, beside it, the jobs' private directories.
        self.base = workdir
        self.state_dir = workdir / "state"
        self.jobs_dir = workdir / "jobs"
        self.base.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(exist_ok=True)
        self.jobs_dir.mkdir(exist_ok=True)
        if self.root:
            for path in self.base.parents:  # the jobs' accounts must reach their own directories
                if path == path.parent:
                    break
                mode = path.stat().st_mode
                if not mode & stat.S_IXOTH:
                    log.warning("%s is not searchable by other users: jobs cannot reach %s", path, self.jobs_dir)
            os.chmod(self.base, 0o711)
            os.chmod(self.jobs_dir, 0o711)
        os.chmod(self.state_dir, 0o700)
        self.processes: dict[tuple[int, int, int], Process] = {}
        self.interval = 5.0
        self.allow_root_jobs = False
        self.cluster = ""
        self.clock_offset = 0.0  # server clock − this host's clock, seconds (from the last heartbeat)
        self.stopping = False
        self.unsent_events: list[dict] = []
        self.state_file = self.state_dir / "agent-state.json"
        self.adopt()
        log.info("containment %s%s; jobs run %s", self.containment.kind,
                 f" ({self.containment.describe()})" if self.containment.describe() else "",
                 f"as {self.own.name} only (single-user agent)" if self.own else "as their submitters")

    # ------------------------------------------------------------ lifecycle

    def adopt(self) -> None:
        """Take back the ranks a previous agent on this host started and that still run."""
        try:
            saved = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            saved = []
        known = {f.name for f in fields(Process)} - {"popen", "group"}
        for entry in saved:
            entry = {key: value for key, value in entry.items() if key in known}
            entry.setdefault("monitor_pid", entry.get("pid"))  # an older agent's: its monitor led the group
            process = Process(**entry)
            process.group = self.containment.group(process.cgroup) if process.cgroup else None
            # One that ended while no agent watched is kept too, so the next heartbeat reports its exit:
            # otherwise the server would still count it running and assign it again, to run a second time.
            self.processes[process.key] = process
            if process.alive():
                log.info("adopted job %s rank %s (pid %s)", process.job, process.rank, process.pid)
            else:
                log.info("job %s rank %s ended while no agent watched (exit code %s); reporting it",
                         process.job, process.rank, "unknown" if process.exit_code is None else process.exit_code)
        self.containment.sweep(keep={p.cgroup for p in self.processes.values() if p.cgroup})

    def save_state(self) -> None:
        saved = [f.name for f in fields(Process) if f.name not in ("popen", "group")]
        rows = [{name: getattr(p, name) for name in saved} for p in self.processes.values()
                if not (p.ended and p.reported_exit)]
        temporary = self.state_file.with_suffix(".tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump(rows, handle)
        temporary.replace(self.state_file)

    def run_forever(self) -> None:
        backoff = 1.0
        next_beat = 0.0
        while not self.stopping:
            self.enforce_deadlines()
            if time.monotonic() >= next_beat:
                try:
                    self.heartbeat()
                    backoff = 1.0
                    next_beat = time.monotonic() + self.interval * random.uniform(0.9, 1.1)
                except Unreachable as error:
                    # Jitter, so that the hosts of a rack do not all come back in the same second.
                    wait = backoff * random.uniform(0.5, 1.0)
                    log.warning("%s; retrying in %.1f s (jobs keep running)", error, wait)
                    next_beat = time.monotonic() + wait
                    backoff = min(backoff * 2, 30.0)
                except ApiError as error:
                    log.error("server refused the heartbeat: %s", error)
                    next_beat = time.monotonic() + self.interval * random.uniform(0.9, 1.1)
                except Exception:  # keep serving the jobs this host runs, whatever went wrong
                    log.exception("heartbeat failed")
                    next_beat = time.monotonic() + self.interval
            time.sleep(POLL_SECONDS)
        self.probe.stop()
        self.save_state()

    # ------------------------------------------------------------ heartbeat

    def health(self) -> tuple[list[dict], list[dict]]:
        sample = self.probe.sample()
        if sample is None:  # no NVML on this host: the configured GPUs, taken as healthy
            return [{"index": index, "health": "ok"} for index in self.configured_gpus or []], []
        self.minors = sample.minors
        return sample.gpus, sample.events

    def agent_facts(self) -> dict:
        return {
            "mode": "single-user" if self.own else "root",
            "account": self.own.name if self.own else "",
            "uid": os.getuid(),
            "containment": self.containment.kind,
            "notes": self.containment.describe()[:300],
        }

    def heartbeat(self) -> dict:
        gpus, events = self.health()
        # Events wait here until a heartbeat carries them: a server that is away loses none of them.
        self.unsent_events = (self.unsent_events + events)[-MAX_UNSENT_EVENTS:]
        reports = [self.report(process) for process in self.processes.values()]
        sent = time.time()
        reply = self.client.post("agent/heartbeat/", {
            "host": self.host, "address": self.address, "gpus": gpus, "events": self.unsent_events,
            "processes": reports, "agent": self.agent_facts(),
        })
        self.unsent_events = []
        if reply.get("server_time"):
            midpoint = (sent + time.time()) / 2
            self.clock_offset = datetime.fromisoformat(reply["server_time"]).timestamp() - midpoint
        self.interval = float(reply.get("heartbeat_interval", self.interval))
        self.allow_root_jobs = bool(reply.get("allow_root_jobs", False))
        self.cluster = str(reply.get("cluster", ""))
        for refused in reply.get("refused", []):
            log.error("server refused part of the heartbeat: %s", refused)
        for process in list(self.processes.values()):
            if process.ended and process.reported_exit:
                del self.processes[process.key]
            elif process.ended:
                process.reported_exit = True  # the report above carried its exit
        for stop in reply["stops"]:
            self.stop(stop)
        for assignment in reply["assignments"]:
            if (assignment["job"], assignment["run"], assignment["rank"]) not in self.processes:
                self.launch(assignment)
        self.save_state()
        return reply

    def report(self, process: Process) -> dict:
        alive = process.alive()
        report = {
            "job": process.job, "run": process.run, "rank": process.rank, "pid": process.pid,
            "state": "running" if alive else "exited", "exit_code": None if alive else process.exit_code,
            "output_tail": read_tail(self.jobs_dir, self.log_parts(process), process.uid, limit=TAIL_BYTES),
        }
        if process.error:
            report["error"] = clean_output(process.error, limit=500)
        mtime = owned_mtime(self.jobs_dir, [f"job-{process.job}", "checkpoint"], process.uid)
        if mtime is not None:
            # A file time on this host's clock, told in the server's.
            report["checkpoint_at"] = datetime.fromtimestamp(mtime + self.clock_offset, tz=UTC).isoformat()
        return report

    @staticmethod
    def log_parts(process: Process) -> list[str]:
        return [f"job-{process.job}", f"run-{process.run}", f"rank-{process.rank}.log"]

    # ------------------------------------------------------------ processes

    def launch(self, assignment: dict) -> Process:
        job, run, rank = assignment["job"], assignment["run"], assignment["rank"]
        process = Process(job=job, run=run, rank=rank, pid=None, started_at=time.time(), host=self.host,
                          memory_mib=int(assignment.get("memory_mib") or 0))
        self.processes[process.key] = process
        try:
            self._start(process, assignment)
        except (Refused, ContainmentError) as error:
            process.error, process.ended = str(error), True
            log.warning("job %s rank %s not started: %s", job, rank, error)
        except OSError as error:
            process.error, process.ended = f"cannot start the job on {self.host}: {error.strerror or error}", True
            log.warning("job %s rank %s not started: %s", job, rank, process.error)
        return process

    def _start(self, process: Process, assignment: dict) -> None:
        job, run, rank = process.job, process.run, process.rank
        account = resolve_account(str(assignment.get("account") or ""), host=self.host, own=self.own,
                                  allow_root=self.allow_root_jobs, cluster=self.cluster)
        job_dir = prepare_job_dir(self.jobs_dir, job, account)
        run_dir = job_dir / f"run-{run}"
        env = job_environment(account=account, assignment=assignment, host=self.host,
                              cuda_devices=cuda_visible_devices(assignment, self.probe), job_dir=job_dir,
                              run_dir=run_dir)
        workdir = str(assignment.get("workdir") or "") or account.home
        process.uid = account.uid
        process.output = str(run_dir / f"rank-{rank}.log")
        process.checkpoint_file = env["ALLOT_CHECKPOINT_FILE"]
        process.exit_file = str(self.state_dir / f"job-{job}-run-{run}-rank-{rank}.exit")
        Path(process.exit_file).unlink(missing_ok=True)
        group = self.containment.group(f"job-{job}-run-{run}-rank-{rank}")
        if group is not None:
            group.create(memory_bytes=process.memory_mib * 1024 * 1024 if self.containment.limits_memory else 0,
                         denied_devices=self.denied_devices(assignment))
            process.group, process.cgroup = group, group.name
        spec = {
            "host": self.host, "user": account.name, "uid": account.uid, "gid": account.gid,
            "command": assignment["command"], "env": env, "workdir": workdir, "run_dir": str(run_dir),
            "log": process.output, "hostfile": env["ALLOT_HOSTFILE"],
            "hosts": assignment.get("hosts") or [assignment["master_addr"]],
            "exit_file": process.exit_file, "cgroup_procs": group.procs_files() if group is not None else [],
        }
        # The monitor's own environment is nearly empty: it never held the agent's, and the job gets `env`.
        monitor_env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PACKAGE_ROOT, "LANG": "C.UTF-8"}
        popen = subprocess.Popen(
            [sys.executable, "-m", "client.monitor"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            cwd="/", env=monitor_env, start_new_session=True, close_fds=True,
        )
        popen.stdin.write(json.dumps(spec).encode())
        popen.stdin.close()
        line = popen.stdout.readline()
        popen.stdout.close()
        process.popen, process.monitor_pid = popen, popen.pid
        process.pid = int(line) if line.strip().isdigit() else None
        log.info("started job %s run %s rank %s as %s on GPUs %s (pid %s)", job, run, rank, account.name,
                 assignment["gpus"], process.pid)

    def denied_devices(self, assignment: dict) -> list[tuple[int, int]]:
        """The /dev/nvidia<N> nodes of the host's other GPUs (where a devices controller can deny them)."""
        if not self.containment.filters_devices:
            return []
        minors = self.minors or {}
        own = {minors.get(index, index) for index in assignment.get("gpus") or []}
        return [numbers for minor, numbers in sorted(gpu_device_numbers(self.dev_dir).items()) if minor not in own]

    def stop(self, stop: dict) -> None:
        process = self.processes.get((stop["job"], stop["run"], stop["rank"]))
        if process is None or process.stop_deadline is not None or not process.alive():
            return
        log.info("stopping job %s rank %s (%s): SIGTERM, SIGKILL in %.0f s",
                 process.job, process.rank, stop["cause"], stop["grace"])
        process.signal(signal.SIGTERM)
        process.stop_deadline = time.monotonic() + float(stop["grace"])

    def enforce_deadlines(self) -> None:
        now = time.monotonic()
        for process in self.processes.values():
            if process.stop_deadline is not None and not process.killed and now >= process.stop_deadline:
                if process.alive():
                    log.info("job %s rank %s: grace over, SIGKILL", process.job, process.rank)
                    process.signal(signal.SIGKILL)
                process.killed = True
            process.alive()  # reap, and end what a finished command left behind


def read_token(args, parser) -> str:
    """The agent token: --token (shows in the process list: warned), ALLOT_AGENT_TOKEN (then removed from
    this process's environment), or the token file, which must be readable by its owner only."""
    if args.token:
        log.warning("--token shows the token in the process list; use --token-file or %s", TOKEN_VARIABLE)
        return args.token.strip()
    if os.environ.get(TOKEN_VARIABLE):
        return os.environ.pop(TOKEN_VARIABLE).strip()
    path = Path(args.token_file)
    try:
        status = path.stat()
    except OSError as error:
        parser.error(f"cannot read the token file {path}: {error.strerror} (give --token-file, or set "
                     f"{TOKEN_VARIABLE})")
    if status.st_mode & 0o077:
        parser.error(f"{path} is mode {stat.S_IMODE(status.st_mode):04o}: the token file must be readable by its "
                     f"owner only (chmod 600 {path})")
    if status.st_uid not in (0, os.getuid()):
        parser.error(f"{path} belongs to uid {status.st_uid}: the token file must be the agent's own or root's")
    token = path.read_text().strip()
    if not token:
        parser.error(f"{path} is empty")
    return token


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="allot-agent", description="Run Allot's jobs on this host.")
    parser.add_argument("--server", required=True, help="Allot's URL, e.g. https://allot.example.org")
    parser.add_argument("--token-file", default=DEFAULT_TOKEN_FILE,
                        help=f"this host's agent token (`manage.py agent_token HOST`), mode 0600; default "
                             f"{DEFAULT_TOKEN_FILE}; or set {TOKEN_VARIABLE}")
    parser.add_argument("--token", help="the token itself (it then shows in the process list: avoid)")
    parser.add_argument("--host", default=socket.gethostname().split(".")[0], help="this host's name in Allot")
    parser.add_argument("--gpus", help="GPU indices when NVML is absent, e.g. 0,1,2,3")
    default_workdir = "/var/lib/allot-agent" if os.geteuid() == 0 else str(Path.home() / ".allot-agent")
    parser.add_argument("--workdir", default=default_workdir,
                        help=f"state (root-only) and the jobs' private directories (default {default_workdir})")
    parser.add_argument("--address", help="address peers use to reach this host (default: its hostname)")
    parser.add_argument("--single-user", action="store_true",
                        help="run every job as this agent's own account, only its own jobs (a test rig; as root "
                             "the cluster must allow root jobs)")
    parser.add_argument("--cgroup-parent", default="allot",
                        help="the jobs' cgroups go under <hierarchy>/<this>/<host>/ (default allot)")
    parser.add_argument("--dev-dir", default="/dev", help="where the /dev/nvidia<N> nodes are (default /dev)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    token = read_token(args, parser)
    gpus = [int(index) for index in args.gpus.split(",") if index.strip()] if args.gpus else None
    agent = Agent(server=args.server, token=token, host=args.host, gpus=gpus,
                  workdir=Path(args.workdir) / args.host, address=args.address, single_user=args.single_user,
                  dev_dir=Path(args.dev_dir), cgroup_parent=args.cgroup_parent)

    def stop(signum, frame):
        agent.stopping = True  # jobs keep running; a restarted agent adopts them

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    agent.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

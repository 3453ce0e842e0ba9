"""`allot-agent`: runs on each host, runs the jobs Allot assigns to it.

Every heartbeat it reports the host's GPUs (through NVML when the machine has
it, else the configured list) with XID errors, and each job process it runs;
the reply says what to start and what to stop. A job runs as its own process
group with CUDA_VISIBLE_DEVICES and torchrun-style peer variables; a stop is
SIGTERM, the grace period, then SIGKILL. Output goes to a file per rank, whose
tail the server keeps.

The agent can be restarted without stopping its jobs: it keeps their pids in
`<workdir>/agent-state.json`, adopts them again at start and lets the server
decide whether they may go on. Each job's first process is a small monitor
(MONITOR below) that writes the command's exit status to a file, so an
adopted job's exit code is known although it is not the new agent's child.

Checkpoint times are file times on this host's clock; they are sent in the
server's clock (the offset measured at each heartbeat), so a host whose clock
is off does not move its jobs' checkpoints.
"""

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path

from client.api import ApiError, Client, Unreachable

log = logging.getLogger("allot-agent")
TAIL_BYTES = 8000
POLL_SECONDS = 0.2
# The job's first process (its process group leader): runs the command, outlives an agent restart and
# writes the command's exit status to a file. Signals to the group reach the command directly; the monitor
# only waits (a Python handler, unlike SIG_IGN, is not inherited by the command). SIGKILL ends both: no file.
MONITOR = """
import os, signal, subprocess, sys
exit_file, command = sys.argv[1], sys.argv[2]
for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signum, lambda *_: None)
code = subprocess.call(["/bin/sh", "-c", command])
code = code if code >= 0 else 128 - code
with open(exit_file + ".tmp", "w") as handle:
    handle.write(str(code))
os.replace(exit_file + ".tmp", exit_file)
sys.exit(code)
"""


@dataclass
class Process:
    job: int
    run: int
    rank: int
    pid: int
    output: str
    checkpoint_file: str
    started_at: float
    exit_code: int | None = None  # None after it ended: unknown (killed with its monitor)
    ended: bool = False
    stop_deadline: float | None = None  # monotonic time at which SIGKILL falls
    killed: bool = False
    reported_exit: bool = False
    exit_file: str = ""  # written by MONITOR when the command ends
    popen: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.job, self.run, self.rank)

    def alive(self) -> bool:
        if self.ended:
            return False
        if self.popen is not None:
            code = self.popen.poll()
            if code is None:
                return True
            self.exit_code = code if code >= 0 else 128 - code  # killed by signal N → 128 + N
        else:
            # Adopted after a restart: not our child, so its monitor's file tells how it ended.
            code = read_exit_file(self.exit_file)
            if code is None and pid_running(self.pid):
                return True
            self.exit_code = code
        self.ended = True
        return False

    def signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


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


def read_exit_file(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip()) if path else None
    except (OSError, ValueError):
        return None


def detect_gpus(configured: list[int] | None) -> tuple[list[dict], list[dict]]:
    """GPUs and XID events: from NVML when present, else the configured list (all healthy)."""
    try:
        import pynvml  # noqa: PLC0415 - optional, only on GPU machines

        pynvml.nvmlInit()
        gpus, events = [], []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            health = "ok"
            try:
                pynvml.nvmlDeviceGetUUID(handle)
            except pynvml.NVMLError:
                health = "failed"
            gpus.append({"index": index, "health": health})
        return gpus, events
    except Exception:  # no NVML on this machine
        if configured is None:
            return [], []
        return [{"index": index, "health": "ok"} for index in configured], []


def cuda_visible_devices(assignment: dict) -> str:
    """CUDA_VISIBLE_DEVICES for an assignment.

    Whole GPUs and fractions: the GPU indices ("0,1"). A MIG job: its
    instances ("mig" in the assignment). With NVML on the host each is the
    instance's real UUID, ``MIG-<uuid>`` (found by GPU index and start slot,
    `mig_uuid`); without NVML, or when NVML does not show that instance, the
    stable id the server sends, ``MIG-<host>-<gpu index>-<start slot>``:
    what tests and hosts without GPUs see, which CUDA itself would not know.
    """
    instances = assignment.get("mig") or []
    if not instances:
        return ",".join(str(index) for index in assignment["gpus"])
    return ",".join(mig_uuid(instance["gpu"], instance["start"]) or instance["id"] for instance in instances)


def mig_uuid(gpu_index: int, start: int) -> str | None:
    """The UUID (``MIG-…``) of the MIG instance starting at memory slice `start` of GPU `gpu_index`, via NVML."""
    try:
        import pynvml  # noqa: PLC0415 - optional, only on GPU machines

        pynvml.nvmlInit()
        device = pynvml.nvmlDeviceGetHandleByIndex(gpu_index)
        for position in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(device)):
            try:
                mig_device = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, position)
            except pynvml.NVMLError:
                continue
            instance = pynvml.nvmlDeviceGetGpuInstanceById(device, pynvml.nvmlDeviceGetGpuInstanceId(mig_device))
            if pynvml.nvmlGpuInstanceGetInfo(instance).placement.start == start:
                uuid = pynvml.nvmlDeviceGetUUID(mig_device)
                uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
                return uuid if uuid.startswith("MIG-") else f"MIG-{uuid}"
    except Exception:  # no NVML, no MIG, or an older driver: the stable id
        return None
    return None


class Agent:
    def __init__(self, *, server: str, token: str, host: str, gpus: list[int] | None, workdir: Path,
                 address: str | None = None):
        self.client = Client(server, token=token, scheme="Agent")
        self.host = host
        self.configured_gpus = gpus
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.address = address or socket.gethostname()
        self.processes: dict[tuple[int, int, int], Process] = {}
        self.interval = 5.0
        self.clock_offset = 0.0  # server clock − this host's clock, seconds (from the last heartbeat)
        self.stopping = False
        self.state_file = workdir / "agent-state.json"
        self.adopt()

    # ------------------------------------------------------------ lifecycle

    def adopt(self) -> None:
        """Take back the processes a previous agent on this host started and that still run."""
        try:
            saved = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return
        for entry in saved:
            process = Process(**entry)
            # One that ended while no agent watched is kept too, so the next heartbeat reports its exit:
            # otherwise the server would still count it running and assign it again, to run a second time.
            self.processes[process.key] = process
            if process.alive():
                log.info("adopted job %s rank %s (pid %s)", process.job, process.rank, process.pid)
            else:
                log.info("job %s rank %s ended while no agent watched (exit code %s); reporting it",
                         process.job, process.rank, "unknown" if process.exit_code is None else process.exit_code)

    def save_state(self) -> None:
        saved = [f.name for f in fields(Process) if f.name != "popen"]
        rows = [{name: getattr(p, name) for name in saved} for p in self.processes.values() if not p.ended]
        temporary = self.state_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(rows))
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
                    next_beat = time.monotonic() + self.interval
                except Unreachable as error:
                    log.warning("%s; retrying in %.0f s (jobs keep running)", error, backoff)
                    next_beat = time.monotonic() + backoff
                    backoff = min(backoff * 2, 30.0)
                except ApiError as error:
                    log.error("server refused the heartbeat: %s", error)
                    next_beat = time.monotonic() + self.interval
                except Exception:  # keep serving the jobs this host runs, whatever went wrong
                    log.exception("heartbeat failed")
                    next_beat = time.monotonic() + self.interval
            time.sleep(POLL_SECONDS)
        self.save_state()

    # ------------------------------------------------------------ heartbeat

    def heartbeat(self) -> dict:
        gpus, events = detect_gpus(self.configured_gpus)
        reports = [self.report(process) for process in self.processes.values()]
        sent = time.time()
        reply = self.client.post("agent/heartbeat/", {
            "host": self.host, "address": self.address, "gpus": gpus, "events": events, "processes": reports,
        })
        if reply.get("server_time"):
            midpoint = (sent + time.time()) / 2
            self.clock_offset = datetime.fromisoformat(reply["server_time"]).timestamp() - midpoint
        self.interval = float(reply.get("heartbeat_interval", self.interval))
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
            "output_tail": tail(process.output),
        }
        try:
            mtime = os.stat(process.checkpoint_file).st_mtime
            # A file time on this host's clock, told in the server's.
            report["checkpoint_at"] = datetime.fromtimestamp(mtime + self.clock_offset, tz=UTC).isoformat()
        except OSError:
            pass
        return report

    # ------------------------------------------------------------ processes

    def launch(self, assignment: dict) -> Process:
        job, run, rank = assignment["job"], assignment["run"], assignment["rank"]
        directory = self.workdir / f"job-{job}" / f"run-{run}"
        directory.mkdir(parents=True, exist_ok=True)
        output = directory / f"rank-{rank}.log"
        exit_file = directory / f"rank-{rank}.exit"
        exit_file.unlink(missing_ok=True)
        checkpoint = self.workdir / f"job-{job}" / "checkpoint"
        env = {
            **os.environ,
            "CUDA_VISIBLE_DEVICES": cuda_visible_devices(assignment),
            "ALLOT_JOB_ID": str(job),
            "ALLOT_RANK": str(rank),
            "ALLOT_WORLD_SIZE": str(assignment["world_size"]),
            "ALLOT_RESTARTS": str(assignment["restarts"]),
            "ALLOT_GPU_MILLI": str(assignment.get("gpu_milli", 1000)),
            "ALLOT_CHECKPOINT_FILE": str(checkpoint),
            "MASTER_ADDR": assignment["master_addr"],
            "MASTER_PORT": str(assignment["master_port"]),
            # torchrun-style names for the same facts (one node per host)
            "NODE_RANK": str(rank),
            "NNODES": str(assignment["world_size"]),
        }
        with open(output, "ab") as handle:
            popen = subprocess.Popen(
                [sys.executable, "-c", MONITOR, str(exit_file), assignment["command"]], cwd=directory, env=env,
                stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )
        process = Process(job=job, run=run, rank=rank, pid=popen.pid, output=str(output),
                          checkpoint_file=str(checkpoint), started_at=time.time(), exit_file=str(exit_file),
                          popen=popen)
        self.processes[process.key] = process
        log.info("started job %s run %s rank %s on GPUs %s (pid %s)", job, run, rank, assignment["gpus"], popen.pid)
        return process

    def stop(self, stop: dict) -> None:
        process = self.processes.get((stop["job"], stop["run"], stop["rank"]))
        if process is None or process.stop_deadline is not None or not process.alive():
            return
        log.info("stopping job %s rank %s (%s): SIGTERM, SIGKILL in %.0f s",
                 process.job, process.rank, stop["cause"], stop["grace"])
        process.signal_group(signal.SIGTERM)
        process.stop_deadline = time.monotonic() + float(stop["grace"])

    def enforce_deadlines(self) -> None:
        now = time.monotonic()
        for process in self.processes.values():
            if process.stop_deadline is not None and not process.killed and now >= process.stop_deadline:
                if process.alive():
                    log.info("job %s rank %s: grace over, SIGKILL", process.job, process.rank)
                    process.signal_group(signal.SIGKILL)
                process.killed = True
            if process.popen is not None:
                process.alive()  # reap


def tail(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - TAIL_BYTES))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="allot-agent", description="Run Allot's jobs on this host.")
    parser.add_argument("--server", required=True, help="Allot's URL, e.g. https://allot.example.org")
    parser.add_argument("--token", default=os.environ.get("ALLOT_AGENT_TOKEN"),
                        help="this host's agent token (`manage.py agent_token HOST`); or ALLOT_AGENT_TOKEN")
    parser.add_argument("--host", default=socket.gethostname().split(".")[0], help="this host's name in Allot")
    parser.add_argument("--gpus", help="GPU indices when NVML is absent, e.g. 0,1,2,3")
    parser.add_argument("--workdir", default=str(Path.home() / ".allot-agent"), help="job directories and logs")
    parser.add_argument("--address", help="address peers use to reach this host (default: its hostname)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not args.token:
        parser.error("--token (or ALLOT_AGENT_TOKEN) is required")
    gpus = [int(index) for index in args.gpus.split(",") if index.strip()] if args.gpus else None
    agent = Agent(server=args.server, token=args.token, host=args.host, gpus=gpus,
                  workdir=Path(args.workdir) / args.host, address=args.address)

    def stop(signum, frame):
        agent.stopping = True  # jobs keep running; a restarted agent adopts them

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    agent.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

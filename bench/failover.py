"""Scheduler failover: kill the leader with SIGKILL, time until another scheduler ticks, and check
that two schedulers never ticked at once.

    .venv/bin/python bench/failover.py [--mode scheduler|celery] [--rounds 5] [--interval 5] [--json]

`--mode scheduler` (default) runs two `manage.py run_scheduler --interval I`
processes, a leader and a standby; `--mode celery` runs Celery beat (a tick
every I s) and two workers, as in production. Both on a fresh PostgreSQL
database (`allot_failover` on 127.0.0.1:5432) with a Redis of their own when
`redis-server` is installed (the shared one is not touched), over the demo
cluster (simulated executor) with a queue of jobs, so every tick has work.

Each round kills the scheduler that ticked last at a random moment, measures
the time from the kill to the first tick by another process (`Tick.started_at`
and `Tick.leader`), then starts the killed one again as the new standby. At
the end it checks every pair of ticks from different processes: no tick began
before another process's tick had ended ([started_at, started_at + duration]).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
PG_ADMIN = os.environ.get("ALLOT_FAILOVER_PG", "postgres://postgres@127.0.0.1:5432")
DATABASE = "allot_failover"
QUEUE = r"""
import random
from django.contrib.auth import get_user_model
from budgets.loaders import load_org_file
from scheduler.services import JobRequest, job_submit
from topology.loaders import load_cluster_file
load_cluster_file("demo/cluster.yaml")
load_org_file("demo/org.yaml")
rng = random.Random(5)
members = [("alice", "olmo"), ("bob", "safety"), ("carol", "tulu"), ("dan", "molmo"), ("erin", "pixmo")]
users = {u.username: u for u in get_user_model().objects.all()}
for number in range(600):
    user, project = rng.choice(members)
    job_submit(user=users[user], request=JobRequest(
        cluster="gb200-east", project=project, gpus=rng.choice([1, 2, 4, 8, 8, 16]),
        min_runtime=rng.choice([0, 900, 3600]), resumable=True, simulated_duration=rng.randrange(1800, 7200, 60),
        command="python train.py"))
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def connect(database: str = "postgres"):
    import psycopg

    return psycopg.connect(f"{PG_ADMIN}/{database}", autocommit=True, connect_timeout=5)


class Redis:
    """A redis-server of our own (free port, nothing on disk), or none when it is not installed."""

    def __init__(self, workdir: Path):
        self.process = None
        self.url = None
        binary = shutil.which("redis-server")
        if binary:
            port = free_port()
            self.process = subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.url = f"redis://127.0.0.1:{port}/0"
            time.sleep(0.3)

    def stop(self):
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)


class Fleet:
    """The scheduler processes: each one started again when killed, so there is always a standby."""

    def __init__(self, mode: str, env: dict, interval: float, workdir: Path):
        self.mode, self.env, self.interval, self.workdir = mode, env, interval, workdir
        self.processes: dict[str, subprocess.Popen] = {}
        self.ready_before: dict[str, int] = {}
        self.beat = None

    def command(self, name: str) -> list[str]:
        if self.mode == "scheduler":
            return [PYTHON, str(REPO / "manage.py"), "run_scheduler", "--interval", str(self.interval)]
        return [str(Path(PYTHON).with_name("celery")), "-A", "config", "worker", "--pool", "solo", "--concurrency",
                "1", "--prefetch-multiplier", "1", "--without-heartbeat", "--without-gossip", "--without-mingle",
                "--loglevel", "INFO", "-n", f"{name}@%h"]

    def readiness(self, name: str) -> int:
        """How many times `name` has said it is ready: a scheduler that it stands by, a worker "ready."."""
        path = self.workdir / (f"{name}.out" if self.mode == "scheduler" else f"{name}.err")
        text = path.read_text(errors="replace") if path.exists() else ""
        return text.count("scheduler: standby") if self.mode == "scheduler" else text.count(" ready.")

    def start(self, name: str) -> subprocess.Popen:
        self.ready_before[name] = self.readiness(name)
        process = subprocess.Popen(self.command(name), env=self.env, cwd=REPO, stdout=open(
            self.workdir / f"{name}.out", "ab"), stderr=open(self.workdir / f"{name}.err", "ab"))
        self.processes[name] = process
        return process

    def start_beat(self):
        if self.mode == "celery":
            self.beat = subprocess.Popen(
                [str(Path(PYTHON).with_name("celery")), "-A", "config", "beat", "--loglevel", "WARNING",
                 "--schedule", str(self.workdir / "beat-schedule")],
                env=self.env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(self.workdir / "beat.err", "ab"))

    def wait_ready(self, name: str):
        """Until the process started last under `name` is up: a standby that found the lock taken, or a
        worker connected to the broker (it takes the next beat it is given)."""
        wait_for(lambda: self.readiness(name) > self.ready_before[name] or self.processes[name].poll() is not None,
                 f"{name} is ready")
        if self.processes[name].poll() is not None:
            sys.exit(f"{name} exited at start: see {self.workdir}")

    def name_of(self, pid: int) -> str | None:
        return next((name for name, process in self.processes.items() if process.pid == pid), None)

    def stop(self):
        for process in [*self.processes.values(), self.beat]:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in [*self.processes.values(), self.beat]:
            if process is not None:
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()


def ticks(conn, since: datetime | None = None) -> list[tuple[str, datetime, float]]:
    rows = conn.execute(
        "SELECT leader, started_at, duration FROM scheduler_tick WHERE started_at > %s ORDER BY started_at, id",
        [since or datetime(2000, 1, 1, tzinfo=UTC)],
    ).fetchall()
    return [(leader, started_at, duration) for leader, started_at, duration in rows]


def pid_of(leader: str) -> int:
    return int(leader.split(" ", 1)[0].rsplit(":", 1)[1])


def wait_for(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    sys.exit(f"timed out waiting until {what}")


def overlaps(all_ticks) -> list[tuple]:
    """Ticks that began while a tick of another process had not ended."""
    found = []
    ends: dict[int, tuple[datetime, tuple]] = {}  # pid → (end of its latest tick, that tick)
    for tick in all_ticks:
        leader, started_at, duration = tick
        pid = pid_of(leader)
        for other, (end, other_tick) in ends.items():
            if other != pid and end > started_at:
                found.append((other_tick, tick))
        end = started_at + timedelta(seconds=duration)
        if pid not in ends or ends[pid][0] < end:
            ends[pid] = (end, tick)
    return found


def run(args) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="allot-failover-"))
    try:
        with connect() as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {DATABASE}")
    except Exception as error:  # noqa: BLE001
        sys.exit(f"failover needs PostgreSQL at {PG_ADMIN} ({error})")
    redis = Redis(workdir)
    env = {key: value for key, value in os.environ.items() if key not in ("REDIS_URL", "DEBUG")}
    env.update(DATABASE_URL=f"{PG_ADMIN}/{DATABASE}", SECRET_KEY="allot-failover-bench", PYTHONUNBUFFERED="1",
               LOG_LEVEL="WARNING", ALLOT_SIMULATION_SPEED="600", ALLOT_TICK_SECONDS=str(max(1, round(args.interval))))
    if redis.url:
        env["REDIS_URL"] = redis.url
    for step in (["migrate", "--no-input", "-v", "0"], ["shell", "-c", QUEUE]):
        done = subprocess.run([PYTHON, str(REPO / "manage.py"), *step], env=env, cwd=REPO, capture_output=True,
                              text=True)
        if done.returncode:
            sys.exit(f"manage.py {step[0]} failed:\n{done.stderr}")
    rng = random.Random(args.seed)
    fleet = Fleet(args.mode, env, args.interval, workdir)
    rounds = []
    conn = connect(DATABASE)
    try:
        fleet.start("a")
        fleet.start_beat()
        wait_for(lambda: ticks(conn), "the first tick")
        fleet.start("b")
        fleet.wait_ready("b")
        for number in range(args.rounds):
            time.sleep(rng.uniform(0.5, 0.5 + args.interval))  # the kill falls anywhere in a tick cycle
            last = ticks(conn)[-1]
            victim = fleet.name_of(pid_of(last[0]))
            if victim is None:
                sys.exit(f"the last tick came from an unknown process: {last[0]}")
            fleet.processes[victim].send_signal(signal.SIGKILL)
            killed_at = datetime.now(UTC)
            fleet.processes[victim].wait()
            victim_pid = pid_of(last[0])
            first = wait_for(lambda since=killed_at, gone=victim_pid: next(
                (t for t in ticks(conn, since) if pid_of(t[0]) != gone), None),
                             f"another scheduler ticks after kill {number + 1}", timeout=120)
            rounds.append({"round": number + 1, "killed": victim, "took_over": fleet.name_of(pid_of(first[0])),
                           "seconds": round((first[1] - killed_at).total_seconds(), 3), "status": first[0]})
            print(f"round {number + 1}: killed {victim}; {rounds[-1]['took_over']} ticked "
                  f"{rounds[-1]['seconds']:.3f} s later ({first[0]})", file=sys.stderr)
            fleet.start(victim)  # back as a standby, ready before the next kill
            fleet.wait_ready(victim)
        all_ticks = ticks(conn)
    finally:
        fleet.stop()
        conn.close()
        redis.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    seconds = [r["seconds"] for r in rounds]
    doubles = overlaps(all_ticks)
    return {
        "mode": args.mode, "interval_seconds": args.interval, "database": f"PostgreSQL ({PG_ADMIN}/{DATABASE})",
        "redis": "a private redis-server" if redis.url else "none (redis-server not installed)",
        "rounds": rounds, "failover_seconds": {
            "min": min(seconds), "median": round(statistics.median(seconds), 3), "max": max(seconds)},
        "ticks": len(all_ticks), "processes_that_ticked": len({pid_of(t[0]) for t in all_ticks}),
        "overlapping_ticks": [[str(a), str(b)] for a, b in doubles],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["scheduler", "celery"], default="scheduler")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--interval", type=float, default=5.0,
                        help="seconds between ticks (run_scheduler --interval; Celery beat's period, whole seconds)")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        figures = result["failover_seconds"]
        print(f"failover ({result['mode']}, a tick every {result['interval_seconds']:g} s, {result['database']}, "
              f"Redis: {result['redis']}):")
        print(f"  {len(result['rounds'])} leaders killed with SIGKILL; another scheduler ticked after "
              f"{figures['min']:.2f} s (min), {figures['median']:.2f} s (median), {figures['max']:.2f} s (max)")
        print(f"  {result['ticks']} ticks by {result['processes_that_ticked']} processes; overlapping ticks of two "
              f"processes: {len(result['overlapping_ticks'])}")
    return 1 if result["overlapping_ticks"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""Load on the web tier as a cluster of 2,000 hosts puts it: gunicorn, a live scheduler, and three kinds of client.

    .venv/bin/python bench/load.py [--quick] [--duration 60] [--hosts 2000] [--beat-every 10] [--researchers 8]
                                   [--submit-rate 2] [--web-workers 4] [--database auto|postgres|sqlite] [--json]

It prepares a fresh database (PostgreSQL `allot_load` when a server answers on
127.0.0.1:5432, else SQLite under var/; the report says which), migrates it,
loads a generated cluster of `--hosts` hosts (NVL72 racks of 18 trays × 4 GPUs,
the rest 8-GPU HGX servers) under the demo org, and makes an agent token for
every host, all hosts up as in a cluster in service. Then it starts gunicorn
and `manage.py run_scheduler` and, for `--duration` seconds:

- **agents**: every host heartbeats every `--beat-every` s (spread evenly),
  reporting the processes it was assigned as running and, after 20-90 s, as
  exited; stops are obeyed at once;
- **researchers**: logged-in browser sessions poll, a second between calls,
  in turn the queue page (`/clusters/<name>/queue/`) and, with their API
  token, `GET /api/v1/jobs/?state=pending`, `GET /api/v1/jobs/?mine=1` and
  `GET /api/v1/jobs/<id>/` of a job submitted lately;
- **submissions**: `POST /api/v1/jobs/` at `--submit-rate` per second.

It reports, per kind of request, throughput, p50/p99 latency and errors, the
heartbeats that fell behind their schedule, and what the scheduler did.
Everything runs on this machine (loopback only); the load generator shares
its cores with the server, so the figures are a floor for a real deployment.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict, deque
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
CLUSTER = "gb200-east"  # the demo org's shares name this cluster
PG_ADMIN = os.environ.get("ALLOT_LOAD_PG", "postgres://postgres@127.0.0.1:5432")
MEMBERS = {"alice": ["olmo"], "bob": ["olmo", "safety"], "carol": ["tulu"], "dan": ["molmo", "pixmo"],
           "erin": ["safety", "pixmo"]}
PREPARE = r"""
import json, secrets, sys, yaml
from django.contrib.auth import get_user_model
from django.utils import timezone
from accounts.services import token_create
from budgets.loaders import load_org_file
from topology.loaders import load_cluster_file
from topology.models import AgentToken, Host, hash_agent_key
spec_path, org_path, out_path = sys.argv[1:4]
load_cluster_file(spec_path)
load_org_file(org_path)
users = {}
for user in get_user_model().objects.filter(username__in=%(members)r):
    users[user.username] = token_create(user=user, name="load bench")[1]
hosts = list(Host.objects.order_by("name"))
# One token per host, issued in bulk (AgentToken.issue one at a time would cost minutes); only hashes are kept.
keys = {h.name: secrets.token_hex(32) for h in hosts}
AgentToken.objects.live().filter(host__in=hosts).update(revoked_at=timezone.now(), revoked_by="bench/load.py")
AgentToken.objects.bulk_create([AgentToken(host=h, key_hash=hash_agent_key(keys[h.name]), prefix=keys[h.name][:8],
                                           created_by="bench/load.py") for h in hosts])
# A cluster in service: every agent registered long ago (a first heartbeat, which brings a host up, is a
# one-time cost the steady load does not have).
Host.objects.update(state="up", state_reason="", last_heartbeat_at=timezone.now())
agents = keys
gpus = {h.name: h.gpu_count for h in hosts}
json.dump({"users": users, "agents": agents, "gpus": gpus}, open(out_path, "w"))
"""


# ---------------------------------------------------------------- set-up


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cluster_spec(hosts: int) -> dict:
    racks, servers = divmod(hosts, 18)
    racks = max(0, min(racks, hosts * 9 // 10 // 18))  # about 90 % of the hosts in NVL72 racks
    servers = hosts - racks * 18
    domains = []
    if racks:
        domains.append({"name": "nvl72-{:03d}", "count": racks, "hosts": 18, "gpus_per_host": 4,
                        "gpu_type": "GB200", "cpus_per_host": 144, "memory_gib_per_host": 900})
    if servers:
        domains.append({"name": "hgx-{:03d}", "count": servers, "hosts": 1, "gpus_per_host": 8,
                        "gpu_type": "H100", "cpus_per_host": 224, "memory_gib_per_host": 2048})
    return {
        "name": CLUSTER,
        "policy": {"tick": "5s", "window": "7d", "max_min_runtime": "8h", "grace_period": "30s",
                   "unallocated_grace": "10s", "heartbeat_timeout": "90s", "executor": "agent"},
        "domains": domains,
    }


def postgres_reachable() -> bool:
    try:
        import psycopg

        with psycopg.connect(f"{PG_ADMIN}/postgres", connect_timeout=3):
            return True
    except Exception:  # noqa: BLE001 - any failure means: not reachable, use SQLite
        return False


def fresh_database(kind: str) -> tuple[str, str]:
    """(DATABASE_URL, a description) of an empty database of the kind asked for."""
    if kind in ("auto", "postgres") and postgres_reachable():
        import psycopg

        with psycopg.connect(f"{PG_ADMIN}/postgres", autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS allot_load WITH (FORCE)")
            admin.execute("CREATE DATABASE allot_load")
        return f"{PG_ADMIN}/allot_load", f"PostgreSQL ({PG_ADMIN}/allot_load)"
    if kind == "postgres":
        sys.exit(f"PostgreSQL is not reachable at {PG_ADMIN}")
    path = REPO / "var" / "load-bench.sqlite3"
    path.parent.mkdir(exist_ok=True)
    for stale in path.parent.glob(path.name + "*"):
        stale.unlink()
    return f"sqlite:///{path}", f"SQLite ({path}; PostgreSQL was not reachable)" if kind == "auto" else "SQLite"


def child_env(database: str) -> dict:
    env = {key: value for key, value in os.environ.items() if key not in ("REDIS_URL", "DEBUG")}
    env.update(DATABASE_URL=database, SECRET_KEY="allot-load-bench", PYTHONUNBUFFERED="1", LOG_LEVEL="WARNING",
               ALLOWED_HOSTS="127.0.0.1,localhost",
               # The bench measures capacity: every simulated user comes from 127.0.0.1, so no throttle.
               ALLOT_THROTTLE_USER="1000000/min", ALLOT_THROTTLE_IP="1000000/min")
    return env


def manage(env: dict, *args: str) -> str:
    done = subprocess.run([PYTHON, str(REPO / "manage.py"), *args], env=env, cwd=REPO, capture_output=True,
                          text=True)
    if done.returncode != 0:
        sys.exit(f"manage.py {args[0]} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def prepare(env: dict, hosts: int, workdir: Path) -> dict:
    import yaml

    (workdir / "cluster.yaml").write_text(yaml.safe_dump(cluster_spec(hosts)))
    manage(env, "migrate", "--no-input", "-v", "0")
    script = PREPARE.replace("%(members)r", repr(sorted(MEMBERS)))
    (workdir / "prepare.py").write_text(script)
    arguments = [str(workdir / "cluster.yaml"), str(REPO / "demo" / "org.yaml"), str(workdir / "ids.json")]
    runner = (f"import sys, runpy; sys.argv = [sys.argv[0]] + {arguments!r}; "
              f"runpy.run_path({str(workdir / 'prepare.py')!r}, run_name='__main__')")
    manage(env, "shell", "-c", runner)
    return json.loads((workdir / "ids.json").read_text())


# ---------------------------------------------------------------- measuring


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def record(self, kind: str, seconds: float, error: str | None = None) -> None:
        with self.lock:
            self.latencies[kind].append(seconds)
            if error:
                self.errors[kind][error] += 1


def timed(stats: Stats, kind: str, session: requests.Session, method: str, url: str, expect: int, **kwargs):
    began = time.perf_counter()
    try:
        response = session.request(method, url, timeout=30, allow_redirects=False, **kwargs)
    except requests.RequestException as error:
        stats.record(kind, time.perf_counter() - began, error.__class__.__name__)
        return None
    elapsed = time.perf_counter() - began
    stats.record(kind, elapsed, None if response.status_code == expect else f"HTTP {response.status_code}")
    return response if response.status_code == expect else None


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


# ---------------------------------------------------------------- the three kinds of client


class Agents:
    """Every host's agent: a heap of due heartbeats served by a pool of threads."""

    def __init__(self, base: str, tokens: dict[str, str], gpus: dict[str, int], every: float, stats: Stats,
                 threads: int, seed: int):
        self.base, self.tokens, self.gpus, self.every, self.stats = base, tokens, gpus, every, stats
        self.random = random.Random(seed)
        now = time.monotonic()
        hosts = sorted(tokens)
        self.due = [(now + every * i / len(hosts), host) for i, host in enumerate(hosts)]
        heapq.heapify(self.due)
        self.lock = threading.Lock()
        self.processes: dict[str, dict[tuple, float]] = defaultdict(dict)  # host → (job, run, rank) → exits at
        self.late: list[float] = []
        self.started = self.exited = 0
        self.threads = [threading.Thread(target=self.work, daemon=True) for _ in range(threads)]
        self.stopping = threading.Event()

    def start(self):
        for thread in self.threads:
            thread.start()

    def work(self):
        session = requests.Session()
        while not self.stopping.is_set():
            with self.lock:
                when, host = heapq.heappop(self.due)
            wait = when - time.monotonic()
            if wait > 0:
                if self.stopping.wait(wait):
                    return
            else:
                with self.lock:
                    self.late.append(-wait)
            self.beat(session, host)
            with self.lock:
                # A real agent beats `every` seconds after its last heartbeat ended.
                heapq.heappush(self.due, (time.monotonic() + self.every, host))

    def beat(self, session: requests.Session, host: str):
        now = time.time()
        with self.lock:
            running = dict(self.processes[host])
        reports = [
            {"job": job, "run": run, "rank": rank, "pid": 10000 + job % 50000,
             **({"state": "exited", "exit_code": 0} if now >= exits_at else {"state": "running"}),
             "output_tail": f"step {int(now) % 1000}\n"}
            for (job, run, rank), exits_at in running.items()
        ]
        body = {"host": host, "address": "127.0.0.1", "processes": reports,
                "gpus": [{"index": i, "health": "ok"} for i in range(self.gpus[host])]}
        reply = timed(self.stats, "agent heartbeat", session, "POST", f"{self.base}/api/v1/agent/heartbeat/", 200,
                      json=body, headers={"Authorization": f"Agent {self.tokens[host]}"})
        if reply is None:
            return
        answer = reply.json()
        with self.lock:
            mine = self.processes[host]
            for report in reports:
                if report["state"] == "exited":
                    mine.pop((report["job"], report["run"], report["rank"]), None)
                    self.exited += 1
            for stop in answer["stops"]:
                if mine.pop((stop["job"], stop["run"], stop["rank"]), None) is not None:
                    self.exited += 1
            for assignment in answer["assignments"]:
                key = (assignment["job"], assignment["run"], assignment["rank"])
                if key not in mine:
                    mine[key] = now + self.random.uniform(20, 90)
                    self.started += 1


class Researchers:
    """Logged-in people polling, one call a second each, in turn: the queue page, the pending jobs, their own
    jobs, and the detail of a job submitted lately. They log in before the measured load begins: a login
    hashes a password (PBKDF2, on purpose slow: about half a second of CPU), once per session, not per poll."""

    def __init__(self, base: str, users: dict[str, str], count: int, stats: Stats, recent: deque):
        self.base, self.users, self.stats, self.recent = base, users, stats, recent
        names = sorted(users)
        self.people = [names[i % len(names)] for i in range(count)]
        self.browsers: list[requests.Session] = []
        self.threads = [threading.Thread(target=self.work, args=(i,), daemon=True) for i in range(count)]
        self.stopping = threading.Event()

    def log_in(self) -> None:
        for username in self.people:
            browser = requests.Session()
            page = timed(self.stats, "login (before the load)", browser, "GET", f"{self.base}/login/", 200)
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text if page else "")
            timed(self.stats, "login (before the load)", browser, "POST", f"{self.base}/login/", 302, data={
                "username": username, "password": "allot-demo",
                "csrfmiddlewaretoken": token.group(1) if token else "",
            })
            self.browsers.append(browser)

    def start(self):
        for thread in self.threads:
            thread.start()

    def work(self, number: int):
        username, browser = self.people[number], self.browsers[number]
        api = requests.Session()
        api.headers["Authorization"] = f"Token {self.users[username]}"
        turn = number  # not all on the same page at the same moment
        while not self.stopping.is_set():
            if turn % 4 == 0:
                timed(self.stats, "queue page", browser, "GET", f"{self.base}/clusters/{CLUSTER}/queue/", 200)
            elif turn % 4 == 1:
                timed(self.stats, "GET jobs?state=pending", api, "GET", f"{self.base}/api/v1/jobs/?state=pending",
                      200)
            elif turn % 4 == 2:
                timed(self.stats, "GET jobs?mine=1", api, "GET", f"{self.base}/api/v1/jobs/?mine=1&limit=50", 200)
            elif self.recent:
                job = random.choice(self.recent)
                timed(self.stats, "GET jobs/<id>", api, "GET", f"{self.base}/api/v1/jobs/{job}/", 200)
            turn += 1
            self.stopping.wait(1.0)


class Submitters:
    """Submissions at a steady rate (open loop: a slow answer does not slow the next submission down),
    from the demo's members to their projects."""

    SHAPES = [(1, 900), (2, 1800), (4, 3600), (8, 3600), (8, 0), (16, 7200), (4, 0)]

    def __init__(self, base: str, users: dict[str, str], rate: float, stats: Stats, seed: int, recent: deque,
                 threads: int = 8):
        self.base, self.users, self.rate, self.stats, self.recent = base, users, rate, stats, recent
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.next_at = time.monotonic()
        self.threads = [threading.Thread(target=self.work, daemon=True) for _ in range(threads)]
        self.stopping = threading.Event()
        self.accepted = 0

    def start(self):
        for thread in self.threads:
            thread.start()

    def work(self):
        session = requests.Session()
        while not self.stopping.is_set() and self.rate > 0:
            with self.lock:
                at, self.next_at = self.next_at, self.next_at + 1.0 / self.rate
                username = self.random.choice(sorted(MEMBERS))
                gpus, min_runtime = self.random.choice(self.SHAPES)
                project = self.random.choice(MEMBERS[username])
            if self.stopping.wait(max(0.0, at - time.monotonic())):
                return
            reply = timed(self.stats, "POST jobs", session, "POST", f"{self.base}/api/v1/jobs/", 201, json={
                "cluster": CLUSTER, "project": project, "gpus": gpus, "min_runtime": min_runtime,
                "resumable": True, "command": "python train.py",
            }, headers={"Authorization": f"Token {self.users[username]}"})
            with self.lock:
                self.accepted += reply is not None
                if reply is not None:
                    self.recent.append(reply.json()["id"])


# ---------------------------------------------------------------- the run


def wait_until_serving(base: str, web: subprocess.Popen, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if web.poll() is not None:
            sys.exit("gunicorn exited at start")
        try:
            if requests.get(f"{base}/login/", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    sys.exit("gunicorn did not answer")


TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids) -> dict[int, float]:
    """User + system CPU seconds each live process has used (Linux /proc), by pid."""
    found = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            found[pid] = (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND
        except (OSError, IndexError, ValueError):
            pass
    return found


def children_of(parent: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                    pids.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass
    return pids


def database_backends(database: str) -> list[int]:
    """The PostgreSQL server processes serving `database` (same machine), or [] for SQLite."""
    if not database.startswith("postgres"):
        return []
    import psycopg

    name = database.rsplit("/", 1)[1]
    with psycopg.connect(f"{PG_ADMIN}/postgres", autocommit=True) as admin:
        return [row[0] for row in admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [name])]


class CpuMeter:
    """CPU used by each part during the load, read from /proc: the web workers, the database's server
    processes for this database, the scheduler, and this load generator. Unlike latency, it hardly depends on
    what else the machine runs. Sampled every second, so a process that ends during the load (a database
    session closed at CONN_MAX_AGE, a web worker restarted) still counts up to its last sample."""

    def __init__(self, web: subprocess.Popen, scheduler: subprocess.Popen | None, database: str):
        self.web, self.scheduler, self.database = web, scheduler, database
        self.began = self.read()
        self.latest = {part: dict(pids) for part, pids in self.began.items()}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def read(self) -> dict[str, dict[int, float]]:
        mine = os.times()
        return {
            "web": cpu_seconds([self.web.pid, *children_of(self.web.pid)]),
            "database": cpu_seconds(database_backends(self.database)),
            "scheduler": cpu_seconds([self.scheduler.pid] if self.scheduler else []),
            "load generator": {os.getpid(): mine.user + mine.system},
        }

    def sample(self) -> None:
        while not self.stopping.wait(1.0):
            self.update()

    def update(self) -> None:
        for part, pids in self.read().items():
            self.latest[part].update(pids)

    def used(self) -> dict[str, float]:
        self.stopping.set()
        self.thread.join()
        self.update()
        return {part: round(sum(seconds - self.began[part].get(pid, 0.0) for pid, seconds in pids.items()), 2)
                for part, pids in self.latest.items()}


def server_facts(env: dict) -> dict:
    script = (
        "import json; from scheduler.models import Job, Tick; from topology.models import Host; "
        "from django.db.models import Avg, Max; "
        f"ticks = Tick.objects.filter(cluster__name={CLUSTER!r}); "
        "print(json.dumps({'jobs': dict((s, Job.objects.filter(state=s).count()) for s in "
        "['pending', 'starting', 'running', 'completed', 'failed']), "
        "'hosts_down': Host.objects.filter(state='down').count(), 'ticks': ticks.count(), "
        "'tick_seconds_mean': ticks.aggregate(a=Avg('duration'))['a'], "
        "'tick_seconds_max': ticks.aggregate(m=Max('duration'))['m']}))"
    )
    return json.loads(manage(env, "shell", "-c", script).strip().splitlines()[-1])


def run(args) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="allot-load-"))
    database, described = fresh_database(args.database)
    env = child_env(database)
    print(f"database: {described}", file=sys.stderr)
    began = time.perf_counter()
    ids = prepare(env, args.hosts, workdir)
    prepared = time.perf_counter() - began
    print(f"prepared {len(ids['agents'])} hosts, {sum(ids['gpus'].values())} GPUs in {prepared:.0f} s",
          file=sys.stderr)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    web = subprocess.Popen(
        [str(Path(PYTHON).with_name("gunicorn")), "config.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", str(args.web_workers), "--timeout", "60", "--log-level", "warning", "--backlog", "2048"],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(workdir / "gunicorn.log", "wb"),
    )
    scheduler = None
    stats = Stats()
    try:
        wait_until_serving(base, web)
        if not args.no_scheduler:
            scheduler = subprocess.Popen(
                [PYTHON, str(REPO / "manage.py"), "run_scheduler", "--interval", "5"], env=env, cwd=REPO,
                stdout=subprocess.DEVNULL, stderr=open(workdir / "scheduler.log", "wb"),
            )
        agents = Agents(base, ids["agents"], ids["gpus"], args.beat_every, stats, args.agent_threads, args.seed)
        recent: deque = deque(maxlen=200)  # jobs submitted lately, whose detail researchers look at
        researchers = Researchers(base, ids["users"], args.researchers, stats, recent)
        submitters = Submitters(base, ids["users"], args.submit_rate, stats, args.seed + 1, recent)
        print(f"load for {args.duration:.0f} s: {len(ids['agents'])} agents every {args.beat_every:g} s, "
              f"{args.researchers} researchers, {args.submit_rate:g} submissions/s", file=sys.stderr)
        clients = (agents, researchers, submitters)
        researchers.log_in()
        with stats.lock:  # logins are reported on their own, outside the measured load
            logins = (stats.latencies.pop("login (before the load)", []),
                      dict(stats.errors.pop("login (before the load)", {})))
        load_before = os.getloadavg()[0]
        meter = CpuMeter(web, scheduler, database)
        for client in clients:
            client.start()
        load_began = time.monotonic()
        time.sleep(args.duration)
        elapsed = time.monotonic() - load_began
        for client in clients:
            client.stopping.set()
        time.sleep(1.0)
        cpu = meter.used()
        with stats.lock:
            snapshot = {kind: list(values) for kind, values in stats.latencies.items()}
            errors = {kind: dict(kinds) for kind, kinds in stats.errors.items()}
        load_after = os.getloadavg()[0]
        facts = server_facts(env)
    finally:
        for process in (scheduler, web):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    rows = []
    snapshot["all requests"] = [value for values in snapshot.values() for value in values]
    errors["all requests"] = {"": sum(sum(kinds.values()) for kinds in errors.values())}
    snapshot["login (before the load)"], errors["login (before the load)"] = logins
    for kind in ("agent heartbeat", "queue page", "GET jobs?state=pending", "GET jobs?mine=1", "GET jobs/<id>",
                 "POST jobs", "all requests", "login (before the load)"):
        values = snapshot.get(kind, [])
        if not values:
            continue
        rows.append({
            "kind": kind, "requests": len(values),
            "per_second": None if kind.startswith("login") else round(len(values) / elapsed, 1),
            "p50_ms": round(percentile(values, 0.50) * 1000, 1), "p99_ms": round(percentile(values, 0.99) * 1000, 1),
            "max_ms": round(max(values) * 1000, 1), "errors": sum(errors.get(kind, {}).values()),
            "error_kinds": {} if kind == "all requests" else errors.get(kind, {}),
        })
    late = agents.late
    served = len(snapshot["all requests"])
    return {
        "database": described, "hosts": len(ids["agents"]), "gpus": sum(ids["gpus"].values()),
        "duration_seconds": round(elapsed, 1), "web_workers": args.web_workers, "cores": os.cpu_count(),
        "load_average_before": round(load_before, 2), "load_average_during": round(load_after, 2),
        "heartbeats_offered_per_second": round(len(ids["agents"]) / args.beat_every, 1),
        "heartbeats_late_over_1s": sum(1 for lag in late if lag > 1.0),
        "heartbeat_lag_p99_s": round(percentile(late, 0.99), 2) if late else 0.0,
        "processes_started_by_agents": agents.started, "processes_ended_by_agents": agents.exited,
        "submissions_accepted": submitters.accepted, "server": facts, "rows": rows,
        "cpu_seconds": cpu,
        "cpu_ms_per_request": {part: round(1000 * cpu[part] / served, 2) if served else None
                               for part in ("web", "database")},
    }


def table(result: dict) -> str:
    lines = [
        f"database {result['database']}; {result['hosts']} hosts, {result['gpus']} GPUs; gunicorn "
        f"{result['web_workers']} workers on {result['cores']} cores (shared with PostgreSQL, the scheduler and "
        f"this load generator); {result['duration_seconds']:.0f} s; machine load average "
        f"{result['load_average_before']} before, {result['load_average_during']} during",
        "",
        f"{'request':<24}{'count':>8}{'per s':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'errors':>8}",
    ]
    for row in result["rows"]:
        lines.append(f"{row['kind']:<24}{row['requests']:>8}{row['per_second'] or '':>8}{row['p50_ms']:>9}"
                     f"{row['p99_ms']:>9}{row['max_ms']:>9}{row['errors']:>8}"
                     + (f"  {row['error_kinds']}" if row["error_kinds"] else ""))
    server = result["server"]
    cpu, per_request = result["cpu_seconds"], result["cpu_ms_per_request"]
    web_and_db = (per_request["web"] or 0) + (per_request["database"] or 0)
    lines += [
        "",
        f"CPU used in {result['duration_seconds']:.0f} s: " + ", ".join(f"{part} {seconds:.1f} s" for part, seconds
                                                                     in cpu.items()),
        f"per request served: web {per_request['web']} ms + database {per_request['database']} ms of CPU"
        + (f" → about {1000 / web_and_db:.0f} requests/s per core of web and database together" if web_and_db
           else ""),
        f"heartbeats: {result['heartbeats_offered_per_second']}/s offered; {result['heartbeats_late_over_1s']} "
        f"started over 1 s behind schedule (p99 lag {result['heartbeat_lag_p99_s']} s); hosts down at the end: "
        f"{server['hosts_down']}",
        f"scheduler: {server['ticks']} ticks, mean {fmt(server['tick_seconds_mean'])} s, max "
        f"{fmt(server['tick_seconds_max'])} s; jobs {server['jobs']}; agents ran "
        f"{result['processes_started_by_agents']} processes, ended {result['processes_ended_by_agents']}; "
        f"{result['submissions_accepted']} submissions",
    ]
    return "\n".join(lines)


def fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=None, help="seconds of load (default 60; 20 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a short run: 20 s of load (the same 2,000 hosts)")
    parser.add_argument("--hosts", type=int, default=2000)
    parser.add_argument("--beat-every", type=float, default=10, help="seconds between an agent's heartbeats")
    parser.add_argument("--researchers", type=int, default=8)
    parser.add_argument("--submit-rate", type=float, default=2, help="submissions per second")
    parser.add_argument("--web-workers", type=int, default=2 * (os.cpu_count() or 1), help="gunicorn workers")
    parser.add_argument("--agent-threads", type=int, default=32, help="client threads serving the agents")
    parser.add_argument("--database", choices=["auto", "postgres", "sqlite"], default="auto")
    parser.add_argument("--no-scheduler", action="store_true", help="no scheduler: agents get no work")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs) and say where")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.duration is None:
        args.duration = 20.0 if args.quick else 60.0
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else table(result))
    failed = sum(row["errors"] for row in result["rows"] if row["kind"] != "all requests")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

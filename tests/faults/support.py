"""What the fault tests share: child processes on the test database, private servers, the invariants.

Every server a fault test stops or restarts is its own (a PostgreSQL cluster
made with initdb, a redis-server on a free port): the shared ones on 5432 and
6379 serve other suites at the same time and are never touched.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings

PYTHON = sys.executable
MANAGE = str(Path(settings.BASE_DIR) / "manage.py")
AGENT = str(Path(sys.executable).with_name("allot-agent"))
GUNICORN = str(Path(sys.executable).with_name("gunicorn"))

# A small simulated cluster: two 16-GPU NVLink domains and two 8-GPU servers (48 GPUs).
CLUSTER = {
    "name": "faultlab",
    "policy": {"tick": "1s", "grace_period": "2s", "unallocated_grace": "1s", "heartbeat_timeout": "30s",
               "max_min_runtime": "8h", "executor": "simulated",
               # Work runs 600× faster than the policy's clock here: a preempted filler backs off for seconds.
               "unallocated_backoff": "1s", "max_unallocated_backoff": "5s"},
    "domains": [
        {"name": "rack-{:02d}", "count": 2, "hosts": 4, "gpus_per_host": 4, "gpu_type": "GB200"},
        {"name": "hgx-{:02d}", "count": 2, "hosts": 1, "gpus_per_host": 8, "gpu_type": "H100"},
    ],
}
ORG = {
    "users": [{"username": "alice", "password": "alice-password"}, {"username": "carol", "password": "carol-pass"}],
    "units": [
        {"name": "olmo", "members": ["alice"], "share": {"faultlab": 60}},
        {"name": "tulu", "members": ["carol"], "share": {"faultlab": 40}},
    ],
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def child_env(database: str, *, redis_url: str | None = None, **extra) -> dict:
    """The environment of a child process: this test's database, Redis only when asked for."""
    env = {key: value for key, value in os.environ.items() if key not in ("REDIS_URL", "DATABASE_URL", "DEBUG")}
    env.update(DATABASE_URL=database, SECRET_KEY="allot-tests-only", PYTHONUNBUFFERED="1", LOG_LEVEL="INFO")
    if redis_url:
        env["REDIS_URL"] = redis_url
    env.update({key: str(value) for key, value in extra.items()})
    return env


def wait_until(condition, *, what: str, timeout: float = 30.0, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting until {what}")


class Child:
    """A child process whose stdout and stderr go to files the test reads."""

    def __init__(self, name: str, command: list[str], env: dict, logs: Path):
        self.name, self.command, self.env = name, command, env
        self.logs = logs
        self.process: subprocess.Popen | None = None
        self.starts = 0

    @property
    def stdout_path(self) -> Path:
        return self.logs / f"{self.name}.out"

    @property
    def stderr_path(self) -> Path:
        return self.logs / f"{self.name}.err"

    def start(self) -> "Child":
        self.starts += 1
        self.process = subprocess.Popen(
            self.command, env=self.env, cwd=settings.BASE_DIR, stdin=subprocess.DEVNULL,
            stdout=open(self.stdout_path, "ab"), stderr=open(self.stderr_path, "ab"),
        )
        return self

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(timeout=10)

    def stop(self, timeout: float = 15) -> None:
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace") if self.stdout_path.exists() else ""

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def tail(self, chars: int = 3000) -> str:
        return f"--- {self.name} stdout:\n{self.stdout()[-chars:]}\n--- {self.name} stderr:\n{self.stderr()[-chars:]}"


def scheduler(database: str, logs: Path, *, name: str = "scheduler", interval: float = 0.05,
              redis_url: str | None = None, **extra) -> Child:
    return Child(name, [PYTHON, MANAGE, "run_scheduler", "--interval", str(interval)],
                 child_env(database, redis_url=redis_url, **extra), logs)


def manage(database: str, *args: str, timeout: float = 300, **extra) -> str:
    """Run a management command on `database`; its stdout, or an AssertionError with its output."""
    done = subprocess.run([PYTHON, MANAGE, *args], env=child_env(database, **extra), cwd=settings.BASE_DIR,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"manage.py {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


# ---------------------------------------------------------------- invariants, in SQL (any connection)

INVARIANTS = {
    "a GPU held beyond 1000 milli by live assignments": """
        SELECT gpu_id, SUM(milli) FROM scheduler_gpuassignment WHERE released_at IS NULL
        GROUP BY gpu_id HAVING SUM(milli) > 1000""",
    "a GPU whose allocated_milli differs from its live assignments": """
        SELECT g.id, g.allocated_milli, COALESCE(SUM(a.milli), 0) FROM topology_gpu g
        LEFT JOIN scheduler_gpuassignment a ON a.gpu_id = g.id AND a.released_at IS NULL
        GROUP BY g.id, g.allocated_milli HAVING g.allocated_milli <> COALESCE(SUM(a.milli), 0)""",
    "a live job that does not hold exactly its GPUs": """
        SELECT j.id, j.state, j.gpus, COUNT(a.id) FROM scheduler_job j
        LEFT JOIN scheduler_gpuassignment a ON a.job_id = j.id AND a.released_at IS NULL
        WHERE j.state IN ('starting', 'running', 'preempting')
        GROUP BY j.id, j.state, j.gpus HAVING COUNT(a.id) <> j.gpus""",
    "a job that is not live but holds GPUs": """
        SELECT j.id, j.state, COUNT(a.id) FROM scheduler_job j
        JOIN scheduler_gpuassignment a ON a.job_id = j.id AND a.released_at IS NULL
        WHERE j.state NOT IN ('starting', 'running', 'preempting') GROUP BY j.id, j.state""",
    "a process of a run that is over still assigned or running": """
        SELECT p.job_id, p.run, p.state, j.state, j.restarts FROM scheduler_jobprocess p
        JOIN scheduler_job j ON j.id = p.job_id
        WHERE p.state IN ('assigned', 'running')
          AND (j.state NOT IN ('starting', 'running', 'preempting') OR p.run <> j.restarts)""",
    "a job in an unknown state": """
        SELECT id, state FROM scheduler_job WHERE state NOT IN
        ('pending', 'starting', 'running', 'preempting', 'completed', 'failed', 'cancelled', 'preempted')""",
    "a pending job with a run in progress": """
        SELECT id FROM scheduler_job WHERE state = 'pending' AND run_started_at IS NOT NULL""",
}


def violations(cursor) -> list[str]:
    """Every broken invariant, with up to five offending rows each; [] when all hold."""
    found = []
    for what, sql in INVARIANTS.items():
        cursor.execute(sql)
        rows = cursor.fetchall()
        if rows:
            found.append(f"{what}: {rows[:5]}")
    return found


def overlapping_ticks(ticks) -> list[tuple]:
    """Pairs of ticks by two processes where one began before the other had ended.

    `ticks`: (leader, started_at, duration in seconds) in the order they started; a leader reads
    "host:pid (status)", and the process is the part before the space.
    """
    found, ends = [], {}  # process → (end of its latest tick, that tick)
    for tick in ticks:
        leader, started_at, duration = tick
        process = leader.split(" ", 1)[0]
        found += [(other, tick) for name, (end, other) in ends.items() if name != process and end > started_at]
        end = started_at + timedelta(seconds=duration)
        if process not in ends or ends[process][0] < end:
            ends[process] = (end, tick)
    return found


def job_states(cursor) -> dict[str, int]:
    cursor.execute("SELECT state, COUNT(*) FROM scheduler_job GROUP BY state")
    return dict(cursor.fetchall())


# ---------------------------------------------------------------- private servers


class PrivateRedis:
    """A redis-server of this test's own, on a free port; stop() and start() again at will."""

    def __init__(self, workdir: Path):
        binary = shutil.which("redis-server")
        if binary is None:
            raise AssertionError("redis-server is not installed (apt-get install redis-server): "
                                 "the Redis fault test needs a private one it can stop")
        self.binary, self.workdir, self.port = binary, workdir, free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--daemonize", "no", "--dir", str(self.workdir)],
            stdout=open(self.workdir / "redis.log", "ab"), stderr=subprocess.STDOUT,
        )
        wait_until(self.ping, what=f"redis-server answers on port {self.port}", timeout=15)

    def ping(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_timeout=1, socket_connect_timeout=1).ping())
        except redis.RedisError:
            return False

    def get(self, key: str) -> str | None:
        import redis

        value = redis.Redis(port=self.port, socket_timeout=2).get(key)
        return value.decode() if value else None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)  # as a crash: no goodbye to its clients
            self.process.wait(timeout=10)
        self.process = None


def postgres_bindir() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name))
    if not found:
        raise AssertionError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin "
                             "(apt-get install postgresql): the restart test needs a private cluster")
    return found[-1].parent


class PrivatePostgres:
    """A PostgreSQL cluster of this test's own (initdb in a temporary folder, a free port)."""

    def __init__(self):
        self.bindir = postgres_bindir()
        self.base = Path(tempfile.mkdtemp(prefix="allot-private-pg-"))
        self.data = self.base / "data"
        self.port = free_port()
        # initdb and postgres refuse to run as root: as root, run them as the postgres user.
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(self.base, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync",
                  "--no-instructions")

    def _run(self, tool: str, *args: str, timeout: float = 60) -> str:
        done = subprocess.run([*self.as_user, str(self.bindir / tool), *args], capture_output=True, text=True,
                              timeout=timeout, cwd=self.base)
        if done.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} failed: {done.stdout}\n{done.stderr}\n{self.log()}")
        return done.stdout

    def log(self) -> str:
        path = self.base / "server.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c full_page_writes=off -c shared_buffers=32MB -c max_connections=50")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.base / "server.log"), "-o", options, "-w",
                  "-t", "60", "start")

    def restart(self) -> None:
        # -l again: without it the new postmaster would write to (and hold open) our pipe.
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.base / "server.log"), "-m", "fast", "-w",
                  "-t", "60", "restart")

    def stop(self, mode: str = "fast") -> None:
        """`fast`: a clean shutdown that cuts every session; `immediate`: a crash (recovery at the next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str = "postgres"):
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=database,
                               autocommit=True, connect_timeout=5)

    def destroy(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


def web(database: str, logs: Path, *, redis_url: str | None = None, workers: int = 2) -> tuple[Child, str]:
    """gunicorn serving the project on a free port, as in production; (the child, its base URL)."""
    port = free_port()
    child = Child("gunicorn", [GUNICORN, "config.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
                               "--timeout", "60", "--graceful-timeout", "5", "--log-level", "warning"],
                  child_env(database, redis_url=redis_url), logs)
    return child, f"http://127.0.0.1:{port}"


def set_password_for_children(user, password: str) -> None:
    """The tests hash with MD5 for speed; a child process runs the production hashers."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    hasher = PBKDF2PasswordHasher()
    user.password = hasher.encode(password, hasher.salt(), iterations=1000)
    user.save(update_fields=["password"])

"""Real `allot-agent` processes, as root, running jobs as real OS accounts the tests create.

Everything here is real: two accounts made with `useradd` (and a group) and removed afterwards however the
test ends, the agent started as root against the live test server with its token in a 0600 file, the
jobs' cgroups on this machine's hierarchy (v2 where it has the controllers, else v1), processes read back
through /proc. The test drives the scheduler's ticks. Each agent's cgroups go under a parent of this run's
own (`--cgroup-parent`), removed at the end, so that runs side by side never touch each other's groups.
"""

import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from budgets.loaders import load_org_file
from scheduler.services import JobRequest, job_submit
from scheduler.tick import run_tick
from tests.agent_rig import AGENT, remove_cgroups
from tests.conftest import get_user
from topology.choices import HostState
from topology.loaders import load_cluster_file
from topology.models import AgentToken, Host

PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
HOST = "node-01-h01"
OTHER_HOST = "node-02-h01"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/agent/" in str(item.fspath) and item.get_closest_marker("root") is None:
            item.add_marker(pytest.mark.root)


@pytest.fixture(autouse=True)
def needs_root(request):
    if request.node.get_closest_marker("root") and os.geteuid() != 0:
        pytest.skip("needs root: real OS accounts and cgroups (CI runs as root)")


def processes_of(uid: int) -> list[int]:
    """Pids of the live processes whose real uid is `uid` (one of this test's own accounts)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            uids = next((line.split()[1:] for line in status.splitlines() if line.startswith("Uid:")), [])
            if uids and int(uids[0]) == uid and "State:\tZ" not in status:
                found.append(int(entry))
    return found


def kill_processes_of(uid: int) -> None:
    for pid in processes_of(uid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.05)


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


@dataclass
class Account:
    name: str
    uid: int
    gid: int
    groups: list[int]  # every group id, primary first
    home: str


@pytest.fixture
def accounts():
    """Two fresh OS accounts (the first also in a supplementary group), removed afterwards, even on failure."""
    tag = secrets.token_hex(3)
    group = f"allotg{tag}"
    names = [f"allota{tag}", f"allotb{tag}"]
    made_group, made = False, []
    try:
        run("groupadd", group)
        made_group = True
        for number, name in enumerate(names):
            run("useradd", "--create-home", "--user-group", "--shell", "/bin/sh",
                *(["--groups", group] if number == 0 else []), name)
            made.append(name)
        found = []
        for name in names:
            entry = pwd.getpwnam(name)
            groups = os.getgrouplist(name, entry.pw_gid)
            found.append(Account(name=name, uid=entry.pw_uid, gid=entry.pw_gid,
                                 groups=[entry.pw_gid, *sorted(set(groups) - {entry.pw_gid})], home=entry.pw_dir))
        yield found
    finally:
        for name in made:
            # Whatever a test left running as the account goes first, or userdel refuses.
            kill_processes_of(pwd.getpwnam(name).pw_uid)
            subprocess.run(["userdel", "--remove", "--force", name], capture_output=True)
        if made_group:
            subprocess.run(["groupdel", group], capture_output=True)


class Lab:
    """The cluster, its agents and a world-readable place for programs and working directories."""

    def __init__(self, cluster, base: Path, server: str, accounts: list[Account]):
        self.cluster, self.base, self.server, self.accounts = cluster, base, server, accounts
        self.agents: dict[str, subprocess.Popen] = {}
        self.tokens: dict[str, str] = {}
        self.cgroup_parent = f"allot-test-{os.getpid()}-{secrets.token_hex(3)}"
        self.dev_dir = base / "dev"

    def agent_dir(self, host: str = HOST) -> Path:
        return self.base / "agents" / host

    def jobs_dir(self, host: str = HOST) -> Path:
        return self.agent_dir(host) / "jobs"

    def log(self, host: str = HOST) -> str:
        path = self.base / f"{host}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start_agent(self, host: str = HOST, *extra: str, token: str | None = None, env: dict | None = None,
                    token_in_env: bool = False):
        if token is None:
            token = AgentToken.for_host(Host.objects.get(name=host)).key
        self.tokens[host] = token
        token_file = self.base / f"{host}.token"
        token_file.write_text(token)
        token_file.chmod(0o600)
        agent_env = {**os.environ, "ALLOT_TEST_AGENT_MARKER": "agent-only", **(env or {})}
        argv = [AGENT, "--server", self.server, "--host", host, "--gpus", "0,1,2,3",
                "--workdir", str(self.base / "agents"), "--address", "127.0.0.1", "--log-level", "INFO",
                "--cgroup-parent", self.cgroup_parent, "--dev-dir", str(self.dev_dir), *extra]
        if token_in_env:
            agent_env["ALLOT_AGENT_TOKEN"] = token
        else:
            argv += ["--token-file", str(token_file)]
        self.agents[host] = subprocess.Popen(argv, env=agent_env, stdout=subprocess.DEVNULL,
                                             stderr=open(self.base / f"{host}.log", "ab"))
        return self.agents[host]

    def stop_agent(self, host: str = HOST) -> None:
        process = self.agents.pop(host, None)
        if process is not None and process.poll() is None:
            process.terminate()
            process.wait(timeout=10)

    def wait_for(self, condition, *, what: str, timeout: float = 30.0, tick: bool = True):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if tick:
                run_tick(self.cluster)
            result = condition()
            if result:
                return result
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting until {what}\n--- agent log ---\n{self.log()[-4000:]}")

    def program(self, name: str, text: str) -> str:
        path = self.base / "programs" / name
        path.parent.mkdir(exist_ok=True)
        path.parent.chmod(0o755)
        path.write_text(text)
        path.chmod(0o644)
        return str(path)

    def workdir(self, account: Account, name: str = "work") -> str:
        path = self.base / f"{name}-{account.name}"
        path.mkdir()
        os.chown(path, account.uid, account.gid)
        path.chmod(0o700)
        return str(path)

    def submit(self, command: str, *, user: str = "ann", project: str = "olmo", gpus: int = 1, min_runtime: int = 600,
               resumable: bool = False, **request):
        return job_submit(user=get_user(user), request=JobRequest(
            cluster=self.cluster.name, project=project, gpus=gpus, min_runtime=min_runtime, resumable=resumable,
            command=command, **request,
        ))


def cluster_spec(*, allow_root_jobs: bool = False) -> dict:
    return {
        "name": "rootlab",
        "policy": {"tick": "1s", "grace_period": "2s", "unallocated_grace": "1s", "heartbeat_timeout": "4s",
                   "allow_root_jobs": allow_root_jobs},
        "domains": [{"name": "node-{:02d}", "count": 2, "hosts": 1, "gpus_per_host": 4, "gpu_type": "H100",
                     "memory_gib_per_host": 64}],
    }


def org_spec(accounts: list[Account], **extra_users) -> dict:
    """Allot users ann and ben run as the two OS accounts; `extra_users` maps more usernames to accounts."""
    users = [{"username": "ann", "posix_user": accounts[0].name}, {"username": "ben", "posix_user": accounts[1].name}]
    users += [{"username": name, "posix_user": posix} for name, posix in extra_users.items()]
    return {"users": users, "units": [{"name": "olmo", "members": [user["username"] for user in users],
                                       "share": {"rootlab": 100}}]}


@pytest.fixture
def make_lab(live_server, accounts):
    """A lab factory (cluster policy and extra users as the test needs), torn down whole afterwards."""
    base = Path(tempfile.mkdtemp(prefix="allot-agent-tests-", dir="/tmp"))
    base.chmod(0o755)
    labs = []

    def make(*, allow_root_jobs: bool = False, start=(HOST,), extra_users=None, **agent_options):
        (base / "cluster.yaml").write_text(yaml.safe_dump(cluster_spec(allow_root_jobs=allow_root_jobs)))
        (base / "org.yaml").write_text(yaml.safe_dump(org_spec(accounts, **(extra_users or {}))))
        cluster, _ = load_cluster_file(base / "cluster.yaml")
        load_org_file(base / "org.yaml")
        lab = Lab(cluster, base, live_server.url, accounts)
        labs.append(lab)
        # Device nodes like a GPU host's (major 195, minor = GPU index), for the devices controller to filter.
        lab.dev_dir.mkdir(exist_ok=True)
        for index in range(4):
            node = lab.dev_dir / f"nvidia{index}"
            if not node.exists():
                os.mknod(node, 0o666 | 0o020000, os.makedev(195, index))
                node.chmod(0o666)
        for host in start:
            lab.start_agent(host, **agent_options)
        if start:
            lab.wait_for(lambda: Host.objects.filter(name__in=start, state=HostState.UP).count() == len(start),
                         what="the agents register")
        return lab

    yield make
    for lab in labs:
        for host in list(lab.agents):
            lab.stop_agent(host)
        remove_cgroups(lab.cgroup_parent)
    for account in accounts:
        kill_processes_of(account.uid)
    shutil.rmtree(base, ignore_errors=True)

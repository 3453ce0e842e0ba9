"""Agents started by tests: the argv of a test-rig agent, and removing the cgroups a test run made.

Each test run's agents put their jobs' cgroups under a parent of the run's own (`--cgroup-parent`), so that
runs side by side never touch each other's groups; `remove_cgroups` kills whatever is still in them (by pid,
from the groups' own lists) and removes the directories, deepest first.
"""

import os
import signal
import sys
import time
from pathlib import Path

from client.cgroups import detect
from topology.models import AgentToken, Host

AGENT = str(Path(sys.executable).with_name("allot-agent"))


def run_cgroup_parent() -> str:
    return f"allot-test-{os.getpid()}"


def rig_agent(server: str, host: str, directory: Path, *extra: str, cgroup_parent: str | None = None) -> list[str]:
    """The argv of a single-user test-rig agent for `host` (every job runs as the account running the tests),
    its token in a 0600 file."""
    token_file = directory / f"{host}.token"
    token_file.write_text(AgentToken.for_host(Host.objects.get(name=host)).key)
    token_file.chmod(0o600)
    return [AGENT, "--server", server, "--token-file", str(token_file), "--host", host, "--gpus", "0,1,2,3",
            "--workdir", str(directory / "agents"), "--address", "127.0.0.1", "--single-user",
            "--cgroup-parent", cgroup_parent or run_cgroup_parent(), "--log-level", "WARNING", *extra]


def remove_cgroups(parent: str) -> None:
    """Every cgroup under `parent` (this run's): its processes killed, then the directories removed."""
    if os.geteuid() != 0:
        return  # an agent that is not root made none
    containment = detect(host="", privileged=True, parent=parent)
    roots = set(containment.bases.values()) if containment.kind == "v1" else (
        {containment.base} if containment.kind == "v2" else set())
    for root in roots:
        if not root.exists():
            continue
        for directory in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [root]:
            procs = directory / "cgroup.procs"
            for pid in procs.read_text().split() if procs.exists() else []:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            freezer = directory / "freezer.state"
            if freezer.exists():
                freezer.write_text("THAWED")
            for _ in range(100):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)

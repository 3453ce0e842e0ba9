"""Containment (client/cgroups.py): which kind a host gets, and the cgroup v2 code paths.

Where this machine has no usable cgroup v2 hierarchy, the v2 paths run against a temporary directory laid
out like cgroupfs (the files the kernel would offer, written by the test where the kernel would write
them); the processes signalled are real ones. The v1 paths run for real in tests/agent/.
"""

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from client.agent import Process
from client.cgroups import V1, V2, detect, read_mounts

HYBRID = """\
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0
cgroup /sys/fs/cgroup/freezer cgroup rw,nosuid,nodev,noexec,relatime,freezer 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,nosuid,nodev,noexec,relatime,pids 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
"""


@pytest.fixture
def unified(tmp_path):
    """A cgroup2 mount with the memory and pids controllers, as a directory."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def v2(root: Path) -> V2:
    containment = detect(host="node-01", privileged=True, mounts_text=f"cgroup2 {root} cgroup2 rw 0 0\n")
    assert isinstance(containment, V2)
    return containment


def test_a_unified_hierarchy_with_the_controllers_is_v2_and_says_it_cannot_filter_devices(unified):
    containment = v2(unified)
    assert (containment.kind, containment.base) == ("v2", unified / "allot" / "node-01")
    assert containment.limits_memory and not containment.filters_devices
    assert "no device filtering (it needs a BPF program)" in containment.describe()


def test_a_hybrid_host_whose_unified_hierarchy_has_no_controllers_is_v1(tmp_path):
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("\n")
    text = HYBRID.replace("/sys/fs/cgroup/unified", str(unified))
    containment = detect(host="node-01", privileged=True, mounts_text=text, parent="allot-x")
    assert isinstance(containment, V1)
    assert containment.bases == {name: Path(f"/sys/fs/cgroup/{name}/allot-x/node-01")
                                 for name in ("freezer", "memory", "pids")}
    assert containment.limits_memory and not containment.filters_devices
    assert containment.describe() == "freezer, pids, memory; no devices hierarchy: jobs can open every /dev/nvidia*"


def test_no_hierarchy_or_no_root_is_none():
    assert detect(host="h", privileged=True, mounts_text="proc /proc proc rw 0 0\n").kind == "none"
    none = detect(host="h", privileged=False, mounts_text=HYBRID)
    assert none.kind == "none" and none.group("x") is None and "not root" in none.describe()


def test_mount_points_with_spaces_are_read():
    (mount,) = read_mounts("cgroup2 /mnt/my\\040cgroups cgroup2 rw 0 0\n")
    assert mount.path == Path("/mnt/my cgroups") and mount.version == 2


def test_a_v2_group_enables_the_controllers_on_the_way_down_and_sets_its_memory_limit(unified):
    group = v2(unified).group("job-7-run-0-rank-0")
    group.create(memory_bytes=1024 ** 3)
    for directory in (unified, unified / "allot", unified / "allot" / "node-01"):
        assert (directory / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (group.path / "memory.max").read_text() == str(1024 ** 3)
    assert group.procs_files() == [str(group.path / "cgroup.procs")]


@pytest.fixture
def sleeper():
    process = subprocess.Popen(["sleep", "60"])
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def test_a_v2_group_is_frozen_while_every_process_in_it_is_signalled(unified, sleeper):
    group = v2(unified).group("job-7-run-0-rank-0")
    group.create()
    (group.path / "cgroup.procs").write_text(f"{sleeper.pid}\n")
    (group.path / "cgroup.events").write_text("populated 1\nfrozen 1\n")  # what the kernel says once frozen
    assert not group.empty()
    group.signal(signal.SIGTERM)
    assert sleeper.wait(timeout=5) == -signal.SIGTERM
    assert (group.path / "cgroup.freeze").read_text() == "0"  # thawed again after the signal


def test_a_v2_group_is_killed_by_cgroup_kill_where_the_kernel_has_it(unified, sleeper):
    group = v2(unified).group("job-7-run-0-rank-0")
    group.create()
    (group.path / "cgroup.procs").write_text(f"{sleeper.pid}\n")
    (group.path / "cgroup.kill").write_text("")
    group.kill()
    assert (group.path / "cgroup.kill").read_text() == "1"
    time.sleep(0.1)
    assert sleeper.poll() is None  # the kernel does it; the agent did not signal by hand
    (group.path / "cgroup.kill").unlink()
    (group.path / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    group.kill()  # an older kernel: freeze, SIGKILL each, thaw
    assert sleeper.wait(timeout=5) == -signal.SIGKILL


def test_a_rank_ends_only_when_its_v2_group_is_empty_and_an_oom_kill_is_told(unified, sleeper, tmp_path):
    group = v2(unified).group("job-7-run-0-rank-0")
    group.create(memory_bytes=1024 ** 3)
    exit_file = tmp_path / "exit"
    exit_file.write_text(json.dumps({"code": 137}))
    process = Process(job=7, run=0, rank=0, pid=None, exit_file=str(exit_file), cgroup=group.name, host="node-01",
                      memory_mib=1024, group=group)
    (group.path / "cgroup.procs").write_text(f"{sleeper.pid}\n")
    (group.path / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    assert process.alive()  # its command ended, something it left is still in the group: killed, not ended
    assert sleeper.wait(timeout=5) == -signal.SIGKILL
    (group.path / "cgroup.procs").write_text("")
    (group.path / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    (group.path / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")
    assert not process.alive()
    assert process.exit_code == 137
    assert process.error == "rank 0 out of memory on node-01: killed by the kernel at its memory limit of 1024 MiB"

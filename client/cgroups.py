"""Containment: every job rank in its own cgroup, as Slurm's proctrack/cgroup keeps a job step.

Which kind a host gets (`detect`):

- **v2**, where the unified hierarchy offers the `memory` and `pids` controllers: one group per rank under
  `<mount>/allot/<host>/`; `cgroup.freeze` stops it from forking while it is signalled, `cgroup.kill` ends
  it whole, `memory.max` is its memory request, `memory.events` counts its OOM kills. Device filtering on v2
  takes a BPF program, which the agent does not load: on v2 a job can open every `/dev/nvidia*` (said in
  the heartbeat and on the host page).
- **v1**, otherwise, where the `freezer` hierarchy is mounted: a group of the same name in each of the
  `freezer` and `pids` hierarchies and, where mounted, `memory` (`memory.limit_in_bytes`, swap included,
  `memory.oom_control` for OOM kills) and `devices` (the other GPUs' `/dev/nvidia<N>` denied).
- **none**, for an agent that is not root or a host with neither: process groups (client/agent.py).

A group is empty when no process is left in it; the agent reports a rank's exit only then, so a
double-forked or `setsid` child cannot outlive its job unseen.
"""

import logging
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("allot-agent")
V1_CONTROLLERS = ("freezer", "pids", "memory", "devices")
V2_CONTROLLERS = ("memory", "pids")
FREEZE_WAIT_SECONDS = 2.0
NVIDIA_DEVICE = re.compile(r"nvidia(\d+)$")


class ContainmentError(Exception):
    """A group could not be made or set up: the rank must not run uncontained."""


@dataclass(frozen=True)
class Mount:
    path: Path
    version: int  # 1 or 2
    controllers: tuple[str, ...]  # v1: the controllers bound to this hierarchy


def read_mounts(text: str) -> list[Mount]:
    """The cgroup hierarchies in a /proc/self/mounts text."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        path = Path(parts[1].replace("\\040", " "))
        if parts[2] == "cgroup2":
            mounts.append(Mount(path, 2, ()))
        elif parts[2] == "cgroup":
            options = parts[3].split(",")
            mounts.append(Mount(path, 1, tuple(option for option in options if option in V1_CONTROLLERS)))
    return mounts


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _keyed(path: Path) -> dict[str, int]:
    """A flat-keyed cgroup file (`populated 0`, `oom_kill 3`) as a mapping."""
    values = {}
    for line in _read(path).splitlines():
        key, _, value = line.partition(" ")
        try:
            values[key] = int(value)
        except ValueError:
            continue
    return values


def _pids(path: Path) -> list[int]:
    return [int(line) for line in _read(path).split() if line.isdigit()]


def _signal_each(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def gpu_device_numbers(dev_dir: Path) -> dict[int, tuple[int, int]]:
    """`/dev/nvidia<N>` nodes on this host: minor number N → (major, minor)."""
    numbers = {}
    try:
        entries = list(dev_dir.iterdir())
    except OSError:
        return numbers
    for entry in entries:
        match = NVIDIA_DEVICE.match(entry.name)
        if not match:
            continue
        try:
            status = entry.stat()
        except OSError:
            continue
        if status.st_rdev:
            numbers[int(match.group(1))] = (os.major(status.st_rdev), os.minor(status.st_rdev))
    return numbers


@dataclass
class Group:
    """One rank's cgroup (in one v2 directory, or one directory per v1 hierarchy)."""

    name: str
    containment: "Containment"

    def create(self, *, memory_bytes: int = 0, denied_devices: list[tuple[int, int]] = ()) -> None:
        raise NotImplementedError

    def procs_files(self) -> list[str]:
        """Where the rank's first process writes its pid to join (before it drops privileges)."""
        raise NotImplementedError

    def pids(self) -> list[int]:
        raise NotImplementedError

    def empty(self) -> bool:
        return not self.pids()

    def exists(self) -> bool:
        raise NotImplementedError

    def freeze(self) -> None:
        raise NotImplementedError

    def thaw(self) -> None:
        raise NotImplementedError

    def signal(self, signum: int) -> None:
        """Every process in the group: frozen while it is signalled, so none forks a new one meanwhile."""
        self.freeze()
        try:
            _signal_each(self.pids(), signum)
        finally:
            self.thaw()

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    def oom_kills(self) -> int:
        return 0

    def remove(self) -> bool:
        raise NotImplementedError


@dataclass
class Containment:
    """How this host contains ranks: `kind` is v2, v1 or none; `notes` what it cannot do here."""

    kind: str = "none"
    notes: list[str] = field(default_factory=list)
    limits_memory: bool = False
    filters_devices: bool = False

    def group(self, name: str) -> Group | None:
        return None

    def describe(self) -> str:
        return "; ".join(self.notes)

    def sweep(self, keep: set[str]) -> None:
        """Remove empty groups a previous agent left (its ranks ended while no agent watched)."""


@dataclass
class V2Group(Group):
    @property
    def path(self) -> Path:
        return self.containment.base / self.name

    def create(self, *, memory_bytes: int = 0, denied_devices=()) -> None:
        try:
            self.containment.prepare()
            self.path.mkdir(exist_ok=True)
            if memory_bytes:
                _write(self.path / "memory.max", str(memory_bytes))
                if (self.path / "memory.swap.max").exists():
                    _write(self.path / "memory.swap.max", "0")  # the request is the limit: no swapping past it
        except OSError as error:
            raise ContainmentError(f"cannot set up cgroup {self.path}: {error.strerror or error}") from error

    def procs_files(self) -> list[str]:
        return [str(self.path / "cgroup.procs")]

    def pids(self) -> list[int]:
        return _pids(self.path / "cgroup.procs")

    def empty(self) -> bool:
        events = _keyed(self.path / "cgroup.events")
        if "populated" in events:
            return events["populated"] == 0 and not self.pids()
        return not self.pids()

    def exists(self) -> bool:
        return self.path.is_dir()

    def freeze(self) -> None:
        try:
            _write(self.path / "cgroup.freeze", "1")
        except OSError:
            return
        deadline = time.monotonic() + FREEZE_WAIT_SECONDS
        while _keyed(self.path / "cgroup.events").get("frozen") != 1 and time.monotonic() < deadline:
            time.sleep(0.01)

    def thaw(self) -> None:
        try:
            _write(self.path / "cgroup.freeze", "0")
        except OSError:
            pass

    def kill(self) -> None:
        if (self.path / "cgroup.kill").exists():
            try:
                _write(self.path / "cgroup.kill", "1")  # the kernel's own: every process, atomically
                return
            except OSError:
                pass
        super().kill()

    def oom_kills(self) -> int:
        return _keyed(self.path / "memory.events").get("oom_kill", 0)

    def remove(self) -> bool:
        try:
            self.path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            return False


@dataclass
class V2(Containment):
    """Groups under `<mount>/allot/<host>/`, the controllers enabled on the way down."""

    mount: Path = Path("/sys/fs/cgroup")
    base: Path = Path("/sys/fs/cgroup/allot")

    def prepare(self) -> None:
        """Enable memory and pids for the groups below: in each ancestor's cgroup.subtree_control."""
        enable = " ".join(f"+{name}" for name in V2_CONTROLLERS)
        directory = self.mount
        for part in self.base.relative_to(self.mount).parts:
            if set(V2_CONTROLLERS) - set(_read(directory / "cgroup.subtree_control").split()):
                _write(directory / "cgroup.subtree_control", enable)
            directory = directory / part
            directory.mkdir(exist_ok=True)
        if set(V2_CONTROLLERS) - set(_read(directory / "cgroup.subtree_control").split()):
            _write(directory / "cgroup.subtree_control", enable)

    def group(self, name: str) -> V2Group:
        return V2Group(name=name, containment=self)

    def sweep(self, keep: set[str]) -> None:
        try:
            names = [entry.name for entry in self.base.iterdir() if entry.is_dir()]
        except OSError:
            return
        for name in names:
            group = self.group(name)
            if name not in keep and group.empty():
                group.remove()


@dataclass
class V1Group(Group):
    def paths(self) -> dict[str, Path]:
        return {controller: base / self.name for controller, base in self.containment.bases.items()}

    def create(self, *, memory_bytes: int = 0, denied_devices=()) -> None:
        paths = self.paths()
        try:
            for path in paths.values():
                path.mkdir(parents=True, exist_ok=True)
            memory = paths.get("memory")
            if memory is not None and memory_bytes:
                _write(memory / "memory.limit_in_bytes", str(memory_bytes))
                if (memory / "memory.memsw.limit_in_bytes").exists():
                    _write(memory / "memory.memsw.limit_in_bytes", str(memory_bytes))  # memory + swap
                else:
                    _write(memory / "memory.swappiness", "0")
            devices = paths.get("devices")
            if devices is not None:
                for major, minor in denied_devices:
                    _write(devices / "devices.deny", f"c {major}:{minor} rwm")
        except OSError as error:
            self.remove()
            raise ContainmentError(f"cannot set up cgroup {self.name}: {error.strerror or error}") from error

    def procs_files(self) -> list[str]:
        return [str(path / "cgroup.procs") for path in self.paths().values()]

    def pids(self) -> list[int]:
        return _pids(self.paths()["freezer"] / "cgroup.procs")

    def exists(self) -> bool:
        return self.paths()["freezer"].is_dir()

    def freeze(self) -> None:
        state = self.paths()["freezer"] / "freezer.state"
        try:
            _write(state, "FROZEN")
        except OSError:
            return
        deadline = time.monotonic() + FREEZE_WAIT_SECONDS
        while _read(state).strip() != "FROZEN" and time.monotonic() < deadline:
            time.sleep(0.01)

    def thaw(self) -> None:
        try:
            _write(self.paths()["freezer"] / "freezer.state", "THAWED")
        except OSError:
            pass

    def oom_kills(self) -> int:
        memory = self.paths().get("memory")
        return _keyed(memory / "memory.oom_control").get("oom_kill", 0) if memory else 0

    def remove(self) -> bool:
        removed = True
        for path in self.paths().values():
            try:
                path.rmdir()
            except FileNotFoundError:
                continue
            except OSError:
                removed = False
        return removed


@dataclass
class V1(Containment):
    """Groups under `<hierarchy>/allot/<host>/` in each v1 hierarchy used."""

    bases: dict[str, Path] = field(default_factory=dict)  # controller → directory holding this host's groups

    def group(self, name: str) -> V1Group:
        return V1Group(name=name, containment=self)

    def sweep(self, keep: set[str]) -> None:
        try:
            names = [entry.name for entry in self.bases["freezer"].iterdir() if entry.is_dir()]
        except OSError:
            return
        for name in names:
            group = self.group(name)
            if name not in keep and group.empty():
                group.remove()


def detect(*, host: str, privileged: bool, mounts_text: str | None = None, parent: str = "allot") -> Containment:
    """The best containment this host offers the agent (see the module's docstring)."""
    if not privileged:
        return Containment(kind="none", notes=["the agent is not root: process groups only, no limits"])
    if mounts_text is None:
        try:
            mounts_text = Path("/proc/self/mounts").read_text()
        except OSError:
            mounts_text = ""
    mounts = read_mounts(mounts_text)
    for mount in mounts:
        if mount.version == 2:
            available = set(_read(mount.path / "cgroup.controllers").split())
            if set(V2_CONTROLLERS) <= available:
                return V2(kind="v2", mount=mount.path, base=mount.path / parent / host, limits_memory=True,
                          filters_devices=False,
                          notes=["memory, pids; no device filtering (it needs a BPF program): jobs can open "
                                 "every /dev/nvidia*"])
    bases = {}
    for mount in mounts:
        if mount.version == 1:
            for controller in mount.controllers:
                bases.setdefault(controller, mount.path / parent / host)
    if "freezer" in bases:
        missing = [name for name in V1_CONTROLLERS if name not in bases]
        notes = [", ".join(name for name in V1_CONTROLLERS if name in bases)]
        if "memory" in missing:
            notes.append("no memory hierarchy: memory requests are not enforced")
        if "devices" in missing:
            notes.append("no devices hierarchy: jobs can open every /dev/nvidia*")
        return V1(kind="v1", bases=bases, notes=notes, limits_memory="memory" in bases,
                  filters_devices="devices" in bases)
    return Containment(kind="none", notes=["no usable cgroup hierarchy (v2 with memory and pids, or v1 freezer): "
                                           "process groups only, no limits"])

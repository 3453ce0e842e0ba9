"""The fault file of `simulate --faults`: CSV `time,host,event`, event one of down, up, drain, resume.

What each does to a host, as the on-call actions and health events do live:

- `down`: the host is lost; at the next tick the core ends its jobs
  (`down:<host>`, no grace): resumable ones requeue, others fail.
- `up`: back in service after repair (from any state).
- `drain`: takes no new jobs; the core preempts its unallocated jobs at once
  and its allocated ones as each reaches its minimum runtime, then marks it
  drained (DESIGN rule 7).
- `resume`: back in service after a drain or cordon (from any state but down;
  a down host needs `up`).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from scheduler.core.model import DOWN, DRAINED, DRAINING, UP

from .workload import WorkloadError

EVENTS = ("down", "up", "drain", "resume")


@dataclass(frozen=True)
class Fault:
    time: float
    host: str
    event: str
    # Row number in the file (order of faults at the same time).
    seq: int = 0

    def new_state(self, state: str) -> str:
        """The host's state after this fault."""
        if self.event == "down":
            return DOWN
        if self.event == "up":
            return UP
        if self.event == "drain":
            return state if state in (DOWN, DRAINING, DRAINED) else DRAINING
        return state if state == DOWN else UP


def parse_faults(rows, *, hosts: set[str] | None = None) -> list[Fault]:
    """Check rows (dicts with time, host, event); faults sorted by time, then row. Raise WorkloadError."""
    problems: list[str] = []
    faults: list[Fault] = []
    for number, row in enumerate(rows, 1):
        where = f"faults row {number} (line {number + 1}), column"
        raw_time = (row.get("time") or "").strip()
        host = (row.get("host") or "").strip()
        event = (row.get("event") or "").strip().lower()
        try:
            time = float(raw_time)
            if not math.isfinite(time) or time < 0:
                raise ValueError
        except ValueError:
            problems.append(f"{where} time: {raw_time!r} must be seconds from the start, at least 0")
            time = None
        if not host:
            problems.append(f"{where} host: required")
        elif hosts is not None and host not in hosts:
            problems.append(f"{where} host: {host!r} is not a host of the cluster")
        if event not in EVENTS:
            problems.append(f"{where} event: {event!r} must be one of {', '.join(EVENTS)}")
        if time is not None and host and event in EVENTS:
            faults.append(Fault(int(time) if time == int(time) else time, host, event, number))
    if problems:
        raise WorkloadError(problems)
    return sorted(faults, key=lambda f: (f.time, f.seq))


def read_faults(path: str | Path, *, hosts: set[str] | None = None) -> list[Fault]:
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            names = [n.strip() for n in reader.fieldnames or []]
            missing = [n for n in ("time", "host", "event") if n not in names]
            if missing:
                raise WorkloadError([f"{path}: header lacks {', '.join(missing)} (expected time,host,event)"])
            return parse_faults(({(k or "").strip(): v for k, v in row.items()} for row in reader), hosts=hosts)
    except OSError as error:
        raise WorkloadError([f"{path}: cannot read ({error.strerror})"]) from None


def write_faults(path: str | Path, faults: list[Fault]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["time", "host", "event"])
        for fault in faults:
            time = int(fault.time) if fault.time == int(fault.time) else fault.time
            writer.writerow([time, fault.host, fault.event])

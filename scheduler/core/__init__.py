"""The scheduler's pure core: a snapshot in, decisions out (DESIGN §3).

No Django, no clock, no randomness, no I/O. The live tick and the simulator
both call `schedule(snapshot, now=..., policy=...)`.
"""

from .engine import schedule
from .model import (
    ANY,
    CORDONED,
    DOMAIN,
    DOWN,
    DRAINED,
    DRAINING,
    PREEMPTING,
    PREFERRED,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    RUNNING,
    UP,
    WHOLE_GPU_MILLI,
    Decisions,
    Domain,
    Host,
    HostChange,
    MigGpu,
    MigLayout,
    PendingJob,
    PendingStatus,
    Policy,
    Preemption,
    Reservation,
    RunningJob,
    Snapshot,
    Start,
    Topology,
    Unit,
    protected_until,
    protection,
)
from .placement import choose_fast_lane_hosts

__all__ = [
    "ANY", "CORDONED", "DOMAIN", "DOWN", "DRAINED", "DRAINING", "PREEMPTING", "PREFERRED", "PRIORITY_HIGH",
    "PRIORITY_LOW", "PRIORITY_NORMAL", "RUNNING", "UP", "WHOLE_GPU_MILLI", "Decisions", "Domain", "Host",
    "HostChange", "MigGpu", "MigLayout", "PendingJob", "PendingStatus", "Policy", "Preemption", "Reservation",
    "RunningJob", "Snapshot", "Start", "Topology", "Unit", "choose_fast_lane_hosts", "protected_until", "protection",
    "schedule",
]

"""`simulate --policy NAME`: decision functions with the signature of `core.schedule`.

- `allot`: the product's scheduler, `scheduler.core.schedule`, unchanged.
- `fifo`: first come, first served, first-fit gang placement, no preemption.
- `priority`: Ai2's former scheduler: two priority levels, jobs may opt out
  of preemption, a per-project cap on non-preemptible GPUs.
- `node-level`: a topology-blind scheduler (Kubernetes' default spreading
  score over hosts); a `domain` job still lands in one domain.

All are pure functions in `scheduler.core` (`baselines.py` for the three
baselines), so a comparison is one flag apart and runs the same simulator.
"""

from __future__ import annotations

from scheduler.core import schedule
from scheduler.core.baselines import fifo_first_fit, node_level, priority_levels

POLICIES = {
    "allot": schedule,
    "fifo": fifo_first_fit,
    "priority": priority_levels,
    "node-level": node_level,
}


def decision_function(name: str):
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})") from None

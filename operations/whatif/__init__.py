"""The budget what-if: the next 7 days simulated from the live state, without and with a request's change.

A manager deciding a request wants to know what the change would do. This
package reads the cluster as it is now, plays the next `HORIZON` seconds in the
discrete-event simulator (`scheduler.sim`, the same core the live tick calls)
twice — with the shares as they are, and with the request's unit at the share
tried — and reports, for the requesting unit, its siblings and its parent,
the expected usage ratio and p90 wait on both sides.

Three modules, each importing only the ones before it:

- `readers`: the live state at one moment `now` as both sides' inputs (`build_inputs`: the snapshot, the
  usage history, the running jobs, the queue, last week's arrivals replayed, how long each job runs), and what
  a cached result is valid for (`state_key`);
- `comparison`: both sides simulated and compared, with the control run's noise (`simulate_both`, `what_if`);
- `workflow`: the services the pages, the API and the task call (`what_if_request`, `what_if_submit`,
  `what_if_run`), each status change logged.

Deterministic: the same database and `now` give the same results (every order
is by time then id; the simulator has no randomness).
"""

from .comparison import simulate_both, what_if
from .readers import (
    CONTROL_SHIFT,
    DAY,
    DECISION_SECONDS,
    DEFAULT_DURATION,
    HORIZON,
    POLICY,
    QUEUED,
    REPLAY_WINDOW,
    REPLAYED,
    RUNNING,
    Durations,
    Replay,
    WhatIfInputs,
    build_inputs,
    finished_run_seconds,
    shares_digest,
    state_key,
    usage_history,
)
from .workflow import STALE_AFTER, WORKER_ACTOR, what_if_request, what_if_run, what_if_submit

__all__ = [
    "CONTROL_SHIFT", "DAY", "DECISION_SECONDS", "DEFAULT_DURATION", "HORIZON", "POLICY", "QUEUED", "REPLAYED",
    "REPLAY_WINDOW", "RUNNING", "STALE_AFTER", "WORKER_ACTOR", "Durations", "Replay", "WhatIfInputs",
    "build_inputs", "finished_run_seconds", "shares_digest", "simulate_both", "state_key", "usage_history",
    "what_if", "what_if_request", "what_if_run", "what_if_submit",
]

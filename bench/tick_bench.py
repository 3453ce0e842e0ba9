"""How long one scheduler tick takes (DESIGN §6 "tick at scale": 16k GPUs, 20k pending, ≤ 0.25 s).

    .venv/bin/python bench/tick_bench.py [--runs N] [--seed S] [--sizes 1024,4096,16384] [--json]

Issue 15's sizes, with how the time grows from each size to the next (the
`× prev` column): `--sizes 1024,4096,16384,65536` (64k GPUs, 80k pending).

For each cluster size it builds a seeded synthetic snapshot (bench/synthetic.py),
lets it settle into the state a live cluster holds between ticks, and times
`scheduler.core.schedule` and the FIFO first-fit baseline on that same
snapshot: the median CPU time (time.process_time, garbage collector on) of
N runs each. The *cold* column times the first tick on the raw synthetic
state, which has to rebalance it (hundreds of preemptions): a worst case.

`schedule(snapshot)` builds the scheduler's state from the snapshot (the
capacity index, the queues, the org tree) and decides: the *tick s* column,
what the live tick pays today. The *kept s* column times a decision on a
kept `ClusterState` (`engine.decide`, as the simulator and a leader keeping
its state between ticks use it), built once from the same snapshot and
decided on once before the timed runs (a kept state has ticked before); each
timed run decides one tick later (`now` + k × tick), so the usage is summed
again, and commits nothing, so every run decides on the same state. What the
events between two ticks cost is not in it. Its first decision is checked to
equal `schedule`'s.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.synthetic import settle, synthetic_snapshot  # noqa: E402
from scheduler.core import schedule  # noqa: E402
from scheduler.core.baselines import fifo_first_fit  # noqa: E402
from scheduler.core.engine import decide  # noqa: E402
from scheduler.core.state import ClusterState  # noqa: E402

TARGET_SECONDS = 0.25  # at 16,384 GPUs
KEPT_TARGET_SECONDS = 0.05  # a decision on a kept state at 16,384 GPUs (issue 15)


def cpu_seconds(function, snapshot, now, policy, runs: int):
    times = []
    decisions = None
    for _ in range(runs):
        started = time.process_time()
        decisions = function(snapshot, now=now, policy=policy)
        times.append(time.process_time() - started)
    return statistics.median(times), decisions


def kept_cpu_seconds(snapshot, now, policy, runs: int, expected) -> float:
    """Median CPU time of a decision on a kept state (see the module docstring)."""
    state = ClusterState.from_snapshot(snapshot)
    first = decide(state, now=now, policy=policy, commit=False)
    if first != expected:
        raise AssertionError("the kept state decided otherwise than schedule() on the same snapshot")
    times = []
    for k in range(1, runs + 1):
        started = time.process_time()
        decide(state, now=now + k * policy.tick, policy=policy, commit=False)
        times.append(time.process_time() - started)
    return statistics.median(times)


def measure(gpus: int, *, seed: int, runs: int) -> dict:
    raw, now, policy = synthetic_snapshot(gpus, seed)
    cold_time, cold = cpu_seconds(schedule, raw, now, policy, max(1, runs // 2))
    cold_preemptions = len(cold.preemptions)
    snapshot, now = settle(raw, now, policy)
    # Time the tick with only its snapshot alive, as a live tick would: the
    # garbage collector's passes cost in proportion to every object alive.
    del raw, cold
    gc.collect()
    allot_time, decisions = cpu_seconds(schedule, snapshot, now, policy, runs)
    kept_time = kept_cpu_seconds(snapshot, now, policy, runs, decisions)
    gc.collect()
    fifo_time, fifo = cpu_seconds(fifo_first_fit, snapshot, now, policy, runs)
    return {
        "gpus": sum(len(h.gpus) for h in snapshot.topology.hosts),
        "pending": len(snapshot.pending),
        "running": len(snapshot.running),
        "tick_seconds": round(allot_time, 4),
        "kept_seconds": round(kept_time, 4),
        "starts": len(decisions.starts),
        "preemptions": len(decisions.preemptions),
        "reservations": len(decisions.reservations),
        "fifo_seconds": round(fifo_time, 4),
        "fifo_starts": len(fifo.starts),
        "ratio_to_fifo": round(allot_time / fifo_time, 1) if fifo_time else None,
        "cold_tick_seconds": round(cold_time, 4),
        "cold_preemptions": cold_preemptions,
    }


COLUMNS = (
    ("GPUs", "gpus"), ("pending", "pending"), ("running", "running"), ("tick s", "tick_seconds"),
    ("kept s", "kept_seconds"),
    ("starts", "starts"), ("preempt", "preemptions"), ("FIFO s", "fifo_seconds"), ("FIFO starts", "fifo_starts"),
    ("× FIFO", "ratio_to_fifo"), ("× prev", "growth"), ("cold tick s", "cold_tick_seconds"),
    ("cold preempt", "cold_preemptions"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sizes", default="1024,4096,16384")
    parser.add_argument("--json", action="store_true", help="print machine-readable results")
    args = parser.parse_args(argv)
    rows = []
    for size in args.sizes.split(","):
        row = measure(int(size), seed=args.seed, runs=args.runs)
        # How the tick grows with the cluster: its time over the previous (smaller) size's.
        row["growth"] = round(row["tick_seconds"] / rows[-1]["tick_seconds"], 1) if rows and rows[-1]["tick_seconds"] \
            else None
        rows.append(row)
        gc.collect()
    if args.json:
        print(json.dumps({"target_seconds_at_16k": TARGET_SECONDS, "kept_target_seconds_at_16k": KEPT_TARGET_SECONDS,
                          "runs": args.runs, "results": rows}, indent=2))
        return 0
    widths = [max(len(title), *(len(str(row[key])) for row in rows)) for title, key in COLUMNS]
    print("  ".join(title.rjust(w) for (title, _), w in zip(COLUMNS, widths, strict=True)))
    for row in rows:
        print("  ".join(str(row[key]).rjust(w) for (_, key), w in zip(COLUMNS, widths, strict=True)))
    print(f"median CPU seconds of {args.runs} runs (time.process_time); target ≤ {TARGET_SECONDS} s at 16k GPUs; "
          f"tick = schedule(snapshot), the state built afresh; kept = a decision on a kept state "
          f"(issue 15's target ≤ {KEPT_TARGET_SECONDS} s at 16k); cold = first tick on the unsettled synthetic state")
    return 0


if __name__ == "__main__":
    sys.exit(main())

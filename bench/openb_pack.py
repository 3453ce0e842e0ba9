"""Reproduce the FGD paper's packing experiment on the openb trace.

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent", USENIX ATC '23; protocol as in their
simulator (hkust-adsl/kubernetes-scheduler-simulator, ``-tune 1.3
--shuffle-pod=true``, seeds 42..51):

1. the task list is shuffled; then tasks drawn from it with replacement are
   appended until the next draw would push the total GPU request
   (``num_gpu * gpu_milli``; CPU-only tasks count 0 but are kept and placed)
   past 1.3 x the cluster's GPUs. (A list already above the target loses
   random tasks instead.) The node order is shuffled too.
2. tasks are placed one at a time, no departures; a task that fits nowhere
   is dropped.
3. after each task, record (arrived GPU request, allocated milli-GPU); the
   figure at level L % is the mean allocation over the tasks whose arrived
   request rounds to L % of capacity (as the paper's analysis script does),
   in percent of the cluster's milli-GPUs.

FGD's target workload is the original task list (before resampling).
Ties between equally scored nodes go to the first node in the (seeded,
shuffled) node order, as in the simulator, whose scheduler was patched to
pick the smallest node name, names carrying a random per-seed prefix. Only
``random`` draws (a seeded ``random.Random`` passed in).

Usage::

    python bench/openb_pack.py --policy fgd --seeds 42-51
    python bench/openb_pack.py --policy allot --seeds 42 --json
    python bench/openb_pack.py --all [--quick] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.openb_data import (  # noqa: E402
    DEFAULT_WORKLOAD_CSV,
    LEVELS,
    NODES_CSV,
    PUBLISHED_CSV,
    TRACE_DIR,
    load_nodes,
    load_published,
    load_tasks,
    workload_files,
    workload_name,
)
from scheduler.core.packing import (  # noqa: E402
    POLICIES,
    NodeState,
    Packer,
    TargetWorkload,
    Task,
)

INFLATION = 1.3
QUICK_SEEDS = (42, 43, 44)

# The trace's published shape (README of ../shared/traces).
EXPECTED_DEFAULT_TASKS = 8152
EXPECTED_GPU_NODES = 1213
EXPECTED_GPUS = 6212


def parse_seeds(text: str) -> list[int]:
    """Seeds from ranges and lists: ``42-51``, ``42,45,50``, ``42-44,50``."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not (lo.isdigit() and (not sep or hi.isdigit())):
            raise argparse.ArgumentTypeError(f"bad seed {part!r}: use 42, 42-51 or 42,43")
        if sep and int(hi) < int(lo):
            raise argparse.ArgumentTypeError(f"empty seed range {part!r}")
        seeds.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    if not seeds:
        raise argparse.ArgumentTypeError("no seeds given")
    return seeds


def check_trace(nodes: list[NodeState], default_tasks: list[Task]) -> None:
    """Fail loudly if the trace is not the published one."""
    gpus = sum(len(n.gpu_free) for n in nodes)
    problems = []
    if len(default_tasks) != EXPECTED_DEFAULT_TASKS:
        problems.append(f"{len(default_tasks)} tasks in the default list, expected {EXPECTED_DEFAULT_TASKS}")
    if len(nodes) != EXPECTED_GPU_NODES:
        problems.append(f"{len(nodes)} GPU nodes, expected {EXPECTED_GPU_NODES}")
    if gpus != EXPECTED_GPUS:
        problems.append(f"{gpus} GPUs, expected {EXPECTED_GPUS}")
    if problems:
        raise SystemExit("openb trace check failed: " + "; ".join(problems))


def inflate(tasks: list[Task], capacity_milli: int, rng: random.Random, ratio: float = INFLATION) -> list[Task]:
    """Shuffle, then resample to ``ratio`` x capacity of GPU request."""
    stream = list(tasks)
    rng.shuffle(stream)
    target = ratio * capacity_milli
    total = sum(t.gpu_request_milli for t in stream)
    if total > target:
        while total > target and stream:
            total -= stream.pop(rng.randrange(len(stream))).gpu_request_milli
        return stream
    while True:
        task = tasks[rng.randrange(len(tasks))]
        if total + task.gpu_request_milli > target:
            return stream
        stream.append(task)
        total += task.gpu_request_milli


def alloc_at_levels(events: list[tuple[int, int]], capacity_milli: int, levels=LEVELS) -> dict[int, float]:
    """Mean allocation (% of milli-GPU) over events whose arrival rounds to each level."""
    by_level: dict[int, list[float]] = {}
    for arrived, used in events:
        level = round(arrived / capacity_milli * 100)
        by_level.setdefault(level, []).append(round(used / capacity_milli * 100, 2))
    out = {}
    for level in levels:
        values = by_level.get(level)
        if not values:
            values = [v for lv in (level - 1, level, level + 1) for v in by_level.get(lv, [])]
        out[level] = round(statistics.fmean(values), 2) if values else float("nan")
    return out


@dataclass(frozen=True)
class RunResult:
    workload: str
    policy: str
    seed: int
    alloc_pct: dict[int, float]
    placed: int
    failed: int
    seconds: float


def run_once(
    nodes: list[NodeState],
    tasks: list[Task],
    policy: str,
    seed: int,
    *,
    workload: str = "",
    ratio: float = INFLATION,
) -> RunResult:
    started = time.perf_counter()
    capacity = sum(1000 * len(n.gpu_free) for n in nodes)
    stream = inflate(tasks, capacity, random.Random(f"{seed}:tasks"), ratio)
    node_order = list(nodes)
    random.Random(f"{seed}:nodes").shuffle(node_order)
    draws = random.Random(f"{seed}:draws") if policy == "random" else None
    packer = Packer(
        node_order,
        policy=policy,
        workload=TargetWorkload.from_tasks(tasks),
        rng=draws,
    )
    arrived = 0
    placed = failed = 0
    events = []
    for task in stream:
        arrived += task.gpu_request_milli
        if packer.place(task) is None:
            failed += 1
        else:
            placed += 1
        events.append((arrived, packer.used_gpu_milli))
    return RunResult(
        workload,
        policy,
        seed,
        alloc_at_levels(events, capacity),
        placed,
        failed,
        time.perf_counter() - started,
    )


def mean_levels(results: list[RunResult]) -> dict[int, float]:
    return {level: round(statistics.fmean(r.alloc_pct[level] for r in results), 2) for level in LEVELS}


# ------------------------------------------------------------ workers


_NODES: dict[str, list[NodeState]] = {}
_TASKS: dict[str, list[Task]] = {}


def _nodes(path: str) -> list[NodeState]:
    if path not in _NODES:
        _NODES[path] = load_nodes(path)
    return _NODES[path]


def _tasks(path: str) -> list[Task]:
    if path not in _TASKS:
        _TASKS[path] = load_tasks(path)
    return _TASKS[path]


def _work(job: tuple[str, str, str, int]) -> RunResult:
    nodes_path, workload_path, policy, seed = job
    return run_once(_nodes(nodes_path), _tasks(workload_path), policy, seed, workload=workload_name(workload_path))


def run_jobs(jobs: list[tuple[str, str, str, int]], processes: int) -> list[RunResult]:
    if processes <= 1 or len(jobs) <= 1:
        return [_work(j) for j in jobs]
    with multiprocessing.Pool(processes) as pool:
        return list(pool.imap_unordered(_work, jobs, chunksize=1))


# ------------------------------------------------------------ output


def _fmt(x: float | None) -> str:
    return "   -  " if x is None else f"{x:6.2f}"


def print_table(rows: list[tuple[str, str, dict[int, float], dict[int, float] | None]], out=sys.stdout) -> None:
    """rows: (workload, policy, ours, published or None)."""
    header = f"{'workload':<28} {'policy':<8}" + "".join(
        f" | {'ours ' + str(lv):>7} {'paper':>6} {'delta':>6}" for lv in LEVELS
    )
    print(header, file=out)
    print("-" * len(header), file=out)
    for workload, policy, ours, paper in rows:
        cells = []
        for lv in LEVELS:
            p = paper.get(lv) if paper else None
            d = None if p is None else ours[lv] - p
            cells.append(f" | {ours[lv]:7.2f} {_fmt(p)} {'' if d is None else f'{d:+6.2f}':>6}")
        print(f"{workload:<28} {policy:<8}" + "".join(cells), file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default=str(NODES_CSV), help="node list CSV (default: %(default)s)")
    parser.add_argument("--workload", default=str(DEFAULT_WORKLOAD_CSV), help="pod list CSV")
    parser.add_argument("--policy", default="allot", help=f"one of {', '.join(POLICIES)}, or a comma list")
    parser.add_argument("--seeds", type=parse_seeds, default=None, help="e.g. 42-51 or 42,43 (default 42-51)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (one policy)")
    parser.add_argument("--all", action="store_true", help="every workload in the trace folder x every policy")
    parser.add_argument("--quick", action="store_true", help=f"fewer seeds ({QUICK_SEEDS[0]}-{QUICK_SEEDS[-1]})")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default %(default)s)")
    args = parser.parse_args(argv)

    seeds = args.seeds or (list(QUICK_SEEDS) if args.quick else list(range(42, 52)))
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    for p in policies:
        if p not in POLICIES:
            parser.error(f"unknown policy {p!r}; choose from {', '.join(POLICIES)}")
    if args.all:
        policies = list(POLICIES)
    if args.json and (len(policies) != 1 or args.all):
        parser.error("--json reports one policy on one workload")

    nodes = _nodes(args.nodes)
    if Path(args.nodes).resolve() == NODES_CSV.resolve():
        check_trace(nodes, _tasks(str(DEFAULT_WORKLOAD_CSV)))
    workloads = [str(p) for p in workload_files(Path(args.workload).parent)] if args.all else [args.workload]
    published = load_published(PUBLISHED_CSV) if PUBLISHED_CSV.is_file() else {}

    jobs = [(args.nodes, w, p, s) for w in workloads for p in policies for s in seeds]
    started = time.perf_counter()
    results = run_jobs(jobs, args.jobs)
    wall = time.perf_counter() - started

    grouped: dict[tuple[str, str], list[RunResult]] = {}
    for r in results:
        grouped.setdefault((r.workload, r.policy), []).append(r)

    if args.json:
        (workload, policy), runs = next(iter(grouped.items()))
        means = mean_levels(runs)
        print(json.dumps({"policy": policy, "workload": workload, "alloc_pct": {str(k): v for k, v in means.items()}}))
        return 0

    rows = []
    for w in workloads:
        for p in policies:
            runs = grouped[(workload_name(w), p)]
            paper = published.get((workload_name(w), p))
            rows.append((workload_name(w), p, mean_levels(runs), paper.alloc_pct if paper else None))
    print(f"openb packing, {len(seeds)} seeds ({seeds[0]}..{seeds[-1]}), trace {TRACE_DIR}")
    print(
        "ours = mean % of milli-GPUs allocated when the arrived GPU request reaches each level; "
        "paper = Weng et al. ATC '23 (allot: vs the paper's FGD)"
    )
    if any(p == "allot" for p in policies):
        rows = [
            (w, p, ours, paper if paper or p != "allot" else _paper_fgd(published, w)) for w, p, ours, paper in rows
        ]
    print_table(rows)
    per_run = statistics.fmean(r.seconds for r in results)
    print(f"\n{len(results)} runs in {wall:.1f} s wall ({per_run:.1f} s per run, {args.jobs} processes)")
    return 0


def _paper_fgd(published, workload: str) -> dict[int, float] | None:
    entry = published.get((workload, "fgd"))
    return entry.alloc_pct if entry else None


if __name__ == "__main__":
    raise SystemExit(main())

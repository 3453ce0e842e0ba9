"""How close Allot's placement comes to the best possible on small NVL72 packing instances (OR-Tools CP-SAT).

    .venv/bin/python bench/nvl72_optimum.py [--instances 12] [--seed 1] [--racks 2] [--time-limit 20] [--json]

An instance is static: a few GB200 NVL72 racks (18 trays × 4 GPUs) with failed
trays, and a set of jobs asking more GPUs than the racks have: mostly 1-3 GPU
jobs (`any`), the rest 16-72 GPUs as whole 4-GPU trays in one rack (`domain`,
`gpus_per_host: 4`), in a random submission order. CP-SAT finds the most GPUs
that can be placed at once (a small job on one tray, never beside a large
job's trays; a large job on whole trays of one rack). Allot places the same
jobs with `scheduler.core.schedule` in one tick, all pending at once in
submission order (unallocated, so no reservation holds GPUs back in a world
where nothing ever ends); so do the node-level and FIFO baselines. The table
gives each one's placed GPUs over the optimum.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.core import DOMAIN, UP, Domain, Host, PendingJob, Policy, Snapshot, Topology, Unit, schedule  # noqa: E402
from scheduler.core.baselines import fifo_first_fit, node_level  # noqa: E402

TRAY_GPUS = 4
TRAYS = 18


@dataclass(frozen=True)
class Instance:
    name: str
    # Rack -> healthy trays.
    racks: dict[str, list[int]]
    # (job id, GPUs, whole trays or None for a small job)
    jobs: list[tuple[str, int, int | None]]

    @property
    def capacity(self) -> int:
        return TRAY_GPUS * sum(len(trays) for trays in self.racks.values())

    @property
    def demand(self) -> int:
        return sum(gpus for _, gpus, _ in self.jobs)


def make_instance(seed: int, racks: int = 2, small_share: float = 0.4, large_share: float = 1.0) -> Instance:
    """Racks with 0-2 failed trays each; small jobs asking `small_share` of the GPUs (most jobs by count), large
    ones `large_share`: together more than the racks hold, in a random order."""
    rng = random.Random(seed)
    healthy = {}
    for r in range(1, racks + 1):
        failed = set(rng.sample(range(1, TRAYS + 1), rng.choice([0, 1, 1, 2])))
        healthy[f"nvl72-{r:02d}"] = [t for t in range(1, TRAYS + 1) if t not in failed]
    capacity = TRAY_GPUS * sum(len(t) for t in healthy.values())
    jobs: list[tuple[str, int, int | None]] = []
    while sum(g for _, g, w in jobs if w is None) < small_share * capacity:
        jobs.append((f"s{len(jobs):03d}", rng.choice([1, 1, 2, 2, 3]), None))
    while sum(g for _, g, w in jobs if w is not None) < large_share * capacity:
        trays = rng.choice([4, 4, 6, 8, 12, 16, 18])
        jobs.append((f"L{len(jobs):03d}", TRAY_GPUS * trays, trays))
    rng.shuffle(jobs)
    return Instance(f"seed{seed}", healthy, jobs)


def optimum(instance: Instance, time_limit: float) -> tuple[int, str, float]:
    """Most GPUs placeable at once, by CP-SAT: (GPUs, solver status, seconds)."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    trays = [(rack, t) for rack, healthy in instance.racks.items() for t in healthy]
    small = [(job, gpus) for job, gpus, whole in instance.jobs if whole is None]
    large = [(job, gpus, whole) for job, gpus, whole in instance.jobs if whole is not None]
    x = {(job, tray): model.NewBoolVar(f"x_{job}_{tray[0]}_{tray[1]}") for job, _ in small for tray in trays}
    used = {tray: model.NewBoolVar(f"u_{tray[0]}_{tray[1]}") for tray in trays}
    y = {(job, rack): model.NewBoolVar(f"y_{job}_{rack}") for job, _, _ in large for rack in instance.racks}
    for job, _ in small:
        model.Add(sum(x[job, tray] for tray in trays) <= 1)
    for tray in trays:
        model.Add(sum(gpus * x[job, tray] for job, gpus in small) <= TRAY_GPUS * used[tray])
    for job, _, _ in large:
        model.Add(sum(y[job, rack] for rack in instance.racks) <= 1)
    for rack, healthy in instance.racks.items():
        rack_trays = [(rack, t) for t in healthy]
        # Trays holding small jobs plus trays of large jobs fit in the rack's healthy trays.
        model.Add(sum(used[tray] for tray in rack_trays) + sum(whole * y[job, rack] for job, _, whole in large)
                  <= len(healthy))
        # Symmetry: trays of a rack are alike; use them in order.
        for a, b in zip(rack_trays, rack_trays[1:], strict=False):
            model.Add(used[a] >= used[b])
    model.Maximize(sum(gpus * x[job, tray] for job, gpus in small for tray in trays)
                   + sum(gpus * y[job, rack] for job, gpus, _ in large for rack in instance.racks))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    began = time.perf_counter()
    status = solver.Solve(model)
    elapsed = time.perf_counter() - began
    bound = int(round(solver.BestObjectiveBound()))
    value = int(round(solver.ObjectiveValue())) if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else 0
    name = solver.StatusName(status)
    return (value if status == cp_model.OPTIMAL else bound), name, elapsed


def snapshot(instance: Instance) -> Snapshot:
    domains, hosts = [], []
    for rack, healthy in instance.racks.items():
        members = []
        for t in range(1, TRAYS + 1):
            name = f"{rack}-h{t:02d}"
            gpus = tuple(f"{name}:{i}" for i in range(TRAY_GPUS)) if t in healthy else ()
            hosts.append(Host(name, rack, "GB200", gpus, state=UP))
            members.append(name)
        domains.append(Domain(rack, tuple(members)))
    pending = tuple(
        PendingJob(job, "p", gpus, 0, True, float(n), n, topology=DOMAIN if whole else "any",
                   gpus_per_host=TRAY_GPUS if whole else None)
        for n, (job, gpus, whole) in enumerate(instance.jobs, 1)
    )
    return Snapshot(Topology(tuple(domains), tuple(hosts)), (Unit("p", None, 100),), (), pending)


def placed(decide, instance: Instance) -> int:
    decisions = decide(snapshot(instance), now=0.0, policy=Policy(explain=False))
    return sum(len(start.gpu_ids) for start in decisions.starts)


def run(instances: int, seed: int, racks: int, time_limit: float) -> dict:
    rows = []
    for n in range(instances):
        instance = make_instance(seed + n, racks)
        best, status, seconds = optimum(instance, time_limit)
        row = {"instance": instance.name, "racks": len(instance.racks), "capacity": instance.capacity,
               "demand": instance.demand, "jobs": len(instance.jobs), "optimum": best, "status": status,
               "solver_seconds": round(seconds, 2)}
        for name, decide in (("allot", schedule), ("node_level", node_level), ("fifo", fifo_first_fit)):
            row[name] = placed(decide, instance)
            row[f"{name}_ratio"] = round(row[name] / best, 4) if best else None
        rows.append(row)
    summary = {f"{name}_ratio_{stat}": round(fn([r[f"{name}_ratio"] for r in rows]), 4)
               for name in ("allot", "node_level", "fifo") for stat, fn in (("mean", statistics.mean), ("min", min))}
    summary["all_optimal"] = all(r["status"] == "OPTIMAL" for r in rows)
    return {"rows": rows, "summary": summary}


COLUMNS = (("instance", "instance"), ("racks", "racks"), ("GPUs", "capacity"), ("asked", "demand"),
           ("jobs", "jobs"), ("optimum", "optimum"), ("status", "status"), ("allot", "allot"),
           ("allot/opt", "allot_ratio"), ("node-level", "node_level"), ("node/opt", "node_level_ratio"),
           ("fifo", "fifo"), ("fifo/opt", "fifo_ratio"), ("CP-SAT s", "solver_seconds"))


def table(result: dict) -> str:
    rows = result["rows"]
    widths = [max(len(title), *(len(str(r[key])) for r in rows)) for title, key in COLUMNS]
    lines = ["  ".join(title.rjust(w) for (title, _), w in zip(COLUMNS, widths, strict=True))]
    lines += ["  ".join(str(r[key]).rjust(w) for (_, key), w in zip(COLUMNS, widths, strict=True)) for r in rows]
    s = result["summary"]
    lines.append(f"allot / optimum: mean {s['allot_ratio_mean']:.2%}, worst {s['allot_ratio_min']:.2%}; "
                 f"node-level: mean {s['node_level_ratio_mean']:.2%}, worst {s['node_level_ratio_min']:.2%}; "
                 f"FIFO first fit: mean {s['fifo_ratio_mean']:.2%} (target: allot within 2 % of the optimum); "
                 f"{'every optimum proven' if s['all_optimal'] else 'some optima are bounds (time limit)'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--racks", type=int, default=2)
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.instances, args.seed, args.racks, args.time_limit)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

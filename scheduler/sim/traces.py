"""Workloads built at run time from public traces, read by path and never copied into the repository.

The trace files live outside the project (default `<repo>/../shared/traces/`;
every command takes the folder as an option). `workloads/README.md` says
where to get them and how to credit them.

- `philly_replay`: Microsoft Philly (Jeon et al., USENIX ATC '19; CC BY 4.0),
  as prepared by Gavel (MIT): per virtual cluster (VC) job arrivals with their
  GPU counts (`gavel_msr_per_vc_arrivals_seed0.csv`), and each job's duration
  drawn, seeded, from the real (duration, GPUs) pairs of the same GPU count
  (`gavel_philly_job_distribution.csv`; jobs over 8 GPUs draw from the 8-GPU
  pairs). The cluster is Philly's VCs' 8-GPU servers (HeliosArtifact's
  `philly_vc.csv`, MIT), scaled to the jobs Gavel kept, shared by all VCs
  with each VC's size as its share; VCs without a size run unallocated. Philly jobs declare no contract, so
  every allocated job gets minimum runtime min(duration, 1 h), is resumable
  and checkpoints every 30 min: an assumption, stated in the table.
- `openb_replay`: Alibaba's openb GPU cluster trace (Weng et al., USENIX ATC
  '23; Apache-2.0) with departures. FGD's protocol places resampled tasks
  with no departures until 130 % of the GPUs are asked; here tasks (real
  CPU, memory, GPU count, GPU fraction, GPU-type constraint and run time,
  `deletion − scheduled`) are resampled, seeded, and arrive as a Poisson
  process offering 1.3 × the GPU capacity, and leave when their run time is
  over. The cluster is a stratified sample of the real node list (each node
  type kept in proportion). Best-effort (BE) tasks run unallocated; the rest
  are one allocated project.
"""

from __future__ import annotations

import csv
import math
import os
import random
from collections import defaultdict
from pathlib import Path

from .generators import DAY, HOUR, MINUTE, Workload
from .workload import SimJob

# ALLOT_TRACES overrides where the traces live (CI sets it when the clone is not beside ../shared).
DEFAULT_TRACES = Path(os.environ.get("ALLOT_TRACES")
                      or Path(__file__).resolve().parents[2].parent / "shared" / "traces")


class TraceMissing(FileNotFoundError):
    pass


def _read(path: Path) -> list[dict]:
    if not path.exists():
        raise TraceMissing(f"{path} not found: get the public traces (see workloads/README.md) or pass --traces")
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


# ---------------------------------------------------------------- Philly


def philly_replay(traces: str | Path = DEFAULT_TRACES, *, seed: int = 11, days: float | None = 30,
                  scale: float = 0.3) -> Workload:
    """Philly's arrivals per VC on its VCs' servers (see the module docstring); `days` keeps the first days.

    Gavel's file holds 15,264 of Philly's jobs (at most 2,000 per VC): on the VCs' full 352 servers they
    offer a quarter of the GPU time, so every VC keeps `scale` of its servers (30 %: 106 servers, 848
    GPUs, about 0.9 × the GPU time asked over the first 30 days); VC sizes stay the shares.
    """
    folder = Path(traces) / "philly"
    rng = random.Random(seed)
    sizes = {row["vc"]: int(row["node num"]) for row in _read(folder / "philly_vc_nodes_from_HeliosArtifact.csv")}
    pairs: dict[int, list[float]] = defaultdict(list)
    for row in _read(folder / "gavel_philly_job_distribution.csv"):
        pairs[int(row["num_gpus"])].append(float(row["duration_s"]))
    pools = sorted(pairs)
    arrivals = _read(folder / "gavel_msr_per_vc_arrivals_seed0.csv")
    arrivals.sort(key=lambda r: (float(r["arrival_time_s"]), r["vc"], int(r["job_index"])))
    nodes = sum(max(1, round(n * scale)) for n in sizes.values())
    name = "philly"
    total = sum(sizes.values())
    # Shares in hundredths of a percent that add up to at most 100.
    shares = {vc: math.floor(10000 * n / total) / 100 for vc, n in sizes.items()}
    jobs = []
    for number, row in enumerate(arrivals, 1):
        submit = float(int(float(row["arrival_time_s"])))
        if days is not None and submit >= days * DAY:
            break
        gpus = int(row["num_gpus"])
        pool = pairs[max([p for p in pools if p <= gpus] or [pools[0]])]
        duration = max(60.0, float(int(rng.choice(pool))))
        vc = f"vc-{row['vc']}"
        allocated = row["vc"] in sizes
        min_runtime = float(min(int(duration), int(HOUR))) if allocated else 0.0
        jobs.append(SimJob(f"{row['vc']}-{int(row['job_index']):04d}", submit, vc, gpus, min_runtime, True, duration,
                           checkpoint_every=30 * MINUTE, seq=number))
    cluster = {
        "name": name,
        "policy": {"tick": "5s", "window": "7d", "max_min_runtime": "8h", "grace_period": "60s",
                   "unallocated_grace": "10s", "executor": "simulated"},
        "domains": [{"name": "philly-{:03d}", "count": nodes, "hosts": 1, "gpus_per_host": 8, "gpu_type": "P100"}],
    }
    units = [{"name": f"vc-{vc}", "share": {name: shares[vc]}} for vc in sorted(sizes)]
    units += [{"name": vc, "description": "no VC size in the trace: unallocated"}
              for vc in sorted({job.project for job in jobs} - {f"vc-{v}" for v in sizes})]
    span = f"first {days:g} days" if days is not None else "all arrivals"
    return Workload(
        name=name,
        description=(f"Philly replay ({span}): {len(jobs):,} jobs of {len({j.project for j in jobs})} VCs on "
                     f"{nodes} 8-GPU servers ({8 * nodes:,} GPUs, {scale:.0%} of the VCs' servers), VC sizes as "
                     f"shares"),
        cluster=cluster, org={"units": units}, jobs=jobs,
        notes={"seed": seed, "assumption": "minimum runtime min(duration, 1h), resumable, checkpoint 30 min"},
    )


# ---------------------------------------------------------------- openb


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")


def openb_replay(traces: str | Path = DEFAULT_TRACES, *, seed: int = 13, node_fraction: float = 0.05,
                 days: float = 2.0, load: float = 1.3) -> Workload:
    """openb tasks with departures on a sample of its nodes (see the module docstring)."""
    folder = Path(traces) / "openb-2023"
    rng = random.Random(seed)
    nodes = _read(folder / "openb_node_list_gpu_node.csv")
    kinds: dict[tuple, int] = defaultdict(int)
    for node in nodes:
        kinds[(node["model"], int(node["gpu"]), int(node["cpu_milli"]) // 1000,
               int(node["memory_mib"]) // 1024)] += 1
    domains = []
    gpus_total = 0
    for (model, gpus, cpus, memory), count in sorted(kinds.items()):
        kept = max(1, round(count * node_fraction))
        domains.append({"name": f"{_slug(model)}-{gpus}g-{cpus}c-{{:03d}}", "count": kept, "hosts": 1,
                        "gpus_per_host": gpus, "gpu_type": model, "cpus_per_host": cpus,
                        "memory_gib_per_host": memory})
        gpus_total += kept * gpus
    tasks = []
    for row in _read(folder / "openb_pod_list_default.csv"):
        start = int(row["scheduled_time"] or row["creation_time"])
        duration = max(60, int(row["deletion_time"]) - start)
        gpus = int(row["num_gpu"])
        milli = int(row["gpu_milli"]) if gpus == 1 else 1000
        cpus = max(1, math.ceil(int(row["cpu_milli"]) / 1000))
        memory = max(1, math.ceil(int(row["memory_mib"]) / 1024))
        types = frozenset(t for t in (row["gpu_spec"] or "").split("|") if t)
        tasks.append((gpus, milli, cpus, memory, types, row["qos"], duration))
    span = days * DAY
    mean_gpu_seconds = sum((g if g != 1 else m / 1000) * min(d, span) for g, m, *_, d in tasks) / len(tasks)
    count = round(load * gpus_total * span / mean_gpu_seconds)
    times = sorted(float(int(rng.uniform(0, span))) for _ in range(count))
    jobs = []
    for number, submit in enumerate(times, 1):
        gpus, milli, cpus, memory, types, qos, duration = rng.choice(tasks)
        duration = float(min(duration, int(span)))
        allocated = qos != "BE"
        jobs.append(SimJob(
            f"t{number:06d}", submit, "online" if allocated else "best-effort", gpus,
            float(min(int(duration), int(HOUR))) if allocated else 0.0, True, duration,
            gpu_milli=milli, gpu_types=types, cpus=cpus, memory_gib=memory, seq=number,
        ))
    name = "openb"
    cluster = {
        "name": name,
        "policy": {"tick": "5s", "window": "7d", "max_min_runtime": "8h", "grace_period": "60s",
                   "unallocated_grace": "10s", "executor": "simulated"},
        "domains": domains,
    }
    org = {"units": [{"name": "online", "share": {name: 100}},
                     {"name": "best-effort", "description": "BE tasks: unallocated"}]}
    return Workload(
        name=name,
        description=(f"openb replay with departures: {len(jobs):,} tasks resampled from the 8,152 of the trace, "
                     f"Poisson arrivals offering {load:g}× the GPUs over {days:g} days, on a {node_fraction:.0%} "
                     f"stratified sample of its nodes ({sum(d['count'] for d in domains)} nodes, {gpus_total} GPUs)"),
        cluster=cluster, org=org, jobs=jobs, notes={"seed": seed, "load": load},
    )

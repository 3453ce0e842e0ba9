"""Loaders for the Alibaba "openb" GPU cluster trace (2023).

The trace ships in ``<repo>/../shared/traces/openb-2023/`` (see the README
there): ``openb_node_list_gpu_node.csv`` (1,213 GPU nodes, 6,212 GPUs), the
pod lists ``openb_pod_list_*.csv`` (the default one has 8,152 tasks) and
``fgd_atc23_published_alloc_ratio.csv`` with the results published by
Weng et al., USENIX ATC '23 (Apache-2.0, hkust-adsl/kubernetes-scheduler-
simulator).

Conversions follow the simulator's ``pod_csv_to_yaml.py``: ``gpu_milli``
above 1000 counts as 1000, tasks without GPUs carry no GPU milli, and
``gpu_spec`` ("V100M16|V100M32") is the set of allowed GPU models.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from scheduler.core.packing import WHOLE_GPU_MILLI, NodeState, Task

REPO = Path(__file__).resolve().parents[1]
# ALLOT_TRACES overrides where the traces live (CI sets it when the clone is not beside ../shared).
TRACE_DIR = Path(os.environ.get("ALLOT_TRACES") or REPO.parent / "shared" / "traces") / "openb-2023"
NODES_CSV = TRACE_DIR / "openb_node_list_gpu_node.csv"
DEFAULT_WORKLOAD_CSV = TRACE_DIR / "openb_pod_list_default.csv"
PUBLISHED_CSV = TRACE_DIR / "fgd_atc23_published_alloc_ratio.csv"

LEVELS = (90, 100, 110, 130)


class TraceMissing(FileNotFoundError):
    pass


def _rows(path: Path) -> list[dict[str, str]]:
    path = Path(path)
    if not path.is_file():
        raise TraceMissing(
            f"trace file {path} not found: the openb trace is expected in "
            f"{TRACE_DIR} (the repository's ../shared/traces/openb-2023/)"
        )
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def load_nodes(path: Path | str = NODES_CSV) -> list[NodeState]:
    """Nodes as empty free states, in file order."""
    nodes = []
    for row in _rows(Path(path)):
        gpus = int(row["gpu"])
        model = row["model"].strip() if gpus else ""
        if model.lower() == "nan":
            model = ""
        nodes.append(
            NodeState(
                name=row["sn"],
                model=model,
                cpu_milli=int(row["cpu_milli"]),
                memory_mib=int(row["memory_mib"]),
                gpu_free=(WHOLE_GPU_MILLI,) * gpus,
            )
        )
    return nodes


def load_tasks(path: Path | str = DEFAULT_WORKLOAD_CSV) -> list[Task]:
    tasks = []
    for row in _rows(Path(path)):
        num_gpu = int(row["num_gpu"])
        milli = min(int(row["gpu_milli"]), WHOLE_GPU_MILLI) if num_gpu else 0
        spec = row.get("gpu_spec") or ""
        models = frozenset(m for m in spec.split("|") if m and m.lower() != "nan")
        tasks.append(
            Task(
                cpu_milli=int(row["cpu_milli"]),
                memory_mib=int(row["memory_mib"]),
                num_gpu=num_gpu,
                gpu_milli=milli,
                gpu_models=models if num_gpu else frozenset(),
            )
        )
    return tasks


def workload_files(folder: Path | str = TRACE_DIR) -> list[Path]:
    files = sorted(Path(folder).glob("openb_pod_list_*.csv"))
    if not files:
        raise TraceMissing(f"no openb_pod_list_*.csv in {folder}")
    return files


def workload_name(path: Path | str) -> str:
    return Path(path).stem


# The published table names policies "05-BestFit"; ours are lower case.
_PUBLISHED_POLICY = {"01-Random": "random", "05-BestFit": "bestfit", "06-FGD": "fgd"}


@dataclass(frozen=True)
class Published:
    alloc_pct: dict[int, float]
    n_seeds: int


def load_published(path: Path | str = PUBLISHED_CSV) -> dict[tuple[str, str], Published]:
    """(workload, policy) -> the paper's means over seeds, in percent."""
    out = {}
    for row in _rows(Path(path)):
        policy = _PUBLISHED_POLICY.get(row["policy"])
        if policy is None:
            continue
        pct = {level: float(row[f"alloc_pct_at_arrived_{level}"]) for level in LEVELS}
        out[(row["workload"], policy)] = Published(pct, int(row["n_seeds"]))
    return out

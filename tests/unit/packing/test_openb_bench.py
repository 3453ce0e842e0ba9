"""The openb trace loader and the FGD-paper harness (bench/openb_pack.py)."""

from __future__ import annotations

import argparse
import json
import math
import random

import pytest

from bench import openb_data, openb_pack
from bench.openb_pack import alloc_at_levels, inflate, parse_seeds, run_once
from scheduler.core.packing import Task


def _trace_dir():
    # The real trace, found through the repo-relative default path. Missing
    # is a failure, not a skip: the benchmark and this check depend on it.
    assert openb_data.TRACE_DIR.is_dir(), (
        f"openb trace folder not found at {openb_data.TRACE_DIR} "
        "(expected <repo>/../shared/traces/openb-2023/ with the FGD paper's CSVs)"
    )
    return openb_data.TRACE_DIR


def test_it_loads_the_published_trace():
    folder = _trace_dir()
    assert openb_data.NODES_CSV.parent == folder
    nodes = openb_data.load_nodes()
    tasks = openb_data.load_tasks()
    assert len(tasks) == 8152
    assert len(nodes) == 1213
    assert sum(len(n.gpu_free) for n in nodes) == 6212
    assert all(n.gpu_free and n.model for n in nodes)
    openb_pack.check_trace(nodes, tasks)  # the bench's own check agrees
    assert len(openb_data.workload_files(folder)) == 17
    published = openb_data.load_published()
    assert published[("openb_pod_list_default", "fgd")].alloc_pct[130] == 95.39


def test_a_missing_trace_fails_loudly(tmp_path):
    with pytest.raises(openb_data.TraceMissing, match="openb trace is expected"):
        openb_data.load_nodes(tmp_path / "nope.csv")


NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
node-a,2000,65536,2,G1
node-b,10000,65536,1,G2
"""
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)


def _tiny_trace(tmp_path):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(NODES_CSV)
    pods = tmp_path / "pods.csv"
    rows = [f"pod-{i},1000,1024,1,300,,LS,Running,0,1,0\n" for i in range(8)]
    pods.write_text(POD_HEADER + "".join(rows))
    return nodes, pods


def test_the_harness_on_a_tiny_trace(tmp_path):
    """Worked by hand.

    Capacity 3 GPUs = 3000 milli. Eight 300-milli tasks (1 core each) ask
    2400; resampling appends tasks while the total stays <= 1.3 x 3000 =
    3900: 2700, 3000, 3300, 3600, 3900 -> 13 tasks, task k arrives with
    300 k milli = 10 k % of capacity. node-a has 2 GPUs but 2 cores: 2
    tasks; node-b has 1 GPU and 10 cores: 3 tasks (900 milli). So 5 tasks
    run, 1500 milli = 50 %, whatever the order or policy; each level's
    window holds one task (90 % is the 9th), all after the 5th.
    """
    nodes_csv, pods_csv = _tiny_trace(tmp_path)
    nodes = openb_data.load_nodes(nodes_csv)
    tasks = openb_data.load_tasks(pods_csv)
    for policy in ("allot", "fgd", "bestfit", "random"):
        result = run_once(nodes, tasks, policy, seed=42)
        assert (result.placed, result.failed) == (5, 8)
        assert result.alloc_pct == {90: 50.0, 100: 50.0, 110: 50.0, 130: 50.0}


def test_the_json_output(tmp_path, capsys):
    nodes_csv, pods_csv = _tiny_trace(tmp_path)
    code = openb_pack.main(
        [
            "--nodes",
            str(nodes_csv),
            "--workload",
            str(pods_csv),
            "--policy",
            "fgd",
            "--seeds",
            "42,43",
            "--json",
            "--jobs",
            "1",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {
        "policy": "fgd",
        "workload": "pods",
        "alloc_pct": {"90": 50.0, "100": 50.0, "110": 50.0, "130": 50.0},
    }


def test_inflation_keeps_cpu_only_tasks_and_stops_below_the_target():
    gpu = Task(1000, 1024, 1, 500)
    cpu = Task(1000, 1024)
    stream = inflate([gpu, cpu], capacity_milli=1000, rng=random.Random(1))
    requested = sum(t.gpu_request_milli for t in stream)
    assert requested <= 1300 and requested + 500 > 1300
    assert stream.count(cpu) >= 1  # CPU-only tasks are placed too; they ask 0 GPU


def test_inflation_trims_a_list_above_the_target():
    stream = inflate([Task(0, 0, 1, 1000)] * 5, capacity_milli=2000, rng=random.Random(1))
    assert len(stream) == 2  # 2000 <= 1.3 * 2000 < 3000


def test_levels_average_the_rounding_window():
    capacity = 1000
    # Arrivals 895 and 904 both round to 90 % (89.5 and 90.4); 1300 to 130.
    events = [(500, 500), (895, 880), (904, 890), (1000, 950), (1100, 960), (1300, 970)]
    assert alloc_at_levels(events, capacity) == {90: 88.5, 100: 95.0, 110: 96.0, 130: 97.0}
    # No event rounds to a level: the +-1 % neighbours stand in; none: NaN.
    sparse = alloc_at_levels([(1090, 900)], capacity, levels=(110, 120))
    assert sparse[110] == 90.0 and math.isnan(sparse[120])


@pytest.mark.parametrize(
    "text,seeds",
    [("42-51", list(range(42, 52))), ("42,45", [42, 45]), ("42-44,50", [42, 43, 44, 50]), ("7", [7])],
)
def test_seed_lists(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "51-42", "a", "4-"])
def test_bad_seed_lists(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_seeds(text)

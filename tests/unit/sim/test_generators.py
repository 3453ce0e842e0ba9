"""Seeded workloads: the same seed writes the same files, and they pass the simulator's own checks."""

import pytest
import yaml

from scheduler.sim import generators, traces
from scheduler.sim.faults import read_faults
from scheduler.sim.inputs import check_jobs, load, read_cluster, read_org
from scheduler.sim.workload import read_workload


def test_the_same_seed_writes_the_same_bytes(tmp_path):
    first = generators.write_workload_dir(generators.ai2_month(5, jobs=400, days=3), tmp_path / "a")
    second = generators.write_workload_dir(generators.ai2_month(5, jobs=400, days=3), tmp_path / "b")
    for name in ("cluster.yaml", "org.yaml", "workload.csv"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    other = generators.write_workload_dir(generators.ai2_month(6, jobs=400, days=3), tmp_path / "c")
    assert (other / "workload.csv").read_bytes() != (first / "workload.csv").read_bytes()


@pytest.mark.parametrize("make", [lambda: generators.ai2_month(1, jobs=600, days=4), generators.nvl72_small_jobs,
                                  generators.nvl72_large_jobs])
def test_generated_workloads_read_back_and_check(make, tmp_path):
    workload = make()
    directory = generators.write_workload_dir(workload, tmp_path / workload.name)
    cluster = read_cluster(directory / "cluster.yaml")
    units = read_org(directory / "org.yaml", cluster.name)
    jobs = read_workload(directory / "workload.csv")
    check_jobs(jobs, cluster, units)
    assert [j.id for j in jobs] == [j.id for j in workload.jobs]
    if workload.faults:
        assert len(read_faults(directory / "faults.csv", hosts=cluster.host_names)) == len(workload.faults)


def test_the_ai2_month_has_what_the_issue_asks():
    workload = generators.ai2_month(1)
    cluster, units = load(workload.cluster, workload.org)
    projects = {u.name for u in units if u.parent}
    assert len(projects) >= 10 and len({u.parent for u in units if u.parent}) == 3
    assert sum(len(h.gpus) for h in cluster.topology.hosts) == 1024
    assert cluster.policy.fast_lane_gpus > 0
    debug = [j for j in workload.jobs if 0 < j.min_runtime <= 900]
    multi_day = [j for j in workload.jobs if j.resumable and j.duration >= 86400]
    unallocated = [j for j in workload.jobs if j.min_runtime == 0]
    assert debug and multi_day and unallocated
    assert max(j.submit for j in workload.jobs) < 30 * 86400
    assert yaml.safe_dump(workload.cluster)  # plain data


def test_the_trace_replays_build_from_the_trace_files():
    philly = traces.philly_replay(days=3)
    cluster, units = load(philly.cluster, philly.org)
    check_jobs(philly.jobs, cluster, units)
    assert philly.jobs and all(j.submit < 3 * 86400 for j in philly.jobs)
    openb = traces.openb_replay(days=0.05)
    cluster, units = load(openb.cluster, openb.org)
    check_jobs(openb.jobs, cluster, units)
    assert any(j.gpu_milli < 1000 for j in openb.jobs) and any(j.min_runtime == 0 for j in openb.jobs)


def test_a_missing_trace_folder_says_where_to_get_it(tmp_path):
    with pytest.raises(traces.TraceMissing, match="workloads/README.md"):
        traces.philly_replay(tmp_path)

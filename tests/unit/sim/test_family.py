"""The family of generated months (issue 18): seeded, checked like any workload, and differing where it says."""

import pytest

from scheduler.sim import generators
from scheduler.sim.inputs import check_jobs, load, read_cluster, read_org
from scheduler.sim.workload import read_workload


@pytest.mark.parametrize("shape", sorted(generators.FAMILY_SHAPES))
def test_each_member_reads_back_checks_and_is_the_same_for_the_same_seed(shape, tmp_path):
    made = generators.family_month(shape, 3, days=7)
    directory = generators.write_workload_dir(made, tmp_path / made.name)
    cluster = read_cluster(directory / "cluster.yaml")
    units = read_org(directory / "org.yaml", cluster.name)
    jobs = read_workload(directory / "workload.csv")
    check_jobs(jobs, cluster, units)
    assert [j.id for j in jobs] == [j.id for j in made.jobs]
    assert cluster.total_gpus == 256
    again = generators.write_workload_dir(generators.family_month(shape, 3, days=7), tmp_path / "again")
    assert (again / "workload.csv").read_bytes() == (directory / "workload.csv").read_bytes()
    other = generators.write_workload_dir(generators.family_month(shape, 4, days=7), tmp_path / "other")
    assert (other / "workload.csv").read_bytes() != (directory / "workload.csv").read_bytes()


def _facts(shape: str) -> dict:
    made = generators.family_month(shape, 1, days=14)
    cluster, units = load(made.cluster, made.org)
    from scheduler.core.fairshare import share_of_cluster

    shares = {name: share for name, share in share_of_cluster(units).items() if share > 0}
    projects = {u.name for u in units if u.parent is not None}
    healthy = sum(len(h.gpus) for h in cluster.topology.hosts)
    allocated = [j for j in made.jobs if j.allocated]
    return {
        "allocations": len(projects & set(shares)),
        "unallocated": 1 - len(allocated) / len(made.jobs),
        "oversized": sum(1 for j in allocated if j.gpus > shares[j.project] * healthy),
        "largest": max(j.gpus for j in made.jobs),
        "min_runtimes": {j.min_runtime for j in allocated if j.id[0] == "t"},
    }


def test_the_shapes_vary_allocations_job_sizes_minimum_runtimes_and_the_unallocated_share():
    many, few, bursty = (_facts(shape) for shape in ("many-small", "few-large", "bursty-short"))
    assert (many["allocations"], few["allocations"], bursty["allocations"]) == (15, 4, 8)
    assert few["unallocated"] < many["unallocated"] < bursty["unallocated"]
    # Jobs larger than their project's entitlement in every shape; whole racks only in few-large.
    assert min(many["oversized"], few["oversized"], bursty["oversized"]) > 0
    assert few["largest"] == 72 and 32 <= many["largest"] <= 64 and bursty["largest"] == 32
    assert min(few["min_runtimes"]) == 4 * 3600 and max(bursty["min_runtimes"]) == 2 * 3600

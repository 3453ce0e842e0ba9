"""The workload CSV and fault file: read whole, every problem named by row and column."""

import pytest

from scheduler.core import DOMAIN, PRIORITY_HIGH
from scheduler.sim.faults import parse_faults
from scheduler.sim.inputs import check_jobs
from scheduler.sim.workload import WorkloadError, parse_workload_text, read_workload, write_workload

from .helpers import cluster as make_cluster
from .helpers import job, nvl72, org

HEADER = "job_id,submit,project,gpus,min_runtime,resumable,duration"


def test_it_reads_required_and_optional_columns():
    jobs = parse_workload_text(
        "job_id,submit,project,gpus,min_runtime,resumable,duration,gpus_per_host,topology,checkpoint_every,"
        "priority,gpu_type,user\n"
        "a,0,olmo,8,3600,1,7200,4,domain,600,high,GB200|H100,alice\n"
        "b,10.5,olmo,1,0,false,60,,,,,,\n"
    )
    assert jobs[0].topology == DOMAIN and jobs[0].gpus_per_host == 4 and jobs[0].checkpoint_every == 600
    assert jobs[0].priority == PRIORITY_HIGH and jobs[0].gpu_types == frozenset({"GB200", "H100"})
    assert jobs[0].user == "alice" and jobs[0].seq == 1
    assert jobs[1].submit == 10.5 and not jobs[1].resumable and jobs[1].user == "olmo" and not jobs[1].allocated


@pytest.mark.parametrize(("row", "message"), [
    ("a,0,olmo,x,3600,1,100", "row 1 (line 2, job a), column gpus: 'x' is not a whole number"),
    ("a,-5,olmo,1,3600,1,100", "row 1 (line 2, job a), column submit: -5 must be at least 0"),
    ("a,0,olmo,1,3600,maybe,100", "row 1 (line 2, job a), column resumable: 'maybe' must be 1/0 or true/false"),
    ("a,0,olmo,1,3600,1,0", "row 1 (line 2, job a), column duration: 0 must be more than 0"),
    ("a,0,,1,3600,1,100", "row 1 (line 2, job a), column project: required"),
    ("a,0,olmo,1,,1,100", "row 1 (line 2, job a), column min_runtime: required"),
])
def test_it_names_the_row_and_column_of_each_problem(row, message):
    with pytest.raises(WorkloadError) as caught:
        parse_workload_text(f"{HEADER}\n{row}\n")
    assert message in caught.value.problems


def test_it_checks_optional_columns_and_duplicates():
    text = (f"{HEADER},gpu_milli,gpus_per_host,topology,priority\n"
            "a,0,p,2,0,1,10,500,,,\n"
            "b,0,p,6,0,1,10,,4,,\n"
            "c,0,p,1,0,1,10,,,ring,urgent\n"
            "a,0,p,1,0,1,10,,,,\n")
    with pytest.raises(WorkloadError) as caught:
        parse_workload_text(text)
    problems = caught.value.problems
    assert "row 1 (line 2, job a), column gpu_milli: a fraction of a GPU (500) is for 1-GPU jobs only" in problems
    assert "row 2 (line 3, job b), column gpus_per_host: 6 GPUs is not a multiple of 4 per host" in problems
    assert "row 3 (line 4, job c), column topology: 'ring' must be one of any, domain, preferred" in problems
    assert "row 3 (line 4, job c), column priority: 'urgent' must be one of low, normal, high" in problems
    assert "row 4 (line 5, job a), column job_id: 'a' is also the id of row 1" in problems


def test_it_refuses_a_header_without_required_columns():
    with pytest.raises(WorkloadError, match="missing required column"):
        parse_workload_text("job_id,submit,project\na,0,p\n")
    with pytest.raises(WorkloadError, match="unknown column"):
        parse_workload_text(f"{HEADER},colour\na,0,p,1,0,1,10,red\n")


def test_it_refuses_what_the_api_would_refuse_at_submission():
    cluster = make_cluster(nvl72("rack", missing={7: 4}))
    units = org(("nlp", 60)) + org(("olmo", 100), parent="nlp")
    jobs = [job("a", 0, "nlp", 1, 10, seq=1), job("b", 0, "ghost", 1, 10, seq=2),
            job("c", 0, "olmo", 72, 10, topology="domain", seq=3),
            job("d", 0, "olmo", 1, 10, min_runtime=9 * 3600, seq=4)]
    with pytest.raises(WorkloadError) as caught:
        check_jobs(jobs, cluster, units)
    problems = caught.value.problems
    assert "row 1 (line 2, job a), column project: 'nlp' has children; jobs are charged to projects" in problems
    assert "row 2 (line 3, job b), column project: unknown project 'ghost' (not in the org file)" in problems
    assert "row 3 (line 4, job c), column gpus: 72 GPUs in one domain; the largest domain has 68" in problems
    assert ("row 4 (line 5, job d), column min_runtime: 32400 s is over the cluster's cap of 28800 s"
            in problems)


def test_it_writes_what_it_reads(tmp_path):
    jobs = [job("a", 0, "p", 8, 7200.5, gpus_per_host=4, topology="domain", checkpoint_every=600, seq=1),
            job("b", 3, "p", 1, 60, gpu_milli=250, resumable=False, min_runtime=0, seq=2)]
    path = tmp_path / "w.csv"
    write_workload(path, jobs)
    again = read_workload(path)
    assert [(j.id, j.gpus, j.gpu_milli, j.topology, j.duration, j.checkpoint_every, j.resumable) for j in again] == [
        ("a", 8, 1000, "domain", 7200.5, 600, True), ("b", 1, 250, "any", 60, None, False)]


def test_it_reads_faults_in_time_order_and_names_bad_rows():
    faults = parse_faults([{"time": "50", "host": "h1", "event": "up"}, {"time": "10", "host": "h1", "event": "down"}],
                          hosts={"h1"})
    assert [(f.time, f.event) for f in faults] == [(10, "down"), (50, "up")]
    with pytest.raises(WorkloadError) as caught:
        parse_faults([{"time": "x", "host": "h9", "event": "reboot"}], hosts={"h1"})
    assert caught.value.problems == [
        "faults row 1 (line 2), column time: 'x' must be seconds from the start, at least 0",
        "faults row 1 (line 2), column host: 'h9' is not a host of the cluster",
        "faults row 1 (line 2), column event: 'reboot' must be one of down, up, drain, resume",
    ]

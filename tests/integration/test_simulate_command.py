"""`manage.py simulate` as FORMATS.md specifies it: files in, four files out, the same bytes every time."""

import csv
import json
import re

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from budgets.loaders import parse_org
from scheduler.sim.checks import check_directory
from tests.without_django import run_without_django

CLUSTER = {
    "name": "sim-test",
    "policy": {"tick": "5s", "grace_period": "60s", "unallocated_grace": "10s", "fast_lane_gpus": 8},
    "domains": [
        {"name": "nvl72-{:02d}", "count": 2, "hosts": 18, "gpus_per_host": 4, "gpu_type": "GB200"},
        {"name": "hgx-{:02d}", "count": 2, "hosts": 1, "gpus_per_host": 8, "gpu_type": "H100"},
    ],
    "unhealthy_hosts": ["nvl72-02-h07"],
}
ORG = {
    "users": [{"username": "alice"}],
    "units": [
        {"name": "nlp", "share": {"sim-test": 60}, "children": [
            {"name": "olmo", "members": ["alice"], "share": {"sim-test": 70}},
            {"name": "tulu", "share": {"sim-test": 30}},
        ]},
        {"name": "vision", "share": {"sim-test": 40}},
        {"name": "sandbox"},
    ],
}
ROWS = [
    "job_id,submit,project,gpus,min_runtime,resumable,duration,gpus_per_host,topology,checkpoint_every,gpu_milli",
    "d1,0,olmo,2,600,0,900,,,,",
    "t1,10,tulu,16,3600,1,20000,4,domain,1800,",
    "v1,20,vision,64,7200,1,30000,4,domain,1800,",
    "u1,30,sandbox,8,0,1,50000,,,600,",
    "o1,40,olmo,1,3600,1,8000,,,,250",
    "o2,45,olmo,1,3600,1,8000,,,,500",
    "big,100,olmo,72,7200,1,20000,4,domain,,",
    "d2,4000,vision,4,300,0,600,,,,",
    "t2,5000,tulu,8,1800,1,4000,,,600,",
]


@pytest.fixture
def inputs(tmp_path):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    (tmp_path / "org.yaml").write_text(yaml.safe_dump(ORG))
    (tmp_path / "workload.csv").write_text("\n".join(ROWS) + "\n")
    (tmp_path / "faults.csv").write_text("time,host,event\n3000,nvl72-01-h01,down\n9000,nvl72-01-h01,up\n"
                                         "6000,hgx-02-h01,drain\n20000,hgx-02-h01,resume\n")
    return tmp_path


def simulate(inputs, out, *extra):
    call_command("simulate", "--cluster", str(inputs / "cluster.yaml"), "--org", str(inputs / "org.yaml"),
                 "--workload", str(inputs / "workload.csv"), "--out", str(out), *extra)


def test_it_writes_the_four_files_of_formats_md(inputs, tmp_path):
    simulate(inputs, tmp_path / "out", "--faults", str(inputs / "faults.csv"))
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    for key in ("policy", "sim_seconds", "wall_seconds", "jobs", "completed", "availability", "occupancy",
                "allocated_occupancy", "unallocated_occupancy", "owed_delivered", "wait_seconds", "preemptions",
                "lost_gpu_hours", "stranded"):
        assert key in summary, key
    assert set(summary["owed_delivered"]) >= {"overall", "worst", "per_project"}
    assert set(summary["wait_seconds"]) == {"debug", "large", "other", "all"}
    assert set(summary["wait_seconds"]["debug"]) >= {"p50", "p90", "p99"}
    assert set(summary["stranded"]) == {"8", "16", "32", "72"}
    # What preemptions cost (issue 18), beside the FORMATS.md keys.
    assert set(summary["preemptions_per_job"]["allocated"]) == {"mean", "p99", "max", "jobs"}
    assert set(summary["wasted_preemptions"]) == {"share", "wasted", "on_behalf", "undecided"}
    assert set(summary["goodput"]) >= {"overall", "worst", "worst_project", "per_project"}
    assert summary["restart_overhead_seconds"] == 300
    assert summary["policy"] == "allot" and summary["jobs"] == 9
    with open(out / "events.csv", newline="") as handle:
        events = list(csv.DictReader(handle))
    assert list(events[0]) == ["time", "job_id", "event", "detail"]
    assert {e["event"] for e in events} <= {"submit", "start", "preempt", "requeue", "finish", "stop", "fail"}
    assert any(e["event"] == "start" and "@250" in e["detail"] for e in events)
    with open(out / "jobs.csv", newline="") as handle:
        header = next(csv.reader(handle))
    assert header == ["job_id", "project", "class", "submit", "first_start", "end", "state", "wait", "preemptions",
                      "gpus"]
    report = (out / "report.html").read_text()
    assert "<script" in report and "Plotly.newPlot" in report
    assert "Goodput per project" in report and "Wasted:" in report
    # Opens offline: plotly.js is inline (a few MB), no script is fetched from anywhere.
    assert re.search(r"<script[^>]*\bsrc=", report) is None and len(report) > 1_000_000
    assert check_directory(out) == []


def test_it_applies_the_fault_file(inputs, tmp_path):
    simulate(inputs, tmp_path / "out", "--faults", str(inputs / "faults.csv"))
    with open(tmp_path / "out" / "events.csv", newline="") as handle:
        events = list(csv.DictReader(handle))
    causes = {(e["job_id"], e["detail"]) for e in events if e["event"] == "preempt"}
    lost = [job for job, cause in causes if cause == "down:nvl72-01-h01"]
    drained = [job for job, cause in causes if cause == "drain:hgx-02-h01"]
    assert lost and drained
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["availability"] < 1


def test_the_same_inputs_give_the_same_bytes(inputs, tmp_path):
    simulate(inputs, tmp_path / "a", "--faults", str(inputs / "faults.csv"))
    simulate(inputs, tmp_path / "b", "--faults", str(inputs / "faults.csv"))
    for name in ("events.csv", "jobs.csv", "report.html"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    first, second = (json.loads((tmp_path / d / "summary.json").read_text()) for d in "ab")
    first.pop("wall_seconds"), second.pop("wall_seconds")
    assert first == second


def test_the_command_is_the_django_free_program(inputs, tmp_path):
    """`manage.py simulate` does no work of its own: `scheduler.sim.cli.main`, with no Django, writes the same."""
    simulate(inputs, tmp_path / "command", "--faults", str(inputs / "faults.csv"), "--no-report")
    argv = ["--cluster", str(inputs / "cluster.yaml"), "--org", str(inputs / "org.yaml"),
            "--workload", str(inputs / "workload.csv"), "--faults", str(inputs / "faults.csv"), "--no-report",
            "--out", str(tmp_path / "program")]
    done = run_without_django(f"""
        from scheduler.sim.cli import main

        assert main({argv!r}) == 0
    """)
    assert done.stdout.startswith("allot: 9 jobs, ")
    for name in ("events.csv", "jobs.csv"):
        assert (tmp_path / "command" / name).read_bytes() == (tmp_path / "program" / name).read_bytes(), name


@pytest.mark.parametrize("policy", ["fifo", "priority", "node-level"])
def test_it_runs_the_baselines(inputs, tmp_path, policy):
    simulate(inputs, tmp_path / policy, "--policy", policy, "--until", "40000", "--no-report")
    summary = json.loads((tmp_path / policy / "summary.json").read_text())
    assert summary["policy"] == policy and summary["sim_seconds"] == 40000
    assert check_directory(tmp_path / policy) == []


def test_it_refuses_a_bad_workload_naming_the_row_and_column(inputs, tmp_path):
    (inputs / "workload.csv").write_text(ROWS[0] + "\nx1,0,olmo,two,600,0,900,,,,\nx2,0,nobody,1,600,0,900,,,,\n")
    with pytest.raises(CommandError) as caught:
        simulate(inputs, tmp_path / "out")
    assert "row 1 (line 2, job x1), column gpus: 'two' is not a whole number" in str(caught.value)
    (inputs / "workload.csv").write_text(ROWS[0] + "\nx2,0,nobody,1,600,0,900,,,,\n")
    with pytest.raises(CommandError) as caught:
        simulate(inputs, tmp_path / "out")
    assert "row 1 (line 2, job x2), column project: unknown project 'nobody'" in str(caught.value)


def test_it_refuses_an_org_that_names_another_cluster(inputs, tmp_path):
    org = yaml.safe_load((inputs / "org.yaml").read_text())
    org["units"][1]["share"] = {"elsewhere": 40}
    (inputs / "org.yaml").write_text(yaml.safe_dump(org))
    with pytest.raises(CommandError, match=r"units\[1\] \(vision\)\.share\.elsewhere: no such cluster"):
        simulate(inputs, tmp_path / "out")


def test_parse_org_checks_against_given_clusters_without_the_database():
    """No django_db mark: any query would fail the test."""
    spec = parse_org(ORG, clusters={"sim-test"})
    assert [(u.name, u.parent, dict(u.shares)) for u in spec.units][:2] == [
        ("nlp", None, {"sim-test": 60}), ("olmo", "nlp", {"sim-test": 70})]

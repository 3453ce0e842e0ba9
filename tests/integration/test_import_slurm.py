"""`manage.py import_slurm`: a lab's Slurm associations and job history, as Allot's org, workload and usage —
which `load_org` and `simulate` take as they are — with every line it could not map reported."""

import csv
import json
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.management import call_command

from budgets.loaders import load_org_file
from budgets.models import Unit
from scheduler.slurm import parse_associations, parse_tres

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"
DEMO = Path(settings.BASE_DIR) / "demo"


def run(tmp_path, associations="associations.txt", *extra):
    out = tmp_path / "lab"
    call_command("import_slurm", "--associations", str(FIXTURES / associations), "--jobs",
                 str(FIXTURES / "sacct.txt"), "--cluster", "gb200-east", "--slurm-cluster", "lab",
                 "--gpu-type-map", "h100=H100", "--out", str(out), *extra)
    return out


def shares(units):
    found = {}
    for unit in units:
        found[unit["name"]] = unit["share"]["gb200-east"]
        found.update(shares(unit.get("children", [])))
    return found


def test_accounts_become_units_with_fairshare_normalised_per_parent(tmp_path):
    org = yaml.safe_load((run(tmp_path) / "org.yaml").read_text())
    units = org["units"]
    assert [unit["name"] for unit in units] == ["nlp", "vision", "ops-team"]
    found = shares(units)
    # root's children: 60, 20 and "parent" (counted 1) of 81.
    assert found["nlp"] == 74.07 and found["vision"] == 24.69 and found["ops-team"] == 1.23
    # nlp's sub-accounts 55 and 30 and its own user pat (15) are siblings in Slurm's fairshare: pat's jobs
    # go to a leaf of nlp's own.
    assert (found["olmo"], found["tulu"], found["nlp-own"]) == (55, 30, 15)
    nlp = units[0]
    assert {child["name"]: child.get("members") for child in nlp["children"]} == {
        "olmo": ["alice", "bob"], "tulu": ["carol"], "nlp-own": ["pat"]}
    assert "root" not in {user["username"] for user in org["users"]}


def test_the_tree_layout_gives_the_same_org(tmp_path):
    by_parent = yaml.safe_load((run(tmp_path / "a") / "org.yaml").read_text())
    by_tree = yaml.safe_load((run(tmp_path / "b", "associations-tree.txt") / "org.yaml").read_text())
    assert by_tree == by_parent


def test_the_org_loads_and_the_workload_replays_in_the_simulator(tmp_path, db):
    from topology.loaders import load_cluster_file

    out = run(tmp_path)
    load_cluster_file(DEMO / "cluster.yaml")
    load_org_file(out / "org.yaml")
    assert Unit.objects.get(name="nlp-own").parent.name == "nlp"
    call_command("simulate", "--cluster", str(DEMO / "cluster.yaml"), "--org", str(out / "org.yaml"),
                 "--workload", str(out / "workload.csv"), "--out", str(tmp_path / "sim"), "--no-report")
    summary = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert summary["jobs"] == 6 and summary["completed"] == 6


def test_jobs_keep_their_shape_times_and_account(tmp_path):
    rows = {row["job_id"]: row for row in csv.DictReader((run(tmp_path) / "workload.csv").open())}
    assert list(rows) == ["1001", "1002", "1003", "1004", "1007", "1008"]
    first, two_hosts = rows["1001"], rows["1002"]
    assert (first["submit"], first["project"], first["user"], first["gpus"], first["duration"]) == (
        "0", "olmo", "alice", "8", str(6 * 3600))
    assert (two_hosts["submit"], two_hosts["gpus"], two_hosts["gpus_per_host"], two_hosts["gpu_type"]) == (
        "3600", "16", "8", "H100")
    assert two_hosts["memory_gib"] == "1024" and two_hosts["cpus"] == "128"
    # A job's minimum runtime is the option's, never past its time limit.
    assert rows["1003"]["min_runtime"] == "3600" and rows["1007"]["min_runtime"] == "1800"
    assert rows["1007"]["project"] == "nlp-own" and rows["1007"]["gpus"] == "0"
    assert rows["1008"]["project"] == "ops-team" and rows["1008"]["gpus_per_host"] == "1"
    usage = list(csv.DictReader((tmp_path / "lab" / "usage.csv").open()))
    assert usage[0] == {"project": "olmo", "user": "alice", "job_id": "1001", "start": "2026-11-01T00:05:00+00:00",
                        "end": "2026-11-01T06:05:00+00:00", "gpus": "8", "gpu_hours": "48.0"}
    assert sum(float(row["gpu_hours"]) for row in usage) == pytest.approx(48 + 192 + 0.5 + 8 + 0 + 3)


def test_what_it_cannot_map_is_reported_line_by_line(tmp_path):
    problems = (run(tmp_path) / "problems.txt").read_text().splitlines()
    assert problems == [
        "associations line 9: user carol's association is for partition gpu-long: Allot has no partitions; "
        "imported as a member of tulu",
        "associations line 13: account Ops Team's share 'parent' is not a number: counted as 1",
        "associations line 1: users on root (root): Allot charges jobs to projects, and root is none; their jobs "
        "are not imported",
        "jobs line 6: 1005 (PENDING) never ran to an end: skipped",
        "jobs line 7: 1006: account 'safety' is not in the associations: skipped",
        "jobs line 9: 1007.batch is a job step, not an allocation: skipped (use --allocations)",
        "jobs line 11: not as many fields as the header has columns",
    ]


def test_an_unmapped_gpu_type_is_imported_as_any_and_reported(tmp_path):
    out = tmp_path / "lab"
    call_command("import_slurm", "--associations", str(FIXTURES / "associations.txt"), "--jobs",
                 str(FIXTURES / "sacct.txt"), "--cluster", "gb200-east", "--slurm-cluster", "lab", "--out", str(out))
    rows = {row["job_id"]: row for row in csv.DictReader((out / "workload.csv").open())}
    assert rows["1002"]["gpu_type"] == ""
    assert ("jobs line 3: 1002: GPU type 'h100' has no Allot type (--gpu-type-map h100=TYPE): imported as any GPU"
            in (out / "problems.txt").read_text())


def test_a_file_without_the_needed_columns_says_which():
    org, projects, problems = parse_associations("Cluster|User\nlab|alice\n", cluster="c")
    assert org == {"units": []} and projects == {}
    assert str(problems[0]) == ("associations line 1: no column Account, Share in the header (run `sacctmgr show "
                                "associations --parsable2`)")


@pytest.mark.parametrize("tres, expected", [
    ("billing=8,cpu=8,gres/gpu=4,mem=64G,node=1", {"gpus": 4, "gpu_type": "", "cpus": 8, "memory_gib": 64, "nodes": 1}),
    ("cpu=2,gres/gpu:a100=2,gres/gpu=2,mem=1500M,node=1",
     {"gpus": 2, "gpu_type": "a100", "cpus": 2, "memory_gib": 2, "nodes": 1}),
    ("cpu=96,mem=2T,node=4", {"gpus": 0, "gpu_type": "", "cpus": 96, "memory_gib": 2048, "nodes": 4}),
    ("", {"gpus": 0, "gpu_type": "", "cpus": 0, "memory_gib": 0, "nodes": 1}),
])
def test_alloc_tres(tres, expected):
    assert parse_tres(tres) == expected

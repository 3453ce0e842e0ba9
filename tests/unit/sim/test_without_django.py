"""The simulator needs no Django: `scheduler.sim` and the parsers it reads files with import and run without it."""

import json
import pkgutil

import scheduler.sim
from tests.without_django import ROOT, run_without_django

# Every module of the simulator, found on disk so a new one is covered too.
SIM_MODULES = sorted(f"scheduler.sim.{module.name}" for module in pkgutil.iter_modules(scheduler.sim.__path__))


def test_the_list_of_modules_is_the_whole_simulator():
    assert {f"scheduler.sim.{name}" for name in (
        "checks", "cli", "engine", "faults", "generators", "inputs", "measures", "output", "policies", "report",
        "runs", "traces", "workload")} <= set(SIM_MODULES)


def test_every_module_of_the_simulator_and_the_parsers_imports_without_django():
    modules = ["scheduler.sim", *SIM_MODULES, "topology.spec", "budgets.spec"]
    done = run_without_django(f"""
        import importlib

        for name in {modules!r}:
            importlib.import_module(name)
        print(len({modules!r}))
    """)
    assert done.stdout.strip() == str(len(modules))


def test_a_generated_workload_runs_without_django():
    done = run_without_django("""
        import json

        from scheduler.sim import generators, simulate
        from scheduler.sim.checks import check_result
        from scheduler.sim.inputs import check_jobs, load
        from scheduler.sim.policies import decision_function

        made = generators.family_month("many-small", 1, days=0.25)
        cluster, units = load(made.cluster, made.org)
        check_jobs(made.jobs, cluster, units)
        result = simulate(cluster, units, made.jobs, decide=decision_function("allot"), policy_name="allot",
                          faults=made.faults, until=6 * 3600)
        print(json.dumps({"jobs": result.summary["jobs"], "sim_seconds": result.summary["sim_seconds"],
                          "problems": check_result(result)}))
    """)
    summary = json.loads(done.stdout)
    assert summary["jobs"] > 0 and summary["sim_seconds"] == 6 * 3600 and summary["problems"] == []


def test_the_simulate_command_runs_without_django(tmp_path):
    """`manage.py simulate`'s work, `scheduler.sim.cli.main`, on a shipped workload for two simulated hours."""
    folder = ROOT / "workloads" / "nvl72-large"
    argv = ["--cluster", str(folder / "cluster.yaml"), "--org", str(folder / "org.yaml"),
            "--workload", str(folder / "workload.csv"), "--until", "7200", "--out", str(tmp_path / "out"),
            "--no-report"]
    done = run_without_django(f"""
        from scheduler.sim.cli import main

        assert main({argv!r}) == 0
    """)
    assert done.stdout.startswith("allot: ") and f"written to {tmp_path / 'out'}/" in done.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["sim_seconds"] == 7200 and summary["policy"] == "allot"
    assert not (tmp_path / "out" / "report.html").exists()


def test_the_program_refuses_bad_inputs_naming_them(tmp_path, capsys):
    from scheduler.sim.cli import main

    (tmp_path / "cluster.yaml").write_text("name: Bad Name\ndomains: []\n")
    folder = ROOT / "workloads" / "nvl72-large"
    code = main(["--cluster", str(tmp_path / "cluster.yaml"), "--org", str(folder / "org.yaml"),
                 "--workload", str(folder / "workload.csv"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1
    assert err.splitlines() == ["name: 'Bad Name' must be a lower-case name of letters, digits and dashes",
                                "domains: must be a non-empty list"]
    assert not (tmp_path / "out").exists()

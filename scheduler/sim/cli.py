"""The simulator from the command line, with no Django: what `manage.py simulate` runs (FORMATS.md).

    python -m scheduler.sim.cli --cluster C.yaml --org O.yaml --workload W.csv \\
        [--policy allot] [--until SECONDS] [--out DIR] [--faults F.csv] [--no-report]

Reads no database: the cluster and org files are checked by the loaders'
parsers (`topology.spec`, `budgets.spec`) against each other. Writes
summary.json, events.csv, jobs.csv and report.html to DIR (default ./sim-out).
"""

from __future__ import annotations

import argparse
import sys

from topology.spec import LoadError

from .engine import simulate
from .faults import read_faults
from .inputs import check_jobs, read_cluster, read_org
from .output import write_all
from .policies import POLICIES, decision_function
from .workload import WorkloadError, read_workload

HELP = "Simulate a workload on a cluster and org under a scheduling policy (no database needed)."


class InputError(Exception):
    """Inputs refused: `problems` names each file's entry, row or column at fault."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


class Progress:
    """A one-line progress bar on a terminal (stderr); nothing otherwise."""

    def __init__(self, stream):
        self.stream = stream
        self.shown = False

    def __call__(self, now: float, until: float | None, finished: int, jobs: int) -> None:
        width = 30
        fraction = (now / until) if until else (finished / jobs if jobs else 1.0)
        fraction = max(0.0, min(1.0, fraction))
        bar = "#" * int(fraction * width)
        self.stream.write(f"\r[{bar:<{width}}] day {now / 86400:6.2f}  {finished}/{jobs} jobs done")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options, the same for `main` and for `manage.py simulate`."""
    parser.add_argument("--cluster", required=True, help="cluster spec YAML (as for load_cluster)")
    parser.add_argument("--org", required=True, help="org spec YAML (as for load_org)")
    parser.add_argument("--workload", required=True, help="workload CSV (FORMATS.md)")
    parser.add_argument("--policy", default="allot", choices=sorted(POLICIES), help="decision policy")
    parser.add_argument("--until", type=float, default=None,
                        help="simulated seconds to run (default: until every job has ended)")
    parser.add_argument("--out", default="sim-out", help="output directory (default ./sim-out)")
    parser.add_argument("--faults", default=None, help="CSV time,host,event (down, up, drain, resume)")
    parser.add_argument("--no-report", action="store_true", help="skip report.html")


def run(*, cluster: str, org: str, workload: str, policy: str = "allot", until: float | None = None,
        out: str = "sim-out", faults: str | None = None, no_report: bool = False, stderr=None) -> str:
    """Read the files, simulate, write DIR; returns the one-line summary. Raises InputError naming every problem.

    A progress bar goes to `stderr` (default sys.stderr) when it is a terminal.
    """
    try:
        sim_cluster = read_cluster(cluster)
        units = read_org(org, sim_cluster.name)
        jobs = read_workload(workload)
        check_jobs(jobs, sim_cluster, units)
        fault_list = read_faults(faults, hosts=sim_cluster.host_names) if faults else []
    except (LoadError, WorkloadError) as error:
        raise InputError(getattr(error, "problems", [str(error)])) from None
    if until is not None and until <= 0:
        raise InputError(["--until must be more than 0 seconds"])
    stderr = stderr if stderr is not None else sys.stderr
    progress = Progress(stderr) if stderr.isatty() else None
    result = simulate(sim_cluster, units, jobs, decide=decision_function(policy), policy_name=policy,
                      faults=fault_list, until=until, progress=progress)
    if progress is not None:
        progress.close()
    directory = write_all(result, out, report=not no_report)
    summary = result.summary
    owed = summary["owed_delivered"]
    waits = summary["wait_seconds"]
    return (
        f"{summary['policy']}: {summary['jobs']} jobs, {summary['completed']} completed in "
        f"{summary['sim_seconds'] / 86400:.2f} simulated days ({summary['wall_seconds']:.1f} s wall); "
        f"occupancy {summary['occupancy']:.2%}; owed delivered "
        f"{_pct(owed['overall'])} overall, {_pct(owed['worst'])} worst; "
        f"debug p90 wait {_sec(waits['debug']['p90'])}; written to {directory}/"
    )


def main(argv: list[str] | None = None) -> int:
    """`simulate` as a program: 0 when the files are written, 1 when the inputs are refused (on stderr)."""
    parser = argparse.ArgumentParser(prog="simulate", description=HELP)
    add_arguments(parser)
    options = parser.parse_args(argv)
    try:
        line = run(**vars(options))
    except InputError as error:
        print("\n".join(error.problems), file=sys.stderr)
        return 1
    print(line)
    return 0


def _pct(value) -> str:
    return "n/a" if value is None else f"{value:.2%}"


def _sec(value) -> str:
    return "n/a" if value is None else f"{value:g} s"


if __name__ == "__main__":
    sys.exit(main())

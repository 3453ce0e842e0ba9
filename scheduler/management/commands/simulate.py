"""`manage.py simulate`: replay a workload through the scheduler in virtual time (FORMATS.md).

    python manage.py simulate --cluster C.yaml --org O.yaml --workload W.csv \\
        [--policy allot] [--until SECONDS] [--out DIR] [--faults F.csv]

Reads no database: the cluster and org files are checked by the loaders'
parsers against each other. Writes summary.json, events.csv, jobs.csv and
report.html to DIR (default ./sim-out).
"""

import sys

from django.core.management.base import BaseCommand, CommandError

from scheduler.sim.engine import simulate
from scheduler.sim.faults import read_faults
from scheduler.sim.inputs import check_jobs, read_cluster, read_org
from scheduler.sim.output import write_all
from scheduler.sim.policies import POLICIES, decision_function
from scheduler.sim.workload import WorkloadError, read_workload
from topology.loaders import LoadError


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


class Command(BaseCommand):
    help = "Simulate a workload on a cluster and org under a scheduling policy (no database needed)."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", required=True, help="cluster spec YAML (as for load_cluster)")
        parser.add_argument("--org", required=True, help="org spec YAML (as for load_org)")
        parser.add_argument("--workload", required=True, help="workload CSV (FORMATS.md)")
        parser.add_argument("--policy", default="allot", choices=sorted(POLICIES), help="decision policy")
        parser.add_argument("--until", type=float, default=None,
                            help="simulated seconds to run (default: until every job has ended)")
        parser.add_argument("--out", default="sim-out", help="output directory (default ./sim-out)")
        parser.add_argument("--faults", default=None, help="CSV time,host,event (down, up, drain, resume)")
        parser.add_argument("--no-report", action="store_true", help="skip report.html")

    def handle(self, *args, **options):
        try:
            cluster = read_cluster(options["cluster"])
            units = read_org(options["org"], cluster.name)
            jobs = read_workload(options["workload"])
            check_jobs(jobs, cluster, units)
            faults = read_faults(options["faults"], hosts=cluster.host_names) if options["faults"] else []
        except (LoadError, WorkloadError) as error:
            problems = getattr(error, "problems", [str(error)])
            raise CommandError("\n".join(problems)) from None
        if options["until"] is not None and options["until"] <= 0:
            raise CommandError("--until must be more than 0 seconds")
        progress = Progress(sys.stderr) if sys.stderr.isatty() else None
        result = simulate(cluster, units, jobs, decide=decision_function(options["policy"]),
                          policy_name=options["policy"], faults=faults, until=options["until"],
                          progress=progress)
        if progress is not None:
            progress.close()
        directory = write_all(result, options["out"], report=not options["no_report"])
        summary = result.summary
        owed = summary["owed_delivered"]
        waits = summary["wait_seconds"]
        self.stdout.write(
            f"{summary['policy']}: {summary['jobs']} jobs, {summary['completed']} completed in "
            f"{summary['sim_seconds'] / 86400:.2f} simulated days ({summary['wall_seconds']:.1f} s wall); "
            f"occupancy {summary['occupancy']:.2%}; owed delivered "
            f"{_pct(owed['overall'])} overall, {_pct(owed['worst'])} worst; "
            f"debug p90 wait {_sec(waits['debug']['p90'])}; written to {directory}/"
        )


def _pct(value) -> str:
    return "n/a" if value is None else f"{value:.2%}"


def _sec(value) -> str:
    return "n/a" if value is None else f"{value:g} s"

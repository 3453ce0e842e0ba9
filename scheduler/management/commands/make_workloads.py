"""`manage.py make_workloads [--out workloads/] [--only NAME ...]`: write the seeded synthetic workloads.

Each goes to its own folder (cluster.yaml, org.yaml, workload.csv, and
faults.csv when it has faults); the same seed always writes the same bytes.
The trace replays (Philly, openb) are not written: they are built from the
trace files at run time (see workloads/README.md).
"""

from django.core.management.base import BaseCommand, CommandError

from scheduler.sim.generators import GENERATORS, write_workload_dir


class Command(BaseCommand):
    help = "Write the synthetic workloads (Ai2-like month, NVL72 mixes, the speed run) to a folder."

    def add_arguments(self, parser):
        parser.add_argument("--out", default="workloads", help="folder (default ./workloads)")
        parser.add_argument("--only", nargs="*", choices=sorted(GENERATORS), help="just these workloads")

    def handle(self, *args, **options):
        names = options["only"] or list(GENERATORS)
        for name in names:
            try:
                workload = GENERATORS[name]()
            except ValueError as error:
                raise CommandError(f"{name}: {error}") from None
            directory = write_workload_dir(workload, f"{options['out']}/{name}")
            self.stdout.write(f"{name}: {len(workload.jobs):,} jobs, {len(workload.faults)} faults -> {directory}/")

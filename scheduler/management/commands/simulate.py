"""`manage.py simulate`: replay a workload through the scheduler in virtual time (FORMATS.md).

    python manage.py simulate --cluster C.yaml --org O.yaml --workload W.csv \\
        [--policy allot] [--until SECONDS] [--out DIR] [--faults F.csv]

The work is `scheduler.sim.cli.run`, which needs no Django (nor a database);
this command is its Django entry point.
"""

from django.core.management.base import BaseCommand, CommandError

from scheduler.sim import cli


class Command(BaseCommand):
    help = cli.HELP

    def add_arguments(self, parser):
        cli.add_arguments(parser)

    def handle(self, *args, **options):
        try:
            line = cli.run(cluster=options["cluster"], org=options["org"], workload=options["workload"],
                           policy=options["policy"], until=options["until"], out=options["out"],
                           faults=options["faults"], no_report=options["no_report"])
        except cli.InputError as error:
            raise CommandError("\n".join(error.problems)) from None
        self.stdout.write(line)

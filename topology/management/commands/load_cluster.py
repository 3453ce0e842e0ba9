from django.core.management.base import BaseCommand, CommandError

from topology.loaders import load_cluster_file
from topology.spec import LoadError


class Command(BaseCommand):
    help = "Load or update a cluster from its YAML spec (FORMATS.md). Refuses a bad file whole."

    def add_arguments(self, parser):
        parser.add_argument("file")

    def handle(self, *args, file, **options):
        try:
            cluster, changes = load_cluster_file(file)
        except LoadError as error:
            raise CommandError(f"{file} refused, nothing changed:\n  " + "\n  ".join(error.problems)) from None
        self.stdout.write(
            f"cluster {cluster.name}: {changes['created']} created, {changes['updated']} updated, "
            f"{changes['removed']} removed"
        )

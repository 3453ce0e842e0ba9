from django.core.management.base import BaseCommand, CommandError

from budgets.loaders import load_org_file
from topology.loaders import LoadError


class Command(BaseCommand):
    help = "Load or update the org tree, memberships and shares from YAML (FORMATS.md). Refuses a bad file whole."

    def add_arguments(self, parser):
        parser.add_argument("file")

    def handle(self, *args, file, **options):
        try:
            changes = load_org_file(file)
        except LoadError as error:
            raise CommandError(f"{file} refused, nothing changed:\n  " + "\n  ".join(error.problems)) from None
        self.stdout.write(
            "org: " + ", ".join(f"{count} {what} changed" for what, count in changes.items())
        )

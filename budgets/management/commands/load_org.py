from django.core.management.base import BaseCommand, CommandError

from budgets.loaders import load_org_file
from topology.spec import LoadError


class Command(BaseCommand):
    help = (
        "Load or update the org tree, memberships and shares from YAML (docs/formats.md). Refuses a bad file "
        "whole, and a file that would revert shares changed since it was last loaded unless --overwrite."
    )

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument(
            "--overwrite", action="store_true",
            help="put back the file's shares even where they were changed since (each overwrite is in the ledger)",
        )

    def handle(self, *args, file, overwrite, **options):
        try:
            changes = load_org_file(file, overwrite=overwrite)
        except LoadError as error:
            raise CommandError(f"{file} refused, nothing changed:\n  " + "\n  ".join(error.problems)) from None
        self.stdout.write(
            "org: " + ", ".join(f"{count} {what} changed" for what, count in changes.items())
        )

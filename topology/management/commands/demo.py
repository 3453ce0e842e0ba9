
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from budgets.loaders import load_org_file
from topology.loaders import LoadError, load_cluster_file

DEMO_DIR = settings.DEMO_DIR
DEMO_PASSWORD = "allot-demo"


class Command(BaseCommand):
    help = "Load the demo cluster and org (demo/cluster.yaml, demo/org.yaml). Safe to run again."

    def handle(self, *args, **options):
        try:
            cluster, _ = load_cluster_file(DEMO_DIR / "cluster.yaml")
            load_org_file(DEMO_DIR / "org.yaml")
        except LoadError as error:
            raise CommandError("demo files refused:\n  " + "\n  ".join(error.problems)) from None
        self.stdout.write(f"demo loaded: cluster {cluster.name}, org from demo/org.yaml")
        self.stdout.write(
            f"demo logins (password {DEMO_PASSWORD}): researchers alice, bob, carol, dan, erin; "
            "managers pat (nlp), lee (olmo), mia (multimodal); on-call olga; admin admin"
        )

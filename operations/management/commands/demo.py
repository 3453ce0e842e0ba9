
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from budgets.loaders import load_org_file
from budgets.models import Unit
from scheduler.demo_history import seed_history
from scheduler.models import Job
from topology.loaders import load_cluster_file
from topology.spec import LoadError

DEMO_DIR = settings.DEMO_DIR
DEMO_PASSWORD = "allot-demo"


class Command(BaseCommand):
    help = (
        "Load the demo clusters and org (demo/cluster.yaml, demo/agent-cluster.yaml, demo/org.yaml) and, the first "
        "time, a week of history on the simulated cluster. "
        "Safe to run again: the org is loaded once, so shares changed in the browser stay as they were."
    )

    def add_arguments(self, parser):
        parser.add_argument("--no-history", dest="history", action="store_false",
                            help="do not seed the week of ended jobs on a fresh database")

    def handle(self, *args, **options):
        try:
            cluster, _ = load_cluster_file(DEMO_DIR / "cluster.yaml")
            lab, _ = load_cluster_file(DEMO_DIR / "agent-cluster.yaml")
            first = not Unit.objects.exists()
            if first:
                load_org_file(DEMO_DIR / "org.yaml")
        except LoadError as error:
            raise CommandError("demo files refused:\n  " + "\n  ".join(error.problems)) from None
        org = "org from demo/org.yaml" if first else "org kept as it is (loaded once; `manage.py load_org` reloads it)"
        self.stdout.write(f"demo loaded: cluster {cluster.name} (simulated), cluster {lab.name} (agent: its hosts "
                          f"wait for allot-agent), {org}")
        if first and options.get("history", True):
            from django.utils import timezone

            jobs = seed_history(cluster, now=timezone.now())
            if jobs:
                running = Job.objects.filter(cluster=cluster, state="running").count()
                self.stdout.write(f"demo history: a week of {jobs - running} ended jobs and {running} still running, "
                                  "so fair share, the dashboards and the what-if have real numbers from the first "
                                  "page load")
        self.stdout.write(
            f"demo logins (password {DEMO_PASSWORD}): researchers alice, bob, carol, dan, erin; "
            "managers pat (nlp), lee (olmo), mia (multimodal); on-call olga; admin admin"
        )

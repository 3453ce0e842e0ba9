from django.core.management.base import BaseCommand, CommandError

from topology.models import AgentToken, Host


class Command(BaseCommand):
    help = "Print the agent token of HOST, creating it if needed. The token acts for that host only."

    def add_arguments(self, parser):
        parser.add_argument("host")

    def handle(self, *args, host, **options):
        found = Host.objects.filter(name=host).first()
        if found is None:
            raise CommandError(f"no host named {host!r}")
        self.stdout.write(AgentToken.for_host(found).key)

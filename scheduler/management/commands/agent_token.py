from django.core.management.base import BaseCommand, CommandError

from topology.models import AgentToken, Host

ACTOR = "system:agent_token"


class Command(BaseCommand):
    help = ("Issue the agent token of HOST and print it: the only time it is shown (only its hash is kept). "
            "A host that has one keeps it unless --rotate: then a new one is issued and the old one revoked at "
            "once. The token acts for that host only; keep it in a 0600 file (allot-agent --token-file).")

    def add_arguments(self, parser):
        parser.add_argument("host")
        parser.add_argument("--rotate", action="store_true", help="issue a new token and revoke the current one")
        parser.add_argument("--reason", default="", help="kept in the host's history")

    def handle(self, *args, host, rotate, reason, **options):
        found = Host.objects.filter(name=host).first()
        if found is None:
            raise CommandError(f"no host named {host!r}")
        live = AgentToken.objects.live().filter(host=found).first()
        if live is not None and not rotate:
            raise CommandError(
                f"{host} already has a token ({live.prefix}…, issued {live.created_at:%Y-%m-%d %H:%M}); only its "
                "hash is kept, so it cannot be shown again. `--rotate` issues a new one and revokes it."
            )
        token = AgentToken.issue(host=found, actor=ACTOR,
                                 reason=reason or ("rotated" if live is not None else "first token"))
        self.stdout.write(token.key)

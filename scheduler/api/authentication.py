"""Agents authenticate with their host's token: `Authorization: Agent <key>`.

Only the token's SHA-256 is stored (topology.models.AgentToken); a revoked token is refused like an unknown
one. Whatever bytes the header holds, the answer is a 401, never a 500.
"""

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from topology.models import AgentToken

# `last_used_at` is written at most this often per token: not one more write per heartbeat.
LAST_USED_RESOLUTION = timedelta(minutes=1)
MAX_KEY_LENGTH = 200


class AgentPrincipal:
    """The request's user when an agent calls: it stands for one host, nothing else."""

    is_authenticated = True
    is_anonymous = False
    is_superuser = False
    is_staff = False
    # The throttles (accounts/throttles.py) ask this, not the class: accounts sits below the scheduler.
    is_agent = True

    def __init__(self, host):
        self.host = host
        self.pk = None
        self.username = f"agent:{host.name}"

    def get_username(self):
        return self.username

    def __str__(self):
        return self.username


class AgentTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Agent"

    def authenticate(self, request):
        raw = request.headers.get("authorization", b"")
        if isinstance(raw, str):
            # WSGI hands headers over as latin-1 text; a test client may hand over anything.
            raw = raw.encode("latin-1", errors="replace")
        header = raw.split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2 or len(header[1]) > MAX_KEY_LENGTH:
            raise exceptions.AuthenticationFailed("Invalid agent header: expected `Agent <token>`.")
        try:
            key = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid agent header: the token is not ASCII text.")
        token = AgentToken.find(key)
        if token is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked agent token.")
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            AgentToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return AgentPrincipal(token.host), token

    def authenticate_header(self, request):
        return self.keyword


class IsAgent(permissions.BasePermission):
    message = "Only a host's agent may call this, with its agent token."

    def has_permission(self, request, view):
        return isinstance(request.user, AgentPrincipal)



class AgentTokenScheme(OpenApiAuthenticationExtension):
    """Documents the agents' scheme in the OpenAPI schema (`Authorization: Agent <key>`)."""

    target_class = "scheduler.api.authentication.AgentTokenAuthentication"
    name = "agentToken"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Agent <key>`: the host's token from `manage.py agent_token HOST` (`--rotate` "
                               "replaces it)."}

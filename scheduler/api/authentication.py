"""Agents authenticate with their host's token: `Authorization: Agent <key>`."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from topology.models import AgentToken


class AgentPrincipal:
    """The request's user when an agent calls: it stands for one host, nothing else."""

    is_authenticated = True
    is_anonymous = False
    is_superuser = False
    is_staff = False

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
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid agent header: expected `Agent <token>`.")
        token = AgentToken.objects.select_related("host__domain__cluster").filter(key=header[1].decode()).first()
        if token is None:
            raise exceptions.AuthenticationFailed("Unknown agent token.")
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
                "description": "`Agent <key>`: the host's token from `manage.py agent_token HOST`."}

"""Users authenticate with an API token: `Authorization: Token <key>` (FORMATS.md)."""

import re

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from accounts.models import ApiToken, digest_of
from accounts.services import token_touch

KEY = re.compile(rb"[0-9a-f]{40}")


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header: expected `Token <key>`.")
        # Checked before any lookup: a key of another shape is no key of ours.
        if not KEY.fullmatch(header[1]):
            raise exceptions.AuthenticationFailed("Invalid token: a key is 40 hexadecimal characters.")
        token = ApiToken.objects.select_related("user").filter(digest=digest_of(header[1].decode())).first()
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        now = timezone.now()
        if token.revoked_at is not None:
            raise exceptions.AuthenticationFailed("This token was revoked; log in again (`allot login`).")
        if token.expires_at <= now:
            raise exceptions.AuthenticationFailed(
                f"This token expired at {token.expires_at:%Y-%m-%d %H:%M} UTC; log in again (`allot login`).")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("This account is disabled.")
        token_touch(token=token, at=now)
        return token.user, token

    def authenticate_header(self, request):
        return self.keyword


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Documents the users' scheme in the OpenAPI schema (`Authorization: Token <key>`)."""

    target_class = "accounts.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Token <key>`: POST /api/v1/auth/token/ makes one; it expires and can be revoked."}

"""API tokens: made at each login, used until they expire or are revoked. Keyword-only, every change recorded."""

import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import ApiToken, digest_of

KEY_BYTES = 20  # 40 hex characters: the shape of the tokens the API has always handed out


@transaction.atomic
def token_create(*, user, name: str = "", days: int | None = None, at: datetime | None = None
                 ) -> tuple[ApiToken, str]:
    """A new token for `user`, and its key (returned only here: the database keeps its digest)."""
    at = at or timezone.now()
    key = secrets.token_hex(KEY_BYTES)
    token = ApiToken.objects.create(
        user=user, name=name[:100], digest=digest_of(key), prefix=key[:8], created_at=at,
        expires_at=at + timedelta(days=days or settings.ALLOT_TOKEN_DAYS), last_used_at=at,  # to log in
    )
    return token, key


def token_revoke(*, token: ApiToken, actor, reason: str, at: datetime | None = None) -> bool:
    """Revoke one token; False when it was revoked already (the first revocation's who and why stay)."""
    return bool(ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=at or timezone.now(), revoked_by=actor.get_username(), revoke_reason=reason[:200],
    ))


def token_revoke_all(*, user, actor, reason: str, at: datetime | None = None) -> int:
    return ApiToken.objects.filter(user=user, revoked_at__isnull=True).update(
        revoked_at=at or timezone.now(), revoked_by=actor.get_username(), revoke_reason=reason[:200],
    )


def token_touch(*, token: ApiToken, at: datetime) -> None:
    """Note when a token was last used, at most once a minute (not a write per request)."""
    if token.last_used_at is None or at - token.last_used_at > timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=at)

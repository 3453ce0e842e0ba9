import hashlib

from django.conf import settings
from django.db import models
from django.utils import timezone


def digest_of(key: str) -> str:
    """What is stored of a token: its SHA-256. The key itself is shown once, when it is made."""
    return hashlib.sha256(key.encode("ascii")).hexdigest()


class ApiTokenQuerySet(models.QuerySet):
    def usable(self, at=None):
        at = at or timezone.now()
        return self.filter(revoked_at__isnull=True, expires_at__gt=at)


class ApiToken(models.Model):
    """A user's API token (`Authorization: Token <key>`): one per login, with an expiry, revocable."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True, help_text="What it is for, e.g. the machine it was made on.")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    # The key's first characters, to tell tokens apart in lists (never enough to use one).
    prefix = models.CharField(max_length=8, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=150, blank=True)
    revoke_reason = models.CharField(max_length=200, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "revoked_at"], name="accounts_token_user_revoked")]

    def __str__(self):
        return f"token {self.prefix}… of {self.user}"

    @property
    def state(self) -> str:
        if self.revoked_at:
            return "revoked"
        return "expired" if self.expires_at <= timezone.now() else "active"

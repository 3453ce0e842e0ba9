"""What a user asked to be told, and every message we owe them, with how its delivery went."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class Kind(models.TextChoices):
    JOB_START = "job_start", "a job of mine started"
    JOB_END = "job_end", "a job of mine ended"
    JOB_PREEMPTED = "job_preempted", "a job of mine was preempted"
    BUDGET_WAITING = "budget_waiting", "a budget request waits for my decision"


class Channel(models.TextChoices):
    EMAIL = "email", "e-mail"
    WEBHOOK = "webhook", "webhook"


class Status(models.TextChoices):
    PENDING = "pending", "pending"
    SENT = "sent", "sent"
    FAILED = "failed", "failed"


class Subscription(models.Model):
    """One user's choices: which events, by e-mail (to their address) and/or a webhook (Slack-compatible JSON)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="notification_subscription")
    email = models.BooleanField(default=False, help_text="Send to the account's e-mail address.")
    webhook_url = models.URLField(max_length=500, blank=True,
                                  help_text="POST {\"text\": …} here (a Slack or Mattermost incoming webhook).")
    job_start = models.BooleanField(default=False)
    job_end = models.BooleanField(default=False)
    job_preempted = models.BooleanField(default=False)
    budget_waiting = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"notifications of {self.user}"

    def wants(self, kind: str) -> bool:
        return bool(getattr(self, kind, False))

    def channels(self) -> list[tuple[str, str]]:
        """(channel, target) pairs this user receives on."""
        found = []
        if self.email and self.user.email:
            found.append((Channel.EMAIL, self.user.email))
        if self.webhook_url:
            found.append((Channel.WEBHOOK, self.webhook_url))
        return found


class Notification(models.Model):
    """One message to one user on one channel; delivered (and retried) outside the tick."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    target = models.CharField(max_length=500, help_text="The address or URL it goes to.")
    subject = models.CharField(max_length=200)
    text = models.CharField(max_length=2000)
    link = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="notifications_due")]

    def __str__(self):
        return f"{self.get_kind_display()} → {self.user} by {self.channel} ({self.status})"

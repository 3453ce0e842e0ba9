"""Notifications: `notify` records what a user is owed (a few rows, inside the caller's transaction, no
network: a tick never waits on a mail server or a webhook); `deliver_due` sends what is due, retrying
failures with back-off, from a Celery task in production or a thread of `run_scheduler` in the embedded
default.

This app knows users and texts only: the scheduler and the budgets build the messages.
"""

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from notifications.models import Kind, Notification, Status, Subscription

log = logging.getLogger(__name__)
# After the 1st, 2nd, … failed attempt, the next one waits this long; after the last, the message is failed.
RETRY_DELAYS = (timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=30), timedelta(hours=2))
MAX_ATTEMPTS = len(RETRY_DELAYS) + 1
WEBHOOK_TIMEOUT_SECONDS = 5
# A claimed message is not picked again for this long (another worker, a crash mid-send).
CLAIM = timedelta(minutes=2)


def link(path: str) -> str:
    return settings.ALLOT_BASE_URL.rstrip("/") + path if path else ""


def notify(kind: str, *, user_ids: Iterable[int], subject: str, text: str, path: str = "",
           at: datetime | None = None) -> int:
    """Owe `subject` / `text` to each of `user_ids` who subscribed to `kind`; returns messages recorded."""
    user_ids = set(user_ids)
    if not user_ids:
        return 0
    at = at or timezone.now()
    rows = []
    for subscription in Subscription.objects.filter(user_id__in=user_ids, **{kind: True}).select_related("user"):
        for channel, target in subscription.channels():
            rows.append(Notification(user_id=subscription.user_id, kind=kind, channel=channel, target=target,
                                     subject=subject[:200], text=text[:2000], link=link(path)[:500],
                                     created_at=at, next_attempt_at=at))
    Notification.objects.bulk_create(rows)
    if rows and not settings.CELERY_TASK_ALWAYS_EAGER:
        from notifications.tasks import deliver

        # With a broker, a worker sends them at once; in-process, the run_scheduler thread does (never the tick).
        transaction.on_commit(lambda: deliver.delay())
    return len(rows)


def _send(notification: Notification) -> None:
    if notification.channel == "email":
        body = notification.text + (f"\n\n{notification.link}" if notification.link else "")
        send_mail(notification.subject, body, settings.DEFAULT_FROM_EMAIL, [notification.target])
        return
    text = f"*{notification.subject}*\n{notification.text}" + (f"\n<{notification.link}>" if notification.link else "")
    response = requests.post(notification.target, json={"text": text}, timeout=WEBHOOK_TIMEOUT_SECONDS)
    if response.status_code >= 300:
        raise RuntimeError(f"the webhook answered {response.status_code} {response.reason}".strip())


def deliver_due(*, now: datetime | None = None, limit: int = 100) -> int:
    """Send the messages that are due; returns how many went out. Failures are retried later, then failed."""
    now = now or timezone.now()
    sent = 0
    due = list(Notification.objects.filter(status=Status.PENDING, next_attempt_at__lte=now)
               .order_by("next_attempt_at", "id").values_list("pk", "attempts")[:limit])
    for pk, attempts in due:
        # Claimed by whoever moves its attempt count first: two workers never send one message twice.
        if not Notification.objects.filter(pk=pk, status=Status.PENDING, attempts=attempts).update(
                attempts=F("attempts") + 1, next_attempt_at=now + CLAIM):
            continue
        notification = Notification.objects.get(pk=pk)
        try:
            _send(notification)
        except Exception as error:  # any failure of a mail server or webhook: kept, shown, retried
            message = f"{type(error).__name__}: {error}"[:500]
            if notification.attempts >= MAX_ATTEMPTS:
                Notification.objects.filter(pk=pk).update(status=Status.FAILED, last_error=message)
            else:
                Notification.objects.filter(pk=pk).update(
                    last_error=message, next_attempt_at=now + RETRY_DELAYS[notification.attempts - 1])
            log.warning("notification %s to %s failed (attempt %d): %s", pk, notification.target,
                        notification.attempts, message)
            continue
        Notification.objects.filter(pk=pk).update(status=Status.SENT, sent_at=timezone.now(), last_error="")
        sent += 1
    return sent


def subscription_of(user) -> Subscription:
    return Subscription.objects.filter(user=user).first() or Subscription(user=user)


def subscription_update(*, user, email: bool, webhook_url: str, kinds: Iterable[str]) -> Subscription:
    """Save what `user` wants to be told, and how."""
    subscription = subscription_of(user)
    subscription.email, subscription.webhook_url = email, webhook_url
    chosen = set(kinds)
    for kind in Kind.values:
        setattr(subscription, kind, kind in chosen)
    subscription.save()
    return subscription


def recent_for(user, limit: int = 20):
    return Notification.objects.filter(user=user)[:limit]

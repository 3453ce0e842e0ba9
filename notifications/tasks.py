from celery import shared_task

from notifications.services import deliver_due


@shared_task(name="notifications.deliver")
def deliver() -> int:
    """Send what is due (beat runs it every few seconds; `notify` also asks for it when it records one)."""
    return deliver_due()

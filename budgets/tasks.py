"""Celery entry points for budgets: like views, they fetch and call a service, and take no model instances."""

from celery import shared_task
from django.utils import timezone

from budgets.services import allocations_expire


@shared_task(name="budgets.tasks.expire_allocations")
def expire_allocations() -> int:
    """Record every time-limited grant that has ended (exactly once each); returns how many."""
    return len(allocations_expire(now=timezone.now()))

"""Celery entry points for budgets: like views, they fetch and call a service, and take no model instances."""

from celery import shared_task
from django.utils import timezone

from budgets.services import allocations_expire


@shared_task(name="budgets.tasks.expire_allocations")
def expire_allocations() -> int:
    """Record every time-limited grant that has ended (exactly once each); returns how many."""
    return len(allocations_expire(now=timezone.now()))


@shared_task(name="budgets.tasks.run_what_if")
def run_what_if(what_if_id: int) -> str | None:
    """Simulate one queued what-if (budgets/whatif.py); returns its status. A failed simulation is recorded on
    the what-if with its error, not raised: the page shows it."""
    from budgets.whatif import what_if_run

    done = what_if_run(what_if_id=what_if_id)
    return done.status if done is not None else None

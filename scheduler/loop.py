"""The scheduler loop shared by `manage.py run_scheduler` and the Celery task."""

import logging

from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from budgets.services import allocations_expire
from config.logs import log_context, new_tick_id
from scheduler.leader import Leadership, holder_name
from scheduler.tick import TickResult, run_tick
from topology.models import Cluster

log = logging.getLogger(__name__)


def tick_all(leadership: Leadership, *, clusters=None) -> list[TickResult]:
    """Tick every cluster (or the named ones) if this process leads; [] if it stands by.

    A database that goes away (PostgreSQL restarting, SQLite busy) costs the
    ticks it interrupts, never the loop: the next call starts afresh.
    """
    if not leadership.acquire():
        log.debug("scheduler: %s", leadership.status)
        return []
    # Who ticked and under which lock, for the tick record ("host:pid (leading on the database lock alone…)").
    leader = f"{holder_name()} ({leadership.status})"[:200]
    results = []
    try:
        queryset = Cluster.objects.order_by("name")
        if clusters:
            queryset = queryset.filter(name__in=clusters)
        for cluster in list(queryset):
            with log_context(tick=new_tick_id(), cluster=cluster.name):
                try:
                    results.append(run_tick(cluster, leader=leader))
                except DatabaseError as error:
                    log.error("tick on %s failed: %s", cluster.name, error)
                    close_old_connections()
        run_housekeeping()
    except DatabaseError as error:
        log.error("scheduler: database unavailable: %s", error)
        close_old_connections()
    return results


def run_housekeeping() -> None:
    """Periodic bookkeeping that rides on the tick: budget grants that reached their end."""
    allocations_expire(now=timezone.now())

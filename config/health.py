"""`/healthz` and `/readyz`: what a load balancer, an orchestrator or an operator asks before sending work.

`/healthz` answers 200 while the process serves requests: it touches nothing else, so a database outage
never gets a web process restarted. `/readyz` answers 200 only when this deployment can do its job, else
503; the body (JSON) names every check and, for each that fails, why:

- database: reachable (one `SELECT 1`);
- migrations: every migration this code ships is applied (checked until it passes, then once per process);
- scheduler: every cluster was ticked by a leader within 3 tick intervals (ALLOT_TICK_SECONDS);
- broker: Redis answers a PING, when REDIS_URL is set (Celery's broker and the leader lease).
"""

import time

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from topology.models import Cluster

# A leader that has not ticked for this many intervals is gone (a standby takes over within about one).
TICKS_BEFORE_STALE = 3
_migrations_done = False


@never_cache
@require_GET
def healthz(request):
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request):
    checks = {"database": _database()}
    if checks["database"] == "ok":
        checks["migrations"] = _migrations()
        checks["scheduler"] = _scheduler() if checks["migrations"] == "ok" else "not checked: migrations pending"
    else:
        checks["migrations"] = checks["scheduler"] = "not checked: database unreachable"
    if settings.REDIS_URL:
        checks["broker"] = _broker(settings.REDIS_URL)
    ready = all(value == "ok" for value in checks.values())
    return JsonResponse({"status": "ready" if ready else "not ready", "checks": checks}, status=200 if ready else 503)


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except DatabaseError as error:
        connection.close()
        return f"unreachable: {error.__class__.__name__}: {str(error).strip().splitlines()[0][:200]}"


def _migrations() -> str:
    global _migrations_done
    if _migrations_done:
        return "ok"
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        names = ", ".join(f"{migration.app_label}.{migration.name}" for migration, _ in plan[:5])
        return f"{len(plan)} not applied ({names}{', …' if len(plan) > 5 else ''}): run `manage.py migrate`"
    _migrations_done = True
    return "ok"


def _scheduler() -> str:
    from django.db.models import Max

    interval = settings.ALLOT_TICK_SECONDS
    limit = TICKS_BEFORE_STALE * interval
    now = timezone.now()
    stale = []
    for name, last in Cluster.objects.annotate(last=Max("ticks__started_at")).values_list("name", "last").order_by(
        "name"
    ):
        if last is None:
            stale.append(f"{name} never ticked")
        elif (now - last).total_seconds() > limit:
            stale.append(f"{name} last ticked {(now - last).total_seconds():.0f} s ago")
    if stale:
        return (f"no leader ticked within {TICKS_BEFORE_STALE} ticks ({limit} s): {'; '.join(stale)}; "
                "is a scheduler (celery beat + a tick worker, or run_scheduler) running?")
    return "ok"


def _broker(url: str) -> str:
    import redis

    began = time.monotonic()
    try:
        redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1).ping()
        return "ok"
    except redis.RedisError as error:
        return f"unreachable after {time.monotonic() - began:.1f} s: {error.__class__.__name__}"

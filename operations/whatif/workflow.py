"""The what-if's workflow (services): ask, enqueue, run; every status change logged with who and why.

`what_if_request` caches per request and state (`readers.state_key`: the
share tried, the snapshot hour and the cluster's shares) and otherwise records
a queued `WhatIf`; `what_if_submit` also enqueues `budgets.tasks.run_what_if`
(in-process in the embedded default, a Celery worker in production);
`what_if_run` claims it, simulates (`comparison.simulate_both`) and stores the
result or the error. Every status change is appended to the what-if's log with
who and why.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from budgets.choices import WHAT_IF_ACTIVE, WhatIfStatus
from budgets.models import BudgetRequest, WhatIf
from budgets.services import percent

from .comparison import simulate_both
from .readers import build_inputs, state_key

log = logging.getLogger(__name__)

# A what-if queued or running for longer than this was lost (a worker died, a broker dropped it).
STALE_AFTER = timedelta(minutes=15)
WORKER_ACTOR = "system:what-if"


def _entry(at: datetime, status: str, actor: str, reason: str) -> dict:
    return {"at": at.isoformat(), "status": status, "actor": actor, "reason": reason}


def _actor(user) -> str:
    return user.get_username() if hasattr(user, "get_username") else str(user)


@transaction.atomic
def _transition(what_if_id: int, *, from_statuses, to: str, actor: str, reason: str, now: datetime | None = None,
                **fields) -> WhatIf | None:
    """Move a what-if from one of `from_statuses` to `to` and log it; None if it was not in one (another worker
    claimed it, or it ended meanwhile)."""
    now = now or timezone.now()
    row = WhatIf.objects.select_for_update().filter(pk=what_if_id, status__in=from_statuses).first()
    if row is None:
        return None
    row.status = to
    for name, value in fields.items():
        setattr(row, name, value)
    row.log = [*row.log, _entry(now, to, actor, reason)]
    row.save(update_fields=["status", "log", *fields])
    return row


@transaction.atomic
def what_if_request(*, budget_request: BudgetRequest, user, share=None, force: bool = False,
                    now: datetime | None = None) -> tuple[WhatIf, bool]:
    """The what-if for this request and the current state: a fresh one if cached, else a new queued one.

    Returns (what-if, created). `share`: the share to try (percent of the parent; default: the one asked).
    `force` runs again although a result for this state exists (never while one is on its way).
    """
    now = now or timezone.now()
    share = budget_request.requested_percent if share in (None, "") else percent(share, "share")
    if not budget_request.is_open:
        raise ValidationError({"status": [
            f"request #{budget_request.pk} is {budget_request.status}: the what-if compares a change still to be "
            "decided; its last result stays on the page"
        ]})
    key, hour = state_key(budget_request, share, now)
    BudgetRequest.objects.select_for_update().filter(pk=budget_request.pk).first()  # one new run per click
    for stale in budget_request.what_ifs.filter(status__in=WHAT_IF_ACTIVE, created_at__lt=now - STALE_AFTER):
        _transition(stale.pk, from_statuses=WHAT_IF_ACTIVE, to=WhatIfStatus.FAILED, actor=_actor(user), now=now,
                    reason="found still waiting when asked again", finished_at=now,
                    error=f"not finished within {STALE_AFTER.seconds // 60} minutes: no worker took it, or it died")
    cached = budget_request.what_ifs.filter(state_key=key).exclude(status=WhatIfStatus.FAILED).first()
    if cached is not None and (cached.is_active or not force):
        return cached, False
    reason = "asked again" if cached is not None else "asked"
    created = WhatIf.objects.create(
        budget_request=budget_request, requested_by=user, created_at=now, share_percent=share,
        snapshot_hour=hour, state_key=key, log=[_entry(now, WhatIfStatus.QUEUED, _actor(user), reason)],
    )
    return created, True


def what_if_submit(*, budget_request: BudgetRequest, user, share=None, force: bool = False) -> tuple[WhatIf, bool]:
    """`what_if_request`, then enqueue the simulation (which runs right here in the embedded default)."""
    from operations.tasks import run_what_if

    found, created = what_if_request(budget_request=budget_request, user=user, share=share, force=force)
    if created:
        try:
            run_what_if.delay(found.pk)
        except Exception as error:  # the broker is down: say so on the page rather than fail it
            log.exception("what-if %s could not be queued", found.pk)
            _transition(found.pk, from_statuses=WHAT_IF_ACTIVE, to=WhatIfStatus.FAILED, actor="system:queue",
                        reason="could not be queued", finished_at=timezone.now(),
                        error=f"could not be queued ({type(error).__name__}: {error})"[:2000])
        found.refresh_from_db()
    return found, created


def what_if_run(*, what_if_id: int, actor: str = WORKER_ACTOR) -> WhatIf | None:
    """Claim a queued what-if, simulate both sides and store the result, or the error: never raises for a
    failed simulation. None if there is no such what-if; unchanged if another worker claimed it."""
    now = timezone.now()
    claimed = _transition(what_if_id, from_statuses=[WhatIfStatus.QUEUED], to=WhatIfStatus.RUNNING, actor=actor,
                          reason="simulating the next 7 days, without and with the change", now=now, started_at=now)
    if claimed is None:
        return WhatIf.objects.filter(pk=what_if_id).first()
    began = time.perf_counter()
    assumptions: dict = {}
    try:
        budget_request = BudgetRequest.objects.select_related("unit__parent", "cluster").get(
            pk=claimed.budget_request_id)
        inputs = build_inputs(budget_request, share=claimed.share_percent, now=now)
        assumptions = inputs.assumptions
        results = simulate_both(inputs)
    except Exception as error:
        log.exception("what-if %s failed", what_if_id)
        return _transition(what_if_id, from_statuses=[WhatIfStatus.RUNNING], to=WhatIfStatus.FAILED, actor=actor,
                           reason="the simulation failed", finished_at=timezone.now(), assumptions=assumptions,
                           error=f"{type(error).__name__}: {error}"[:2000])
    seconds = time.perf_counter() - began
    results["wall_seconds"] = round(seconds, 3)
    return _transition(what_if_id, from_statuses=[WhatIfStatus.RUNNING], to=WhatIfStatus.DONE, actor=actor,
                       reason=f"simulated in {seconds:.1f} s", finished_at=timezone.now(),
                       assumptions=assumptions, results=results)

"""Host workflows: cordon, drain, resume, and the health policy's automated actions.

One path for people and for the health policy: every change goes through
`Host.set_state`, which keeps who, why and when on the host and in its
history. Keyword-only, atomic; the host row is locked so a change never
crosses the tick's own (draining → drained).
"""

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from topology.choices import HostState
from topology.health import HEALTH_ACTOR, xid_meaning
from topology.models import Host, HostEvent

MAX_REASON_LENGTH = 500

# action -> (states it applies to, state it leads to)
TRANSITIONS = {
    "cordon": ((HostState.UP, HostState.DRAINING), HostState.CORDONED),
    "drain": ((HostState.UP, HostState.CORDONED), HostState.DRAINING),
    "resume": ((HostState.CORDONED, HostState.DRAINING, HostState.DRAINED, HostState.DOWN), HostState.UP),
}
# Asking for what is already so (or further along) changes nothing and is not an error.
ALREADY = {
    "cordon": (HostState.CORDONED,),
    "drain": (HostState.DRAINING, HostState.DRAINED),
    "resume": (HostState.UP,),
}
REFUSALS = {
    ("cordon", HostState.DRAINED): "{host} is drained, out of service already; resume it first",
    ("cordon", HostState.DOWN): "{host} is down, out of service already; resume it first",
    ("drain", HostState.DOWN): "{host} is down: its jobs are already gone and it is listed for repair; "
                               "resume it once repaired",
}
# Automated actions only ever take a host further out of service.
ESCALATIONS = {
    "cordon": (HostState.UP,),
    "drain": (HostState.UP, HostState.CORDONED),
    "down": (HostState.UP, HostState.CORDONED, HostState.DRAINING),
}


class HostActionError(Exception):
    """An action refused: `field` names the input at fault (None: the host's state)."""

    def __init__(self, message: str, field: str | None = None):
        self.message = message
        self.field = field
        super().__init__(message)


@dataclass
class HostActionResult:
    host: Host
    changed: bool
    message: str


def actor_name(actor) -> str:
    return actor.get_username() if hasattr(actor, "get_username") else str(actor)


def clean_reason(reason) -> str:
    reason = " ".join(str(reason or "").split())
    if not reason:
        raise HostActionError("required: say why, for the host's history and whoever repairs it", "reason")
    if len(reason) > MAX_REASON_LENGTH:
        raise HostActionError(f"at most {MAX_REASON_LENGTH} characters", "reason")
    return reason


def _act(action: str, *, host: Host, actor, reason: str, at: datetime | None) -> HostActionResult:
    reason = clean_reason(reason)
    # The host's row only: joined rows would lock the cluster too and serialize every host action with it.
    host = Host.objects.select_for_update(of=("self",)).select_related("domain__cluster").get(pk=host.pk)
    allowed, target = TRANSITIONS[action]
    if host.state in ALREADY[action]:
        return HostActionResult(host, False, f"{host.name} is already {host.state}; nothing changed")
    if host.state not in allowed:
        message = REFUSALS.get((action, host.state), "{host} is {state}: it cannot be {done}")
        raise HostActionError(message.format(host=host.name, state=host.state, done=_done(action)))
    host.set_state(target, actor=actor_name(actor), reason=reason, at=at or timezone.now())
    return HostActionResult(host, True, f"{host.name} is now {target}")


def _done(action: str) -> str:
    return {"cordon": "cordoned", "drain": "drained", "resume": "resumed"}[action]


@transaction.atomic
def host_cordon(*, host: Host, actor, reason: str, at: datetime | None = None) -> HostActionResult:
    """No new jobs; running ones stay (a drain in progress stops evicting)."""
    return _act("cordon", host=host, actor=actor, reason=reason, at=at)


@transaction.atomic
def host_drain(*, host: Host, actor, reason: str, at: datetime | None = None) -> HostActionResult:
    """No new jobs; unallocated ones leave at once, allocated ones at their minimum runtime; then drained."""
    return _act("drain", host=host, actor=actor, reason=reason, at=at)


@transaction.atomic
def host_resume(*, host: Host, actor, reason: str, at: datetime | None = None) -> HostActionResult:
    """Back in service: from cordoned, draining, drained or down."""
    return _act("resume", host=host, actor=actor, reason=reason, at=at)


@transaction.atomic
def host_health_action(*, host: Host, action: str, reason: str, at: datetime | None = None) -> bool:
    """Apply the health policy's `action` to `host` if it takes the host further out of service.

    Recorded like a person's action, by `system:health`, with the event as its
    reason. Returns whether the host changed.
    """
    if action not in ESCALATIONS:
        return False
    host = Host.objects.select_for_update().get(pk=host.pk)
    if host.state not in ESCALATIONS[action]:
        return False
    target = {"cordon": HostState.CORDONED, "drain": HostState.DRAINING, "down": HostState.DOWN}[action]
    host.set_state(target, actor=HEALTH_ACTOR, reason=reason[:MAX_REASON_LENGTH], at=at or timezone.now())
    return True


def record_xid(*, host: Host, code: int, gpu: int | None = None, detail: str = "", at: datetime,
               actor: str) -> str:
    """Keep an XID event with NVIDIA's meaning; return the text an automated action gives as its reason."""
    where = f" on GPU {gpu}" if gpu is not None else ""
    meaning = xid_meaning(code) or detail or "see NVIDIA's Xid catalog"
    text = f"XID {code}{where}: {meaning}"
    HostEvent.objects.create(
        host=host, at=at, kind=HostEvent.Kind.XID, actor=actor, code=code, gpu=gpu,
        detail=(text + (f" ({detail})" if detail and detail != meaning else ""))[:1000],
    )
    return text


def record_health_event(*, host: Host, kind: str, gpu: int | None, detail: str, at: datetime, actor: str) -> str:
    """Keep a health event other than an XID (an NVML error, uncorrected ECC errors, pending row repairs) on
    the GPU it names; return the text an automated action gives as its reason."""
    label = {HostEvent.Kind.NVML_ERROR: "NVML error", HostEvent.Kind.ECC: "uncorrected ECC errors",
             HostEvent.Kind.ROWS_PENDING: "memory repair pending"}.get(kind, kind)
    text = f"{label}{f' on GPU {gpu}' if gpu is not None else ''}: {detail}" if detail else label
    HostEvent.objects.create(host=host, at=at, kind=kind, actor=actor, gpu=gpu, detail=text[:1000])
    return text


@transaction.atomic
def host_report_xid(*, host: Host, code: int, gpu: int | None = None, detail: str = "",
                    at: datetime | None = None, actor: str) -> bool:
    """An XID from outside a heartbeat (the demo's fault injector, an external monitor): recorded, then the
    cluster's policy applied. Returns whether the host changed state."""
    at = at or timezone.now()
    reason = record_xid(host=host, code=code, gpu=gpu, detail=detail, at=at, actor=actor)
    action = host.domain.cluster.health.for_xid(code)
    return action != "none" and host_health_action(host=host, action=action, reason=reason, at=at)

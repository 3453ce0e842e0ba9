from django.db import models


class Role(models.TextChoices):
    MEMBER = "member", "member"
    MANAGER = "manager", "manager"


class ChangeSource(models.TextChoices):
    LOADER = "loader", "org file"
    REQUEST = "request", "approved request"
    DIRECT = "direct", "direct edit"
    EXPIRY = "expiry", "expiry"


class RequestStatus(models.TextChoices):
    PENDING = "pending", "pending"
    APPROVED = "approved", "approved"
    DENIED = "denied", "denied"
    ESCALATED = "escalated", "escalated"
    CANCELLED = "cancelled", "cancelled"


# A request still waiting for someone: the one decision that may be open per unit and cluster.
OPEN_STATUSES = (RequestStatus.PENDING, RequestStatus.ESCALATED)


class WhatIfStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    DONE = "done", "done"
    FAILED = "failed", "failed"


# A what-if still on its way: a second click shows it instead of starting another.
WHAT_IF_ACTIVE = (WhatIfStatus.QUEUED, WhatIfStatus.RUNNING)

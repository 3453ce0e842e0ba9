from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from budgets.choices import OPEN_STATUSES, WHAT_IF_ACTIVE, ChangeSource, RequestStatus, Role, WhatIfStatus
from budgets.spec import POSIX_USER_MESSAGE, POSIX_USER_PATTERN

# A POSIX account name as useradd takes it (the org file's rule, budgets/spec.py).
POSIX_USER = RegexValidator(POSIX_USER_PATTERN, POSIX_USER_MESSAGE)


class UserProfile(models.Model):
    """What Allot knows of a person beyond Django's user: the OS account their jobs run as."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="profile")
    posix_user = models.CharField(
        max_length=32, blank=True, validators=[POSIX_USER],
        help_text="The account agents run this person's jobs as on every host; empty: their username.",
    )

    def __str__(self):
        return f"{self.user}: runs as {self.account}"

    @property
    def account(self) -> str:
        return self.posix_user or self.user.username


class UnitQuerySet(models.QuerySet):
    def projects(self):
        """Units jobs can be charged to: those with no children."""
        return self.filter(children__isnull=True)


class Unit(models.Model):
    """A node of the research org: organisation → program → project, any depth."""

    name = models.SlugField(max_length=64, unique=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    description = models.CharField(max_length=500, blank=True)

    objects = UnitQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def ancestors(self) -> list["Unit"]:
        """From the parent up to the top-level unit."""
        chain, unit = [], self.parent
        while unit is not None:
            chain.append(unit)
            unit = unit.parent
        return chain

    def path(self) -> list["Unit"]:
        return [*reversed(self.ancestors()), self]


class Membership(models.Model):
    """A user in a unit: members submit to it; managers manage it and its subtree."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    unit = models.ForeignKey(Unit, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)

    class Meta:
        ordering = ["unit__name", "role", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "unit", "role"], name="%(app_label)s_%(class)s_unique_role"),
        ]

    def __str__(self):
        return f"{self.user} {self.role} of {self.unit}"


class AllocationQuerySet(models.QuerySet):
    def current(self, at=None):
        at = at or timezone.now()
        return self.filter(Q(valid_to__isnull=True) | Q(valid_to__gt=at), valid_from__lte=at)


class Allocation(models.Model):
    """A unit's share of one cluster, as a percent of its parent's share."""

    unit = models.ForeignKey(Unit, on_delete=models.CASCADE, related_name="allocations")
    cluster = models.ForeignKey("topology.Cluster", on_delete=models.CASCADE, related_name="allocations")
    share_percent = models.DecimalField(
        max_digits=5, decimal_places=2,
        validators=[MinValueValidator(Decimal("0")), MaxValueValidator(Decimal("100"))],
    )
    valid_from = models.DateTimeField(default=timezone.now)
    valid_to = models.DateTimeField(null=True, blank=True)
    temporary = models.BooleanField(
        default=False, help_text="A time-limited grant (or room lent to one): valid_to is when it expires.",
    )
    resumes = models.BooleanField(default=False, help_text="The share coming back after a temporary grant.")
    budget_request = models.ForeignKey(
        "BudgetRequest", null=True, blank=True, on_delete=models.SET_NULL, related_name="allocations",
        help_text="The approved request that set this share, if any.",
    )
    end_recorded = models.BooleanField(
        default=False, help_text="The end of this period is in the ledger (its expiry, or the change that cut it).",
    )

    objects = AllocationQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "unit__name", "valid_from"]
        constraints = [
            models.CheckConstraint(
                condition=Q(share_percent__gte=0) & Q(share_percent__lte=100),
                name="%(app_label)s_%(class)s_share_in_range",
            ),
            models.CheckConstraint(
                condition=Q(valid_to__isnull=True) | Q(valid_to__gt=models.F("valid_from")),
                name="%(app_label)s_%(class)s_valid_period",
            ),
        ]

    def __str__(self):
        return f"{self.unit} {self.share_percent}% of parent on {self.cluster}"


class AllocationChange(models.Model):
    """Append-only record of every change to an allocation: who, when, why, before, after."""

    unit = models.ForeignKey(Unit, on_delete=models.PROTECT, related_name="allocation_changes")
    cluster = models.ForeignKey("topology.Cluster", on_delete=models.PROTECT, related_name="allocation_changes")
    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.CharField(max_length=150)
    source = models.CharField(max_length=16, choices=ChangeSource.choices)
    reason = models.CharField(max_length=2000)
    before_percent = models.DecimalField(max_digits=5, decimal_places=2, null=True, blank=True)
    after_percent = models.DecimalField(max_digits=5, decimal_places=2, null=True, blank=True)
    # The period the change applies to (empty for the org loader's changes, which apply from `at` on).
    valid_from = models.DateTimeField(null=True, blank=True)
    valid_to = models.DateTimeField(null=True, blank=True)
    allocation = models.ForeignKey(
        Allocation, null=True, blank=True, on_delete=models.SET_NULL, related_name="changes",
        help_text="The period this change opened (or, for an expiry, the one that ended).",
    )
    budget_request = models.ForeignKey(
        "BudgetRequest", null=True, blank=True, on_delete=models.SET_NULL, related_name="changes",
    )

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["allocation"], condition=Q(source=ChangeSource.EXPIRY),
                name="%(app_label)s_%(class)s_one_expiry_per_allocation",
            ),
        ]

    def __str__(self):
        return f"{self.unit} on {self.cluster}: {self.before_percent} → {self.after_percent} by {self.actor}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError("allocation changes are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("allocation changes are append-only")


class BudgetRequestQuerySet(models.QuerySet):
    def open(self):
        return self.filter(status__in=OPEN_STATUSES)

    def pending(self):
        return self.filter(status=RequestStatus.PENDING)


class BudgetRequest(models.Model):
    """A member asks for a new or changed share of a cluster for their unit; a manager above decides."""

    unit = models.ForeignKey(Unit, on_delete=models.PROTECT, related_name="budget_requests")
    cluster = models.ForeignKey("topology.Cluster", on_delete=models.PROTECT, related_name="budget_requests")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="budget_requests",
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    requested_percent = models.DecimalField(
        max_digits=5, decimal_places=2,
        help_text="Percent of the parent's share (of the cluster, for a top-level unit).",
    )
    starts_at = models.DateTimeField(null=True, blank=True, help_text="Empty: as soon as it is approved.")
    ends_at = models.DateTimeField(null=True, blank=True, help_text="Empty: until changed again.")
    justification = models.CharField(max_length=2000)
    # What the parent held when the request was made, so the amount asked can be read in GPU-hours later.
    parent_fraction_at_request = models.FloatField(default=1.0)

    status = models.CharField(
        max_length=16, choices=RequestStatus.choices, default=RequestStatus.PENDING, db_index=True,
    )
    decider_unit = models.ForeignKey(
        Unit, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="Managers of this unit (or above) decide; empty: the operators (superusers).",
    )
    granted_percent = models.DecimalField(max_digits=5, decimal_places=2, null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = models.CharField(max_length=2000, blank=True)
    allocation = models.ForeignKey(
        Allocation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The allocation period the approval created.",
    )
    escalated_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="escalations",
        help_text="The request this one asks room for, one level up.",
    )
    origin = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="The first request of an escalation chain.",
    )

    objects = BudgetRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "decider_unit"], name="budgets_request_waiting")]
        constraints = [
            models.CheckConstraint(
                condition=Q(requested_percent__gte=0) & Q(requested_percent__lte=100),
                name="%(app_label)s_%(class)s_requested_in_range",
            ),
            models.CheckConstraint(
                condition=Q(granted_percent__isnull=True) | (Q(granted_percent__gte=0) & Q(granted_percent__lte=100)),
                name="%(app_label)s_%(class)s_granted_in_range",
            ),
            models.CheckConstraint(
                condition=Q(starts_at__isnull=True) | Q(ends_at__isnull=True) | Q(ends_at__gt=models.F("starts_at")),
                name="%(app_label)s_%(class)s_valid_period",
            ),
        ]

    def __str__(self):
        return f"request #{self.pk}: {self.unit} {self.requested_percent} % on {self.cluster} ({self.status})"

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES

    def effective_start(self, now):
        """An approved share starts at `starts_at`, or at approval when that is empty or already past."""
        return max(self.starts_at, now) if self.starts_at else now

    def requested_fraction(self) -> float:
        """The amount asked, as a fraction of the cluster, at the parent's share when it was asked."""
        return float(self.requested_percent) / 100 * self.parent_fraction_at_request


class WhatIf(models.Model):
    """One run of the budget what-if for a request: the next days simulated without and with the change.

    Cached per request and state (`state_key`: the share tried, the snapshot hour and the cluster's shares
    then), so a second click shows this result instead of simulating again. Every status change is
    appended to `log` with who and why; `assumptions` say what the simulation took as given and `results`
    hold, per affected unit, the expected usage ratio and p90 wait on both sides (operations/whatif/).
    """

    budget_request = models.ForeignKey(BudgetRequest, on_delete=models.CASCADE, related_name="what_ifs")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=WhatIfStatus.choices, default=WhatIfStatus.QUEUED)
    error = models.CharField(max_length=2000, blank=True)
    share_percent = models.DecimalField(
        max_digits=5, decimal_places=2,
        help_text="The unit's share (percent of its parent) on the side with the change.",
    )
    snapshot_hour = models.DateTimeField(help_text="The hour the live state was read in (part of the cache key).")
    state_key = models.CharField(max_length=64, db_index=True)
    assumptions = models.JSONField(default=dict, blank=True)
    results = models.JSONField(default=dict, blank=True)
    log = models.JSONField(default=list, blank=True, help_text="Each status change: at, status, actor, reason.")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(share_percent__gte=0) & Q(share_percent__lte=100),
                name="%(app_label)s_%(class)s_share_in_range",
            ),
        ]

    def __str__(self):
        return f"what-if #{self.pk} for request #{self.budget_request_id} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in WHAT_IF_ACTIVE

    @property
    def is_done(self) -> bool:
        return self.status == WhatIfStatus.DONE

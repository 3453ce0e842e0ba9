from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from budgets.choices import ChangeSource, Role


class UnitQuerySet(models.QuerySet):
    def projects(self):
        """Units jobs can be charged to: those with no children."""
        return self.filter(children__isnull=True)

    def managed_by(self, user):
        return self.filter(memberships__user=user, memberships__role=Role.MANAGER)


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

    def is_project(self) -> bool:
        return not self.children.exists()


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

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self):
        return f"{self.unit} on {self.cluster}: {self.before_percent} → {self.after_percent} by {self.actor}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError("allocation changes are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("allocation changes are append-only")

"""Who may do what in the org: the rules the pages and the API share."""

from budgets.choices import Role
from budgets.models import Membership, Unit

ONCALL_GROUP = "oncall"


def is_oncall(user) -> bool:
    if not user.is_authenticated:
        return False
    if user.is_superuser:
        return True
    cached = getattr(user, "_allot_is_oncall", None)
    if cached is None:
        cached = user.groups.filter(name=ONCALL_GROUP).exists()
        user._allot_is_oncall = cached
    return cached


def is_member(user, unit: Unit) -> bool:
    return Membership.objects.filter(user=user, unit=unit, role=Role.MEMBER).exists()


def manages(user, unit: Unit) -> bool:
    """True when the user manages `unit` or any of its ancestors."""
    chain = [unit.pk, *(ancestor.pk for ancestor in unit.ancestors())]
    return Membership.objects.filter(user=user, unit_id__in=chain, role=Role.MANAGER).exists()

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


def belongs_to(user, unit: Unit) -> bool:
    """A member or a manager of the unit itself: who may ask for budget on its behalf."""
    return Membership.objects.filter(user=user, unit=unit).exists()


def manages(user, unit: Unit) -> bool:
    """True when the user manages `unit` or any of its ancestors."""
    chain = [unit.pk, *(ancestor.pk for ancestor in unit.ancestors())]
    return Membership.objects.filter(user=user, unit_id__in=chain, role=Role.MANAGER).exists()


def managed_unit_ids(user) -> set[int]:
    """Ids of every unit the user manages, directly or through an ancestor; two queries."""
    roots = set(Membership.objects.filter(user=user, role=Role.MANAGER).values_list("unit_id", flat=True))
    if not roots:
        return set()
    children: dict[int | None, list[int]] = {}
    for pk, parent_id in Unit.objects.values_list("pk", "parent_id"):
        children.setdefault(parent_id, []).append(pk)
    managed, stack = set(), list(roots)
    while stack:
        pk = stack.pop()
        if pk not in managed:
            managed.add(pk)
            stack.extend(children.get(pk, []))
    return managed


def can_edit_shares(user, parent: Unit | None) -> bool:
    """Who may set the shares of `parent`'s children: its managers; of the top-level units: the operators."""
    if not user.is_authenticated:
        return False
    if parent is None:
        return user.is_superuser
    return manages(user, parent)


def decision_unit(unit: Unit, requesters) -> Unit | None:
    """Whose managers decide a request for `unit`: the parent's, one level up for each level a requester manages.

    Nobody decides their own request: when a requester manages the parent, the
    decision goes to the managers above. A level nobody manages passes it up
    too. None means the operators (superusers) decide: the top of the tree.
    """
    requesters = [user for user in requesters if user is not None]
    level = unit.parent
    while level is not None:
        chain = [level.pk, *(ancestor.pk for ancestor in level.ancestors())]
        managers = set(
            Membership.objects.filter(unit_id__in=chain, role=Role.MANAGER).values_list("user_id", flat=True)
        )
        if managers and not managers & {user.pk for user in requesters}:
            return level
        level = level.parent
    return None


def requesters_of(budget_request) -> set[int]:
    """The user ids a request is on behalf of: its author and, for an escalation, the original requester."""
    ids = {budget_request.requested_by_id}
    if budget_request.origin_id is not None:
        ids.add(budget_request.origin.requested_by_id)
    return ids


def can_decide(user, budget_request) -> bool:
    """Managers of the decision unit (or above) decide; operators at the top; never the requester."""
    if not user.is_authenticated or user.pk in requesters_of(budget_request):
        return False
    if budget_request.decider_unit_id is None:
        return user.is_superuser
    return manages(user, budget_request.decider_unit)

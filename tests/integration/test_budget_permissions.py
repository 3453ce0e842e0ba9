"""Who may do what with budgets: a matrix of role × action × place in the tree.

A three-level org on the demo cluster:

    org      (ceo)              100 %
      nlp    (pat)               60 %
        olmo (lee; alice, pat)   55 %
        tulu (carol)             30 %
      vision (mia)               40 %
        molmo (dan)              70 %

plus admin (operator, superuser) and olga (on-call). Pat is also a member of
olmo, so pat's own requests for olmo must go a level above nlp.
"""

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from budgets.loaders import apply_org, parse_org
from budgets.models import Unit
from budgets.permissions import can_decide, can_edit_shares
from budgets.selectors import visible_requests, waiting_count, waiting_for
from budgets.services import (
    allocation_set_shares,
    budget_request_approve,
    budget_request_create,
    budget_request_deny,
    budget_request_escalate,
)
from tests.conftest import get_user
from topology.models import Cluster

pytestmark = pytest.mark.django_db

USERS = ["ceo", "pat", "lee", "mia", "alice", "carol", "dan", "olga"]
ORG = {
    "users": [{"username": name} for name in USERS] + [{"username": "admin", "admin": True}],
    "units": [{
        "name": "org", "managers": ["ceo"], "share": {"gb200-east": 100}, "children": [
            {"name": "nlp", "managers": ["pat"], "share": {"gb200-east": 60}, "children": [
                {"name": "olmo", "managers": ["lee"], "members": ["alice", "pat"], "share": {"gb200-east": 55}},
                {"name": "tulu", "members": ["carol"], "share": {"gb200-east": 30}},
            ]},
            {"name": "vision", "managers": ["mia"], "share": {"gb200-east": 40}, "children": [
                {"name": "molmo", "members": ["dan"], "share": {"gb200-east": 70}},
            ]},
        ],
    }],
}
EVERYONE = [*USERS, "admin"]


@pytest.fixture
def tree(db):
    cluster = Cluster.objects.create(name="gb200-east")  # shares need the cluster, not its hosts
    apply_org(parse_org(ORG))
    return cluster


def unit(name):
    return Unit.objects.get(name=name)


def ask(tree, username, unit_name, share="50"):
    return budget_request_create(
        user=get_user(username), unit=unit(unit_name), cluster=tree, share=share, justification="experiments",
    )


@pytest.mark.parametrize(
    "username, unit_name, allowed",
    [
        ("alice", "olmo", True),  # a member of the project
        ("lee", "olmo", True),  # its manager
        ("pat", "nlp", True),  # a program's manager, for the program
        ("carol", "tulu", True),
        ("alice", "tulu", False),  # another project
        ("alice", "nlp", False),  # the parent of her project
        ("pat", "tulu", False),  # manages tulu's parent but is not in tulu: reallocates instead
        ("ceo", "olmo", False),
        ("olga", "olmo", False),  # on-call is not a membership
        ("admin", "olmo", False),  # operators are not members
    ],
)
def test_only_members_of_a_unit_may_ask_for_its_budget(tree, username, unit_name, allowed):
    if allowed:
        assert ask(tree, username, unit_name).pk
    else:
        with pytest.raises(ValidationError) as refused:
            ask(tree, username, unit_name)
        assert "not a member of" in refused.value.message_dict["unit"][0]


# requester, unit → who decides (everyone else may not)
DECIDERS = [
    ("alice", "olmo", "nlp", {"pat", "ceo"}),  # the parent's managers, and those above them
    ("lee", "olmo", "nlp", {"pat", "ceo"}),  # a project manager does not decide for their own project
    ("pat", "olmo", "org", {"ceo"}),  # pat manages the parent: it goes a level up
    ("pat", "nlp", "org", {"ceo"}),
    ("carol", "tulu", "nlp", {"pat", "ceo"}),
    ("dan", "molmo", "vision", {"mia", "ceo"}),
    ("ceo", "org", None, {"admin"}),  # a top-level unit: the operators decide
]


# unit → its managers and those above: they see its requests (and the operators see all).
UNIT_MANAGERS = {"olmo": {"lee", "pat", "ceo"}, "nlp": {"pat", "ceo"}, "tulu": {"pat", "ceo"},
                 "molmo": {"mia", "ceo"}, "org": {"ceo"}}


@pytest.mark.parametrize("requester, unit_name, level, deciders", DECIDERS)
@pytest.mark.parametrize("username", EVERYONE)
def test_only_managers_of_the_parent_decide_and_nobody_decides_their_own(
    tree, requester, unit_name, level, deciders, username,
):
    request = ask(tree, requester, unit_name, share="40")
    assert (request.decider_unit.name if request.decider_unit else None) == level
    user = get_user(username)
    assert can_decide(user, request) == (username in deciders)
    assert waiting_for(user).filter(pk=request.pk).exists() == (username in deciders)
    assert waiting_count(user) == (1 if username in deciders else 0)
    seen_by = deciders | {requester, "admin"} | UNIT_MANAGERS[unit_name]
    assert visible_requests(user).filter(pk=request.pk).exists() == (username in seen_by)
    if username in deciders:
        budget_request_deny(request=request, decider=user, comment="not now")
    else:
        with pytest.raises(PermissionDenied):
            budget_request_approve(request=request, approver=user)
        with pytest.raises(PermissionDenied):
            budget_request_deny(request=request, decider=user, comment="no")


# actor, parent whose children's shares they set (None: top level)
EDITORS = {
    "org": {"ceo"},
    "nlp": {"pat", "ceo"},
    "vision": {"mia", "ceo"},
    None: {"admin"},
}
NEW_SHARES = {"org": ("nlp", "55"), "nlp": ("olmo", "50"), "vision": ("molmo", "60"), None: ("org", "90")}


@pytest.mark.parametrize("parent_name", list(EDITORS))
@pytest.mark.parametrize("username", EVERYONE)
def test_managers_set_shares_only_inside_the_subtree_they_manage(tree, parent_name, username):
    parent = unit(parent_name) if parent_name else None
    child, value = NEW_SHARES[parent_name]
    user = get_user(username)
    allowed = username in EDITORS[parent_name]
    assert can_edit_shares(user, parent) == allowed
    if allowed:
        changes = allocation_set_shares(
            parent=parent, cluster=tree, actor=user, reason="rebalance", shares={unit(child): value},
        )
        assert [(c.unit.name, c.actor) for c in changes] == [(child, username)]
    else:
        with pytest.raises(PermissionDenied):
            allocation_set_shares(parent=parent, cluster=tree, actor=user, reason="x", shares={unit(child): value})


def test_an_escalation_made_for_someone_is_not_decided_by_them(tree):
    from budgets.models import Membership

    request = ask(tree, "alice", "olmo", share="80")  # nlp is full: pat escalates, ceo decides
    escalation = budget_request_escalate(request=request, decider=get_user("pat"))
    assert (escalation.unit.name, escalation.decider_unit.name) == ("nlp", "org")
    assert can_decide(get_user("ceo"), escalation) and not can_decide(get_user("pat"), escalation)
    assert visible_requests(get_user("alice")).filter(pk=escalation.pk).exists()  # made on alice's behalf

    Membership.objects.create(user=get_user("alice"), unit=unit("org"), role="manager")
    assert not can_decide(get_user("alice"), escalation)  # still her own request, one level up
    with pytest.raises(PermissionDenied, match="nobody decides their own"):
        budget_request_approve(request=escalation, approver=get_user("alice"))


def test_a_requester_who_manages_the_parent_and_above_goes_to_the_operators(tree):
    from budgets.models import Membership

    Membership.objects.create(user=get_user("lee"), unit=unit("org"), role="manager")
    request = ask(tree, "lee", "olmo", share="50")
    assert request.decider_unit is None
    assert not can_decide(get_user("lee"), request) and can_decide(get_user("admin"), request)

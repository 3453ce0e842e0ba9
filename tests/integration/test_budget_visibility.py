"""Finding 10 (and issue 14 point 6): who opens a budget request, and pages link only to what the viewer opens.

A request is seen by its requester, the managers of its unit and above, members of units whose share its
decision changed, and the operators; everyone else gets a 404, and no page links them to it.
"""

import pytest
from django.test import Client

from budgets.services import budget_request_approve, budget_request_create
from tests.conftest import get_user
from topology.models import Cluster

pytestmark = pytest.mark.django_db


def as_user(name):
    client = Client()
    client.force_login(get_user(name))
    return client


@pytest.fixture
def approved_with_room_from_tulu(demo):
    alice = get_user("alice")
    request = budget_request_create(user=alice, unit=alice.memberships.get(unit__name="olmo").unit,
                                    cluster=Cluster.objects.get(), share=70, justification="long-context run")
    from budgets.models import Unit

    budget_request_approve(request=request, approver=get_user("pat"), comment="tulu lends 15",
                           take_from={Unit.objects.get(name="tulu"): 15})
    return request


@pytest.mark.parametrize(("username", "sees"), [
    ("alice", True),   # asked for it
    ("bob", True),     # a member of olmo, whose share it changed
    ("lee", True),     # manages olmo
    ("pat", True),     # manages nlp: decided it
    ("carol", True),   # a member of tulu: the decision lowered tulu's share
    ("erin", False),   # safety, untouched
    ("dan", False),    # another program
    ("mia", False),    # manages the other program
    ("admin", True),   # operators see every request
])
def test_the_people_a_decision_concerns_open_the_request(approved_with_room_from_tulu, username, sees):
    response = as_user(username).get(f"/budgets/requests/{approved_with_room_from_tulu.pk}/")
    assert response.status_code == (200 if sees else 404)


@pytest.mark.parametrize(("username", "linked"), [("carol", True), ("dan", False), ("erin", False)])
def test_a_unit_page_links_to_a_request_only_for_those_who_may_open_it(approved_with_room_from_tulu, username,
                                                                         linked):
    pk = approved_with_room_from_tulu.pk
    page = as_user(username).get("/budgets/units/tulu/?cluster=gb200-east").content.decode()
    assert f"#{pk}" in page  # the history names it
    assert (f'href="/budgets/requests/{pk}/"' in page) == linked


def test_every_request_link_on_the_pages_opens(approved_with_room_from_tulu):
    import re

    for username in ("dan", "erin", "carol", "lee"):
        client = as_user(username)
        for path in ("/budgets/", "/budgets/units/olmo/", "/budgets/units/tulu/", "/budgets/units/nlp/",
                     "/budgets/requests/"):
            html = client.get(path + "?cluster=gb200-east").content.decode()
            for link in set(re.findall(r'href="(/budgets/requests/\d+/)"', html)):
                assert client.get(link).status_code == 200, (username, path, link)

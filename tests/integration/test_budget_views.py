"""Budget pages through Django's test client: what each role sees, forms, CSRF, errors that name the field."""

from decimal import Decimal

import pytest
from django.test import Client

from budgets.choices import RequestStatus
from budgets.models import Allocation, AllocationChange, BudgetRequest, Unit
from budgets.services import budget_request_create
from tests.conftest import get_user
from tests.factories import make_job

pytestmark = pytest.mark.django_db

PAGES = [
    "/budgets/", "/org/", "/budgets/units/olmo/", "/budgets/units/nlp/?cluster=gb200-east", "/budgets/requests/",
    "/budgets/requests/new/",
]


def as_user(client, username):
    client.force_login(get_user(username))
    return client


def ask(username="alice", unit="olmo", share="60", cluster="gb200-east", **fields):
    from topology.models import Cluster

    return budget_request_create(
        user=get_user(username), unit=Unit.objects.get(name=unit), cluster=Cluster.objects.get(name=cluster),
        share=share, justification=fields.pop("justification", "tokenizer ablations"), **fields,
    )


def text(response) -> str:
    return response.content.decode()


def share(name):
    return Allocation.objects.current().get(unit__name=name).share_percent


@pytest.mark.parametrize("path", PAGES + ["/budgets/requests/1/", "/budgets/units/nlp/shares/"])
def test_budget_pages_need_a_login(demo, client, path):
    response = client.get(path)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


@pytest.mark.parametrize("path", PAGES)
def test_every_budget_page_renders_for_a_researcher(demo, client, path):
    make_job(gpus=8, on_hosts=["hgx-01-h01"])
    assert as_user(client, "alice").get(path).status_code == 200


def test_the_overview_shows_each_units_share_usage_ratio_and_demand(demo, client):
    make_job(gpus=16)  # pending for olmo
    html = text(as_user(client, "pat").get("/budgets/"))
    assert 'data-unit="olmo"' in html and "55 %" in html and "33.0 %" in html
    assert f"{0.33 * 348 * 168:.0f}" in html
    assert 'data-col="ratio">0 %' in html and 'data-col="pending">16' in html
    assert "Usage ratio" in html and "Unallocated (GPU-h)" in html
    org = text(as_user(client, "pat").get("/org/"))  # the old org page is the same overview
    assert "<h1>Budgets on gb200-east</h1>" in org and 'data-unit="olmo"' in org


def test_the_nav_counts_the_requests_waiting_for_the_manager(demo, client):
    ask()
    ask(username="dan", unit="pixmo", share="25")
    pat = text(as_user(client, "pat").get("/clusters/"))
    assert '>Budgets <span class="badge" title="1 budget request waiting for your decision">1</span>' in pat
    assert 'class="badge"' not in text(as_user(client, "alice").get("/clusters/"))
    assert ">1</span>" in text(as_user(client, "mia").get("/clusters/"))


def test_a_researcher_files_a_request_from_the_form(demo, client):
    client = as_user(client, "alice")
    form = text(client.get("/budgets/requests/new/?unit=olmo&cluster=gb200-east"))
    assert '<option value="olmo" selected>' in form and 'value="tulu"' not in form  # only her units
    response = client.post("/budgets/requests/new/", {
        "unit": "olmo", "cluster": "gb200-east", "share": "60", "justification": "long-context pretraining",
        "ends_at": "2099-01-31T12:00",
    })
    request = BudgetRequest.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/budgets/requests/{request.pk}/"
    assert (request.requested_by.username, request.requested_percent, request.decider_unit.name) == (
        "alice", Decimal(60), "nlp")
    page = text(client.get(response["Location"]))
    assert "waiting for a decision by the managers of nlp (pat)" in page and "sent to the managers of nlp" in page


@pytest.mark.parametrize(
    "fields, field, message",
    [
        ({"share": "150"}, "share", "less than or equal to 100"),
        ({"share": "12.345"}, "share", "2 decimal places"),
        ({"justification": ""}, "justification", "This field is required"),
        ({"unit": "tulu"}, "unit", "you are not a member of tulu"),
        ({"unit": "nowhere"}, "unit", "Select a valid choice"),
        ({"ends_at": "2001-01-01T00:00"}, "ends_at", "must be after the start"),
    ],
)
def test_a_bad_request_form_names_the_field(demo, client, fields, field, message):
    data = {"unit": "olmo", "cluster": "gb200-east", "share": "60", "justification": "why", **fields}
    response = as_user(client, "alice").post("/budgets/requests/new/", data)
    assert response.status_code == 200 and not BudgetRequest.objects.exists()
    form = response.context["form"]
    assert field in form.errors and message in " ".join(form.errors[field]), form.errors


def test_a_request_for_a_unit_the_user_is_not_in_is_refused(demo, client):
    response = as_user(client, "carol").post("/budgets/requests/new/", {
        "unit": "olmo", "cluster": "gb200-east", "share": "60", "justification": "x",
    })
    assert response.status_code == 200 and "unit" in response.context["form"].errors
    assert not BudgetRequest.objects.exists()


def test_the_manager_approves_a_smaller_amount_with_a_comment_and_the_researcher_sees_it(demo, client):
    request = ask(username="dan", unit="pixmo", share="30")
    mia = as_user(Client(), "mia")
    page = text(mia.get(f"/budgets/requests/{request.pk}/"))
    assert 'data-testid="decision"' in page and 'data-testid="no-room"' not in page
    assert 'data-unit="molmo"' in page  # siblings' numbers next to the buttons
    response = mia.post(f"/budgets/requests/{request.pk}/approve/", {"share": "25", "comment": "25 for now"})
    assert response.status_code == 302
    assert share("pixmo") == Decimal(25)
    seen = text(as_user(client, "dan").get(f"/budgets/requests/{request.pk}/"))
    assert 'data-status="approved"' in seen and "25 %" in seen and "25 for now" in seen and "(asked 30 %)" in seen


def test_without_room_the_page_offers_siblings_and_escalation_and_refuses_too_much(demo, client):
    request = ask(share="70")
    pat = as_user(client, "pat")
    page = text(pat.get(f"/budgets/requests/{request.pk}/"))
    assert 'data-testid="no-room"' in page and 'data-testid="escalate-form"' in page
    assert 'name="sibling-tulu" value="20.00"' in page and 'name="sibling-safety" value="10.00"' in page
    refused = pat.post(f"/budgets/requests/{request.pk}/approve/", {"share": "70", "comment": ""})
    assert refused.status_code == 400 and "olmo can have at most 55 %" in text(refused)
    assert share("olmo") == Decimal(55)
    taken = pat.post(f"/budgets/requests/{request.pk}/approve/", {
        "share": "70", "comment": "tulu is idle", "sibling-tulu": "15", "sibling-safety": "15",
    })
    assert taken.status_code == 302 and (share("olmo"), share("tulu"), share("safety")) == (70, 15, 15)


def test_escalating_from_the_page_creates_the_request_one_level_up(demo, client):
    request = ask(share="70")
    response = as_user(client, "pat").post(f"/budgets/requests/{request.pk}/escalate/", {"comment": "nlp is full"})
    escalation = BudgetRequest.objects.get(escalated_from=request)
    assert response.status_code == 302 and response["Location"] == f"/budgets/requests/{escalation.pk}/"
    assert BudgetRequest.objects.get(pk=request.pk).status == RequestStatus.ESCALATED
    assert ">1</span>" in text(as_user(Client(), "admin").get("/budgets/"))


def test_nobody_else_decides_and_hidden_requests_are_not_found(demo, client):
    request = ask()
    lee = as_user(client, "lee")  # manages olmo, not its parent: sees the request, does not decide it
    page = lee.get(f"/budgets/requests/{request.pk}/")
    assert page.status_code == 200 and 'data-testid="decision"' not in text(page)
    lee.post(f"/budgets/requests/{request.pk}/approve/", {"comment": ""})
    assert BudgetRequest.objects.get(pk=request.pk).status == RequestStatus.PENDING
    dan = as_user(Client(), "dan")  # another program's researcher
    assert dan.get(f"/budgets/requests/{request.pk}/").status_code == 404
    assert dan.post(f"/budgets/requests/{request.pk}/approve/", {"comment": ""}).status_code == 404
    alice = as_user(Client(), "alice")
    page = text(alice.get(f"/budgets/requests/{request.pk}/"))
    assert 'data-testid="decision"' not in page and "Cancel this request" in page
    response = alice.post(f"/budgets/requests/{request.pk}/approve/", {"comment": ""}, follow=True)
    assert "nobody decides their own request" in text(response)
    assert BudgetRequest.objects.get(pk=request.pk).status == RequestStatus.PENDING
    assert alice.get(f"/budgets/requests/{request.pk}/deny/").status_code == 405  # POST only


def test_the_requester_cancels_from_the_page(demo, client):
    request = ask()
    as_user(client, "alice").post(f"/budgets/requests/{request.pk}/cancel/")
    assert BudgetRequest.objects.get(pk=request.pk).status == RequestStatus.CANCELLED


def test_a_manager_edits_the_shares_of_the_children_with_a_reason(demo, client):
    pat = as_user(client, "pat")
    form = text(pat.get("/budgets/units/nlp/shares/?cluster=gb200-east"))
    assert 'name="share-olmo"' in form and 'value="55.00"' in form
    data = {"cluster": "gb200-east", "share-olmo": "60", "share-tulu": "25", "share-safety": "15",
            "reason": "olmo ships in March"}
    response = pat.post("/budgets/units/nlp/shares/?cluster=gb200-east", data)
    assert response.status_code == 302 and (share("olmo"), share("tulu")) == (60, 25)
    history = text(pat.get("/budgets/units/olmo/"))
    assert "olmo ships in March" in history and "direct edit" in history


def test_a_bad_direct_edit_shows_the_problem_and_changes_nothing(demo, client):
    pat = as_user(client, "pat")
    over = pat.post("/budgets/units/nlp/shares/", {"share-olmo": "60", "share-tulu": "30", "share-safety": "15",
                                                   "reason": "more"})
    assert over.status_code == 200 and "add up to 105 %, over 100 %" in text(over)
    no_reason = pat.post("/budgets/units/nlp/shares/", {"share-olmo": "50", "share-tulu": "30",
                                                        "share-safety": "15", "reason": ""})
    assert "reason" in no_reason.context["form"].errors
    assert share("olmo") == 55 and not AllocationChange.objects.filter(source="direct").exists()


def test_a_child_missing_from_the_shares_form_is_an_error_not_a_removal(demo, client):
    """Finding 9: a post without tulu's field (a stale page) used to remove tulu's allocation."""
    pat = as_user(client, "pat")
    response = pat.post("/budgets/units/nlp/shares/?cluster=gb200-east",
                        {"share-olmo": "60", "share-safety": "15", "reason": "olmo ships in March"})
    assert response.status_code == 200
    assert "tulu is missing from the form" in response.context["form"].errors["share-tulu"][0]
    assert share("olmo") == 55 and share("tulu") == 30
    assert not AllocationChange.objects.filter(source="direct").exists()
    # Sent empty, on purpose: that is a removal.
    response = pat.post("/budgets/units/nlp/shares/?cluster=gb200-east",
                        {"share-olmo": "60", "share-tulu": "", "share-safety": "15", "reason": "tulu is done"})
    assert response.status_code == 302
    assert not Allocation.objects.current().filter(unit__name="tulu").exists()


@pytest.mark.parametrize("username, path", [
    ("lee", "/budgets/units/nlp/shares/"), ("mia", "/budgets/units/nlp/shares/"),
    ("alice", "/budgets/units/nlp/shares/"), ("pat", "/budgets/shares/"),
])
def test_only_managers_of_the_unit_edit_its_childrens_shares(demo, client, username, path):
    assert as_user(client, username).get(path).status_code == 403
    assert as_user(client, username).post(path, {"share-olmo": "50", "reason": "x"}).status_code == 403
    assert share("olmo") == 55


def test_an_operator_edits_the_top_level_shares(demo, client):
    admin = as_user(client, "admin")
    response = admin.post("/budgets/shares/?cluster=gb200-east", {
        "share-nlp": "55", "share-multimodal": "45", "reason": "vision grows",
    })
    assert response.status_code == 302 and (share("nlp"), share("multimodal")) == (55, 45)


@pytest.mark.parametrize("path, data", [
    ("/budgets/requests/new/", {"unit": "olmo", "cluster": "gb200-east", "share": "60", "justification": "x"}),
    ("/budgets/requests/{pk}/approve/", {"comment": ""}),
    ("/budgets/requests/{pk}/deny/", {"comment": "no"}),
    ("/budgets/requests/{pk}/escalate/", {"comment": ""}),
    ("/budgets/requests/{pk}/cancel/", {}),
    ("/budgets/units/nlp/shares/", {"share-olmo": "50", "share-tulu": "30", "share-safety": "15", "reason": "x"}),
])
def test_every_form_is_protected_against_cross_site_requests(demo, path, data):
    request = ask(username="bob", unit="safety", share="20")
    for username in ("pat", "bob"):
        client = Client(enforce_csrf_checks=True)
        client.force_login(get_user(username))
        response = client.post(path.format(pk=request.pk), data)
        assert response.status_code == 403 and b"CSRF" in response.content
    assert BudgetRequest.objects.get(pk=request.pk).status == RequestStatus.PENDING
    assert BudgetRequest.objects.count() == 1 and share("olmo") == 55


def test_the_unit_page_shows_children_plot_schedule_requests_and_history(demo, client):
    from datetime import UTC, datetime

    request = ask(username="dan", unit="pixmo", share="25", ends_at=datetime(2099, 1, 1, tzinfo=UTC))
    as_user(Client(), "mia").post(f"/budgets/requests/{request.pk}/approve/", {"comment": ""})
    html = text(as_user(client, "dan").get("/budgets/units/pixmo/"))
    assert 'id="usage-plot"' in html and "plotly/plotly.min.js" in html and 'id="usage-data"' in html
    assert "time-limited" in html and "2099-01-01" in html and "back to the share before a time-limited grant" in html
    assert f"#{request.pk}</a>" in html and "approved request" in html
    parent = text(client.get("/budgets/units/multimodal/"))
    assert 'data-unit="molmo"' in parent and 'data-unit="pixmo"' in parent


def test_the_request_form_shows_the_numbers_of_the_users_units(demo, client):
    html = text(as_user(client, "bob").get("/budgets/requests/new/"))
    assert 'data-unit="olmo"' in html and 'data-unit="safety"' in html and 'data-unit="tulu"' not in html
    assert "Free in parent" in html


def test_a_programs_page_lists_its_projects_requests_for_its_manager(demo, client):
    request = ask()
    assert f'data-request="{request.pk}"' in text(as_user(client, "pat").get("/budgets/units/nlp/"))
    assert f'data-request="{request.pk}"' not in text(as_user(Client(), "carol").get("/budgets/units/nlp/"))

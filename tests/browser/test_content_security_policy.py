"""Finding 11: every page sends a Content-Security-Policy and still works under it in Chromium.

Each page is opened with a listener for `securitypolicyviolation`; none may fire, the console stays clean,
and what the scripts draw is there: Plotly's charts, htmx's refreshes, Swagger UI's operations.
"""

import pytest

from budgets.services import budget_request_create
from scheduler.services import JobRequest, job_submit
from scheduler.tick import run_tick
from tests.conftest import get_user
from topology.models import Cluster

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LISTEN = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__violations.push([e.violatedDirective, e.blockedURI || "inline", e.sourceFile, e.sample].join(" "));
});
"""


@pytest.fixture
def subjects(demo):
    alice = get_user("alice")
    job = job_submit(user=alice, request=JobRequest(cluster="gb200-east", project="olmo", gpus=8, min_runtime=3600,
                                                    resumable=True, command="python train.py"))
    request = budget_request_create(user=alice, unit=alice.memberships.get(unit__name="olmo").unit,
                                    cluster=Cluster.objects.get(), share=60, justification="more")
    run_tick(demo)
    return {"job": job.pk, "request": request.pk}


# path, what must be drawn there once the scripts ran
PAGES = [
    ("/", "main"),
    ("/clusters/gb200-east/", "#plot-occupancy .main-svg"),
    ("/hosts/hgx-01-h01/", "main"),
    ("/clusters/gb200-east/domains/nvl72-01/", "[data-testid=rack]"),
    ("/clusters/gb200-east/queue/", "#queue-body"),
    ("/jobs/{job}/", "#job-body"),
    ("/budgets/", "main"),
    ("/budgets/units/olmo/?cluster=gb200-east", "#usage-plot .main-svg"),
    ("/budgets/requests/{request}/", "main"),
    ("/repairs/", "main"),
    ("/account/", "[data-testid=tokens]"),
    ("/account/password/", "form"),
    ("/api/docs/", ".swagger-ui .opblock"),
    ("/admin/", "#content"),
    ("/admin/scheduler/job/", "#result_list"),
]


def test_every_page_works_under_the_policy(subjects, strict_visit):
    visit = strict_visit
    failed = []
    visit.page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    visit.page.add_init_script(LISTEN)
    visit.login("pat")
    for path, drawn in PAGES:
        if path.startswith("/admin"):
            continue
        response = visit.goto(path.format(**subjects))
        assert "script-src 'self'" in response.headers["content-security-policy"], path
        visit.page.wait_for_selector(drawn, state="attached")
        assert visit.page.evaluate("window.__violations") == [], path
        visit.shot("csp" + path.split("?")[0].replace("/", "_").replace("{", "").replace("}", ""))
    visit.goto("/")
    visit.switch_user("admin")
    for path, drawn in PAGES:
        if path.startswith("/admin"):
            visit.goto(path)
            visit.page.wait_for_selector(drawn, state="attached")
            assert visit.page.evaluate("window.__violations") == [], path
    assert failed == [] and visit.console_errors == []


def test_htmx_refreshes_work_under_the_policy(subjects, strict_visit):
    visit = strict_visit
    visit.page.add_init_script(LISTEN)
    visit.login("alice")
    visit.goto(f"/jobs/{subjects['job']}/")
    with visit.page.expect_response(lambda r: f"/jobs/{subjects['job']}/" in r.url and r.request.headers.get(
            "hx-request") == "true", timeout=15000):
        pass
    assert visit.page.evaluate("window.__violations") == []
    assert visit.console_errors == []


def test_the_login_and_password_reset_pages_work_under_the_policy(demo, strict_visit):
    visit = strict_visit
    visit.page.add_init_script(LISTEN)
    visit.goto("/login/")
    visit.page.click("text=Forgot your password?")
    visit.page.wait_for_url("**/account/password/reset/")
    visit.page.fill("#id_email", "alice@example.org")
    visit.page.click("button[type=submit]")
    visit.page.wait_for_url("**/account/password/reset/sent/")
    assert visit.page.evaluate("window.__violations") == []
    assert visit.console_errors == []

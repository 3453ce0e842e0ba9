"""Browser tests: Debian's Chromium driven by Playwright, against the live test server.

Every test records the requests the page makes; none may leave 127.0.0.1.
"""

import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

CHROMIUM = os.environ.get("ALLOT_CHROMIUM", "/usr/bin/chromium")
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
# ALLOT_SHOTS=/some/dir saves a screenshot of each step a test names.
SHOTS = os.environ.get("ALLOT_SHOTS")
# Django's async-unsafe check trips on Playwright's event loop in the test thread.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium package")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
            ],
        )
        yield browser
        browser.close()


class Visit:
    """A browser page with the requests and console errors it produced."""

    def __init__(self, page, base_url):
        self.page = page
        self.base_url = base_url
        self.requests: list[str] = []
        self.console_errors: list[str] = []
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("console", lambda message: message.type == "error" and self.console_errors.append(message.text))
        page.on("pageerror", lambda error: self.console_errors.append(str(error)))

    def goto(self, path):
        return self.page.goto(self.base_url + path)

    def login(self, username, password="allot-demo"):
        self.goto("/login/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", password)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(lambda url: "/login/" not in url)

    def switch_user(self, username):
        self.page.click("button:has-text('Log out')")
        self.page.wait_for_url("**/login/")
        self.login(username)

    def shot(self, name):
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)

    def external_requests(self) -> list[str]:
        return [
            url for url in self.requests
            if urlsplit(url).scheme in {"http", "https", "ws", "wss"} and urlsplit(url).hostname not in LOCAL_HOSTS
        ]


def _visit(browser, live_server, *, bypass_csp: bool):
    context = browser.new_context(viewport={"width": 1300, "height": 900}, bypass_csp=bypass_csp)
    page = context.new_page()
    page.set_default_timeout(15000)
    session = Visit(page, live_server.url)
    yield session
    context.close()
    assert session.external_requests() == [], "requests left 127.0.0.1"


@pytest.fixture
def visit(browser, live_server):
    # Playwright's own helpers (wait_for_function) evaluate strings in the page, which the site's
    # Content-Security-Policy refuses; `strict_visit` keeps the policy, for the tests of the policy itself.
    yield from _visit(browser, live_server, bypass_csp=True)


@pytest.fixture
def strict_visit(browser, live_server):
    """A visit under the site's Content-Security-Policy, as a user's browser has it."""
    yield from _visit(browser, live_server, bypass_csp=False)

"""`make run` serves the product's 404 and 403 pages, never Django's debug page (which lists every URL)."""

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import get_user

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_web_server_runs_with_debug_off_and_a_secret_key_of_its_own():
    recipe = subprocess.run(["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    server = next(line for line in recipe.splitlines() if "manage.py runserver" in line)
    assert re.match(r'DEBUG=0 SECRET_KEY="\$\(cat var/demo-secret-key\)" ', server), server
    assert "var/demo-secret-key" in recipe.split("runserver")[0]  # made before the server starts


def test_with_debug_off_a_missing_page_and_a_refusal_are_the_products(demo, client, settings):
    settings.DEBUG = False
    client.force_login(get_user("alice"))
    missing = client.get("/hosts/no-such-host/")
    assert missing.status_code == 404
    html = missing.content.decode()
    assert "<title>Not found · Allot</title>" in html and "URLconf" not in html
    nowhere = client.get("/no/such/page/").content.decode()
    assert nowhere.count("Not found · Allot") == 1 and "There is nothing at this address." in nowhere
    assert "Resolver404" not in nowhere
    refused = client.post("/hosts/hgx-01-h01/drain/", {"reason": "test"})
    assert refused.status_code == 403
    assert "<title>Not allowed · Allot</title>" in refused.content.decode()

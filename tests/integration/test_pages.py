"""Inventory and org pages: login required, real data rendered."""

import pytest

from tests.conftest import get_user
from tests.factories import make_job

pytestmark = pytest.mark.django_db

PAGES = ["/", "/clusters/gb200-east/", "/clusters/gb200-east/domains/nvl72-03/", "/hosts/nvl72-03-h07/", "/org/"]


@pytest.mark.parametrize("path", PAGES)
def test_pages_need_a_login(demo, client, path):
    response = client.get(path)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_cluster_list_counts_gpus(demo, client):
    client.force_login(get_user("alice"))
    make_job(gpus=8, on_hosts=["hgx-01-h01"])
    html = client.get("/").content.decode()
    assert "gb200-east" in html and ">352<" in html and ">348<" in html and ">8<" in html


def test_the_cluster_page_lists_domains_with_healthy_capacity(demo, client):
    client.force_login(get_user("alice"))
    html = client.get("/clusters/gb200-east/").content.decode()
    assert html.count('class="card domain-card"') == 12
    assert "<strong>68</strong> of 72 GPUs healthy" in html
    assert "nvl72-03-h07" in html


def test_the_rack_page_draws_18_trays_of_4_gpus_with_the_failed_tray_unavailable(demo, client):
    client.force_login(get_user("olga"))
    make_job(gpus=4, on_hosts=["nvl72-03-h01"])
    html = client.get("/clusters/gb200-east/domains/nvl72-03/").content.decode()
    assert html.count('class="tray"') == 18
    assert html.count('data-gpu="nvl72-03-h') == 72
    assert html.count('data-state="unavailable"') == 4
    assert 'data-gpu="nvl72-03-h07:0" data-state="unavailable"' in html
    assert 'data-gpu="nvl72-03-h01:0" data-state="allocated"' in html
    assert "job " in html and "(olmo, alice, allocated, protected until" in html


def test_the_host_page_shows_state_reason_and_history(demo, client):
    client.force_login(get_user("olga"))
    html = client.get("/hosts/nvl72-03-h07/").content.decode()
    assert "listed in unhealthy_hosts of the cluster file" in html
    assert "system:load_cluster" in html
    assert "4 × GB200" in html


def test_the_org_page_shows_shares_as_percent_and_gpu_hours(demo, client):
    client.force_login(get_user("pat"))
    html = client.get("/org/").content.decode()
    assert 'data-unit="olmo"' in html
    assert "55 %" in html and "33.0 %" in html
    assert f"{0.33 * 348 * 168:.0f}" in html  # olmo's GPU-hours per week

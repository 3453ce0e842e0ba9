"""Cordon, drain, resume: on-call only, a reason required, the same service behind the API, the page and the CLI."""

import pytest

from client.cli import main
from scheduler.tick import run_tick
from tests.conftest import get_user
from tests.factories import make_job
from topology.choices import HostState
from topology.models import Cluster, Host, HostEvent

pytestmark = pytest.mark.django_db

URL = "/api/v1/hosts/{}/{}/"


def act(api, user, host, action, **body):
    if user is not None:
        api.as_user(get_user(user))
    return api.post(URL.format(host, action), body, format="json")


def test_on_call_drains_with_a_reason_and_it_is_recorded(demo, api):
    response = act(api, "olga", "nvl72-01-h05", "drain", reason="XID 79 on GPU 2, ticket RMA-1234")
    assert response.status_code == 200
    body = response.json()
    assert (body["name"], body["state"], body["state_actor"], body["changed"]) == (
        "nvl72-01-h05", "draining", "olga", True)
    assert body["state_reason"] == "XID 79 on GPU 2, ticket RMA-1234"
    assert len(body["gpus"]) == 4
    event = HostEvent.objects.get(host__name="nvl72-01-h05", kind="state")
    assert (event.actor, event.detail) == ("olga", "up → draining: XID 79 on GPU 2, ticket RMA-1234")


@pytest.mark.parametrize("user", ["alice", "pat", "lee"])
def test_everyone_else_is_refused_with_a_clear_message(demo, api, user):
    response = act(api, user, "nvl72-01-h05", "drain", reason="I need this rack")
    assert response.status_code == 403
    assert response.json()["detail"] == "Only on-call engineers (group oncall) may cordon, drain or resume hosts."
    assert Host.objects.get(name="nvl72-01-h05").state == HostState.UP


def test_without_a_login_nothing_happens(demo, api):
    assert act(api, None, "nvl72-01-h05", "cordon", reason="x").status_code == 401
    assert Host.objects.get(name="nvl72-01-h05").state == HostState.UP


def test_a_superuser_may_act(demo, api):
    assert act(api, "admin", "hgx-01-h01", "cordon", reason="firmware update").json()["state"] == "cordoned"


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}, {"reason": "x" * 501}])
def test_a_reason_is_required(demo, api, body):
    response = act(api, "olga", "hgx-01-h01", "drain", **body)
    assert response.status_code == 400 and "reason" in response.json()
    assert Host.objects.get(name="hgx-01-h01").state == HostState.UP


def test_cordon_drain_resume_and_what_is_refused(demo, api):
    api.as_user(get_user("olga"))
    assert act(api, None, "hgx-01-h01", "cordon", reason="bios").json()["state"] == "cordoned"
    again = act(api, None, "hgx-01-h01", "cordon", reason="bios")
    assert again.status_code == 200 and again.json()["changed"] is False
    assert again.json()["detail"] == "hgx-01-h01 is already cordoned; nothing changed"
    assert act(api, None, "hgx-01-h01", "drain", reason="swap the board").json()["state"] == "draining"
    assert act(api, None, "hgx-01-h01", "resume", reason="board swapped").json()["state"] == "up"
    # The failed tray of the demo is down: a drain is refused with what to do instead.
    refused = act(api, None, "nvl72-03-h07", "drain", reason="repair")
    assert refused.status_code == 409
    assert refused.json()["detail"].startswith("nvl72-03-h07 is down")
    resumed = act(api, None, "nvl72-03-h07", "resume", reason="tray replaced")
    host = Host.objects.get(name="nvl72-03-h07")
    assert resumed.status_code == 200 and (host.state, host.state_actor, host.state_reason) == (
        HostState.UP, "olga", "tray replaced")
    actors = list(HostEvent.objects.filter(host__name="hgx-01-h01", kind="state").values_list("actor", flat=True))
    assert actors == ["olga", "olga", "olga"]


def test_an_unknown_host_is_404(demo, api):
    assert act(api, "olga", "no-such-host", "drain", reason="x").status_code == 404


# ---------------------------------------------------------------- the host page


def test_the_page_form_drains_for_on_call_and_shows_progress(demo, client):
    make_job(gpus=4, min_runtime=3600, on_hosts=["nvl72-02-h01"], name="pretrain")
    client.force_login(get_user("olga"))
    page = client.get("/hosts/nvl72-02-h01/").content.decode()
    assert 'data-action="drain"' in page and 'data-action="resume"' not in page
    response = client.post("/hosts/nvl72-02-h01/drain/", {"reason": "NVLink errors on tray 1"}, follow=True)
    html = response.content.decode()
    assert "nvl72-02-h01 is now draining" in html
    # When its jobs leave is the scheduler's decision: until its next tick the page says so ...
    assert 'data-testid="drain-progress"' in html and "1 job left;" in html
    assert "the scheduler decides when at its next tick" in html
    assert Host.objects.get(name="nvl72-02-h01").state_actor == "olga"
    # ... and then shows it.
    run_tick(demo)
    html = client.get("/hosts/nvl72-02-h01/").content.decode()
    assert 'data-testid="drain-progress"' in html and "1 job left;" in html and "at its minimum runtime" in html


def test_the_page_refuses_others_and_asks_for_a_reason(demo, client):
    client.force_login(get_user("alice"))
    assert "On-call engineers (group <code>oncall</code>)" in client.get("/hosts/hgx-01-h01/").content.decode()
    assert client.post("/hosts/hgx-01-h01/drain/", {"reason": "mine now"}).status_code == 403
    client.force_login(get_user("olga"))
    html = client.post("/hosts/hgx-01-h01/drain/", {"reason": " "}, follow=True).content.decode()
    assert "Drain refused: reason required" in html
    assert Host.objects.get(name="hgx-01-h01").state == HostState.UP


def test_the_page_escapes_reasons(demo, client):
    client.force_login(get_user("olga"))
    client.post("/hosts/hgx-01-h01/cordon/", {"reason": "<script>alert(1)</script>"})
    html = client.get("/hosts/hgx-01-h01/").content.decode()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


# ---------------------------------------------------------------- the CLI


@pytest.fixture
def cli(demo, live_server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("ALLOT_TOKEN", raising=False)

    def run(*argv, user="olga"):
        monkeypatch.setattr("sys.stdin", __import__("io").StringIO("allot-demo\n"))
        assert main(["--server", live_server.url, "login", "-u", user, "--password-stdin"]) == 0
        capsys.readouterr()
        code = main(["--server", live_server.url, *argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


@pytest.mark.django_db(transaction=True)
def test_the_cli_drains_and_resumes_for_on_call(cli):
    code, out, _ = cli("hosts", "drain", "hgx-02-h01", "--reason", "fan failure")
    assert code == 0 and out.strip() == "hgx-02-h01: draining — fan failure; no jobs left: drained at the next tick"
    code, out, _ = cli("hosts", "resume", "hgx-02-h01", "--reason", "fan replaced")
    assert code == 0 and out.strip() == "hgx-02-h01: up — fan replaced"


@pytest.mark.django_db(transaction=True)
def test_the_cli_shows_the_drain_progress(cli):
    make_job(gpus=8, min_runtime=3600, on_hosts=["hgx-03-h01"])
    code, out, _ = cli("hosts", "drain", "hgx-03-h01", "--reason", "ECC errors")
    assert code == 0
    assert out.strip() == "hgx-03-h01: draining — ECC errors; 1 job left (the scheduler decides when at its next tick)"
    run_tick(Cluster.objects.get(name="gb200-east"))
    # Asked again (already draining: nothing changes), it says what the scheduler decided.
    code, out, _ = cli("hosts", "drain", "hgx-03-h01", "--reason", "ECC errors")
    assert code == 0
    assert out.startswith("hgx-03-h01: draining — ECC errors; 1 job left, the last leaves by ")
    assert out.strip().endswith("(at its minimum runtime)")


@pytest.mark.django_db(transaction=True)
def test_the_cli_says_why_it_is_refused(cli):
    code, _, err = cli("hosts", "drain", "hgx-02-h01", "--reason", "mine", user="alice")
    assert code != 0 and "Only on-call engineers (group oncall)" in err
    code, _, err = cli("hosts", "drain", "hgx-02-h01")
    assert code != 0 and "usage: allot hosts drain NAME --reason TEXT" in err
    assert Host.objects.get(name="hgx-02-h01").state == HostState.UP

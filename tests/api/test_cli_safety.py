"""`allot logout` revokes the token it holds; nothing the server sends reaches the terminal as a control sequence."""

import json

import pytest

from accounts.models import ApiToken
from client.cli import main
from client.text import clean
from scheduler.models import Job, JobEvent
from tests.conftest import get_user
from topology.models import Cluster

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cli(demo, live_server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("ALLOT_TOKEN", raising=False)

    def run(*argv, stdin=None):
        if stdin is not None:
            monkeypatch.setattr("sys.stdin", __import__("io").StringIO(stdin))
        code = main(["--server", live_server.url, *argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def config(tmp_path):
    return json.loads((tmp_path / "config" / "allot" / "config.json").read_text())


def test_logout_revokes_the_token_on_the_server_and_forgets_it(cli, tmp_path):
    assert cli("login", "-u", "alice", "--password-stdin", stdin="allot-demo\n")[0] == 0
    assert cli("queue")[0] == 0
    code, out, _ = cli("logout")
    assert code == 0 and "token revoked" in out
    assert "token" not in config(tmp_path) and config(tmp_path)["username"] == "alice"
    token = ApiToken.objects.get(user__username="alice")
    assert token.state == "revoked" and token.revoke_reason == "logged out"
    code, _, err = cli("queue")
    assert code == 3 and "not logged in" in err
    assert cli("logout") == (0, "Not logged in: no token kept here.\n", "")


def test_logout_with_a_token_revoked_elsewhere_still_forgets_it(cli, tmp_path):
    cli("login", "-u", "alice", "--password-stdin", stdin="allot-demo\n")
    ApiToken.objects.update(revoked_at="2026-01-01T00:00:00Z")
    code, out, _ = cli("logout")
    assert code == 0 and "expired or was revoked already" in out
    assert "token" not in config(tmp_path)


HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x1b[0m \u202eevil\u202c\r\x9b6n\x08"


def test_show_and_queue_print_no_control_sequences(cli, demo):
    # A job stored before the input boundary refused such names (or written by another path).
    job = Job.objects.create(cluster=Cluster.objects.get(), project_id=get_user("alice").memberships.first().unit_id,
                             user=get_user("alice"), gpus=1, min_runtime=0, resumable=True, name=HOSTILE,
                             command=f"echo {HOSTILE}", pending_reason=HOSTILE)
    JobEvent.objects.create(job=job, kind="submit", actor="alice", detail=HOSTILE, cause=HOSTILE)
    cli("login", "-u", "alice", "--password-stdin", stdin="allot-demo\n")
    for argv in (("show", str(job.pk)), ("queue",), ("queue", "--mine")):
        code, out, err = cli(*argv)
        assert code == 0, err
        assert not any(ch in out + err for ch in "\x1b\x07\x08\r\x9b\u202e\u202c"), (argv, out)
    assert "red evil" in cli("show", str(job.pk))[1]
    # --json keeps the data, escaped as JSON (no raw control character either).
    out = cli("show", str(job.pk), "--json")[1]
    assert "\x1b" not in out and json.loads(out)["name"] == HOSTILE


@pytest.mark.parametrize(("raw", "shown"), [
    ("plain\ttext\nnext line", "plain\ttext\nnext line"),
    ("\x1b[1;31mbold red\x1b[0m", "bold red"),
    ("title \x1b]2;owned\x1b\\ done", "title  done"),
    ("link \x1b]8;;http://x\x07here\x1b]8;;\x07", "link here"),
    ("\x1bPdevice control\x1b\\after", "after"),
    ("bell\x07 nul\x00 del\x7f c1\x9b31m", "bell nul del c131m"),
    ("abc\u202edcba\u2066x\u2069", "abcdcbax"),
])
def test_clean_strips_sequences_and_keeps_text(raw, shown):
    assert clean(raw) == shown

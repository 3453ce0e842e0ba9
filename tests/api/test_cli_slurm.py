"""`allot` with a Slurm user's habits, against a live server: global options anywhere, defaults from the
environment and the config file, Slurm's durations, compressed host lists, capped reasons, checked states,
one voice for errors, a quiet closed pipe."""

import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.services import token_create
from client.cli import main
from scheduler.core.durations import format_duration
from scheduler.models import Job
from tests.conftest import REPO, get_user
from tests.factories import make_job

pytestmark = pytest.mark.django_db(transaction=True)
HOSTS_16 = [f"nvl72-01-h{index:02d}" for index in range(1, 17)]


@pytest.fixture
def run(demo, live_server, tmp_path, monkeypatch, capsys):
    """`allot ARGV…` exactly as typed: no --server added."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in ("ALLOT_TOKEN", "ALLOT_SERVER", "ALLOT_CLUSTER", "ALLOT_PROJECT"):
        monkeypatch.delenv(name, raising=False)

    def allot(*argv, stdin="allot-demo\n"):
        monkeypatch.setattr(sys, "stdin", __import__("io").StringIO(stdin))
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    allot.url = live_server.url
    return allot


def config(tmp_path):
    return json.loads((tmp_path / "config" / "allot" / "config.json").read_text())


def test_the_readme_s_login_works_with_the_server_after_the_command(run, tmp_path):
    code, out, err = run("login", "--server", run.url, "-u", "alice", "--password-stdin")
    assert (code, err) == (0, "") and f"Logged in to {run.url} as alice" in out
    assert config(tmp_path)["server"] == run.url


@pytest.mark.parametrize("where", ["before", "after"])
def test_global_options_work_before_or_after_the_command(run, where):
    assert run("login", "--server", run.url, "-u", "alice", "--password-stdin")[0] == 0
    make_job(project="olmo", user="alice")
    make_job(project="tulu", user="bob")
    options = ["--project", "tulu", "--json"]
    argv = [*options, "queue"] if where == "before" else ["queue", *options]
    code, out, err = run(*argv)
    assert code == 0, err
    assert [row["project"] for row in json.loads(out)] == ["tulu"]


def test_allot_server_and_the_config_file_give_the_defaults(run, monkeypatch, tmp_path):
    monkeypatch.setenv("ALLOT_SERVER", run.url)
    code, out, _ = run("login", "-u", "bob", "--password-stdin", "--cluster", "gb200-east", "--project", "olmo")
    assert code == 0 and "Defaults: cluster gb200-east, project olmo." in out
    assert config(tmp_path)["cluster"] == "gb200-east"
    monkeypatch.delenv("ALLOT_SERVER")  # the config file's server from now on
    code, out, err = run("submit", "--gpus", "1", "--min-runtime", "90", "--", "python", "train.py")
    assert code == 0, err
    job = Job.objects.get()
    assert (job.cluster.name, job.project.name, job.min_runtime) == ("gb200-east", "olmo", 5400)
    monkeypatch.setenv("ALLOT_PROJECT", "safety")  # the environment wins over the file, the command line over both
    assert run("submit", "--gpus", "1", "--min-runtime", "1h", "--", "x")[0] == 0
    assert run("--project", "olmo", "submit", "--gpus", "1", "--min-runtime", "1h", "--", "x")[0] == 0
    assert list(Job.objects.order_by("pk").values_list("project__name", flat=True)) == ["olmo", "safety", "olmo"]


def test_submit_without_a_project_anywhere_says_how_to_give_one(run, monkeypatch):
    monkeypatch.setenv("ALLOT_SERVER", run.url)
    run("login", "-u", "alice", "--password-stdin")
    code, out, err = run("submit", "--cluster", "gb200-east", "--gpus", "1", "--min-runtime", "1h", "--", "x")
    assert (code, out) == (2, "")
    assert err == "allot: --project is required (or ALLOT_PROJECT, or `allot login --project NAME` to keep a default)\n"


@pytest.mark.parametrize("typed, seconds", [("90", 5400), ("2h30m", 9000), ("02:30:00", 9000), ("1-12:00:00", 129600)])
def test_durations_as_slurm_users_type_them(run, monkeypatch, typed, seconds):
    monkeypatch.setenv("ALLOT_SERVER", run.url)
    run("login", "-u", "alice", "--password-stdin")
    code, _, err = run("submit", "--cluster", "gb200-east", "--project", "olmo", "--gpus", "1", "--min-runtime", "1h",
                       "--time", typed, "--", "x")
    assert code == 0, err
    job = Job.objects.get()
    assert job.max_runtime == seconds
    code, out, _ = run("show", str(job.pk))
    printed = out.split(", max ")[1].split()[0]
    assert printed == format_duration(seconds)
    code, _, err = run("submit", "--cluster", "gb200-east", "--project", "olmo", "--gpus", "1", "--min-runtime", "1h",
                       "--time", printed, "--", "x")  # what it prints, it reads back
    assert code == 0 and Job.objects.order_by("pk").last().max_runtime == seconds


def test_a_negative_duration_gets_our_message_in_the_cli_s_one_voice(run, monkeypatch):
    monkeypatch.setenv("ALLOT_SERVER", run.url)
    code, out, err = run("submit", "--cluster", "gb200-east", "--project", "olmo", "--gpus", "1",
                         "--min-runtime", "-5m", "--", "x")
    assert (code, out) == (2, "")
    assert err.startswith("allot: --min-runtime: -5m is negative; a duration is at least 0 (e.g. 90 (minutes")
    assert "expected one argument" not in err and "usage:" not in err
    code, _, err = run("queue", "--bogus")
    assert code == 2 and err.startswith("allot: unrecognized arguments: --bogus")


def test_state_takes_a_comma_list_and_an_unknown_one_is_exit_2_naming_them(run, monkeypatch, api):
    monkeypatch.setenv("ALLOT_SERVER", run.url)
    run("login", "-u", "alice", "--password-stdin")
    make_job(project="olmo")
    make_job(project="olmo", state="completed")
    make_job(project="olmo", state="failed")
    code, out, _ = run("queue", "--state", "completed,failed", "--json")
    assert code == 0 and sorted(row["state"] for row in json.loads(out)) == ["completed", "failed"]
    code, out, err = run("queue", "--state", "running,finished")
    assert (code, out) == (2, "")
    assert err.startswith("allot: --state: unknown state finished: use one or more of pending, starting, running, "
                          "preempting, completed, failed, cancelled, preempted, comma-separated")
    response = api.as_user(get_user("alice")).get("/api/v1/jobs/", {"state": "running,finished"})
    assert response.status_code == 400
    assert response.json() == {"state": ["unknown state finished: use one or more of pending, starting, running, "
                                          "preempting, completed, failed, cancelled, preempted, comma-separated"]}


def test_hosts_are_a_compressed_list_and_reasons_fit_the_terminal(run, monkeypatch):
    monkeypatch.setenv("ALLOT_SERVER", run.url)
    monkeypatch.setenv("COLUMNS", "100")
    run("login", "-u", "alice", "--password-stdin")
    big = make_job(project="olmo", gpus=64, on_hosts=HOSTS_16, topology="domain")
    reason = "waits for 72 GPUs in one NVLink domain: " + "the largest free one has 12; " * 6
    waiting = make_job(project="olmo", gpus=72, topology="domain", pending_reason=reason)
    code, out, _ = run("queue")
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert rows[str(big.pk)].endswith("nvl72-01-h[01-16]")
    assert len(rows[str(waiting.pk)]) <= 100 and rows[str(waiting.pk)].endswith("…")
    code, out, _ = run("queue", "--long")
    assert reason.strip() in out
    code, out, _ = run("show", str(big.pk))
    assert "Hosts" in out and "nvl72-01-h[01-16]" in out


def test_a_closed_pipe_ends_quietly(run, monkeypatch, tmp_path):
    """`allot hosts | head -1`: the reader goes away; no traceback, the exit status of a SIGPIPE."""
    _, key = token_create(user=get_user("olga"), name="pipe")
    reader, writer = os.pipe()
    os.close(reader)
    env = {**os.environ, "ALLOT_SERVER": run.url, "ALLOT_TOKEN": key, "XDG_CONFIG_HOME": str(tmp_path)}
    try:
        result = subprocess.run([sys.executable, "-m", "client.cli", "hosts"], stdout=writer, stderr=subprocess.PIPE,
                                env=env, cwd=REPO, timeout=60)
    finally:
        os.close(writer)
    assert result.stderr.decode() == ""
    assert result.returncode == 141


def test_cli_times_are_in_one_labelled_zone(run, monkeypatch):
    monkeypatch.setenv("ALLOT_SERVER", run.url)
    monkeypatch.setenv("TZ", "UTC")
    __import__("time").tzset()
    try:
        run("login", "-u", "alice", "--password-stdin")
        job = make_job(project="olmo", on_hosts=["hgx-01-h01"], started=timezone.now() - timedelta(hours=1))
        code, out, _ = run("show", str(job.pk))
        started = next(line for line in out.splitlines() if line.startswith("Started"))
        assert started.endswith(" UTC")
    finally:
        monkeypatch.delenv("TZ")
        __import__("time").tzset()

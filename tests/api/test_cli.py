"""`allot`, the CLI, against a live server: login keeps a private token; submit, queue, show, cancel, hosts."""

import json
import stat
import subprocess
import sys

import pytest

from client.cli import main
from scheduler.models import Job
from scheduler.tick import run_tick
from topology.models import Gpu

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cli(demo, live_server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("ALLOT_TOKEN", raising=False)

    def run(*argv, stdin=None):
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", __import__("io").StringIO(stdin))
        code = main(["--server", live_server.url, *argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def login(cli, user="alice"):
    code, out, _ = cli("login", "-u", user, "--password-stdin", stdin="allot-demo\n")
    assert code == 0, out
    return out


def test_login_keeps_the_token_readable_only_by_its_owner(cli, tmp_path):
    out = login(cli)
    path = tmp_path / "config" / "allot" / "config.json"
    assert str(path) in out
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text())["username"] == "alice"


def test_a_wrong_password_fails_with_the_server_s_reason(cli):
    code, _, err = cli("login", "-u", "alice", "--password-stdin", stdin="nope\n")
    assert code == 1 and "Unable to log in with provided credentials" in err


def test_commands_need_a_login(cli):
    code, _, err = cli("queue")
    assert code == 3 and "not logged in: run `allot login` first" in err


def test_submit_queue_show_cancel(cli, demo):
    login(cli)
    code, out, _ = cli("submit", "--cluster", "gb200-east", "--project", "olmo", "--gpus", "8", "--min-runtime",
                       "2h", "--resumable", "--", "python", "train.py", "--lr", "3e-4")
    assert code == 0 and "Submitted job" in out
    job = Job.objects.get()
    assert (job.min_runtime, job.resumable, job.command) == (7200, True, "python train.py --lr 3e-4")

    code, out, _ = cli("submit", "--cluster", "gb200-east", "--project", "olmo", "--gpus", "80", "--topology",
                       "domain", "--min-runtime", "1h", "--", "python", "big.py")
    assert code == 1
    for _ in range(2):
        cli("submit", "--cluster", "gb200-east", "--project", "olmo", "--gpus", "72", "--topology", "domain",
            "--min-runtime", "1h", "--json", "--", "python", "big.py")
    run_tick(demo)
    run_tick(demo)

    code, out, _ = cli("queue")
    assert code == 0
    header = out.splitlines()[0].split()
    assert header == ["ID", "CLUSTER", "PROJECT", "USER", "STATE", "GPUS", "POS", "AGE", "REASON/HOSTS"]
    assert f"{job.pk}" in out and "running" in out

    code, out, _ = cli("queue", "--json", "--mine")
    rows = json.loads(out)
    assert {row["user"] for row in rows} == {"alice"} and len(rows) == 3

    code, out, _ = cli("show", str(job.pk))
    assert code == 0 and "allocated, protected for 2h, resumable" in out and "Events:" in out and "start" in out

    code, out, _ = cli("cancel", str(job.pk), "--reason", "done with it")
    assert code == 0 and f"job {job.pk}" in out
    code, _, err = cli("cancel", "999999")
    assert code == 1 and "no job 999999" in err


def test_submit_refusals_name_the_field(cli):
    login(cli)
    code, _, err = cli("submit", "--cluster", "gb200-east", "--project", "olmo", "--gpus", "8",
                       "--min-runtime", "9h", "--", "python", "train.py")
    assert code == 1 and "min_runtime: 9h is over the cap of gb200-east: 8h" in err
    code, _, err = cli("submit", "--cluster", "gb200-east", "--project", "olmo", "--gpus", "8", "--min-runtime",
                       "two hours")
    assert code == 2 and err.startswith("allot: --min-runtime: 'two hours' is not a duration (use 90 (minutes")


def test_hosts_lists_state_and_reason(cli):
    login(cli, "olga")
    code, out, _ = cli("hosts", "--state", "down")
    assert code == 0 and "nvl72-03-h07" in out and "unhealthy_hosts" in out
    code, out, _ = cli("hosts", "--json", "--cluster", "gb200-east")
    assert len(json.loads(out)) == 80


def test_the_cli_and_the_agent_import_no_django():
    probe = "import sys, client.cli, client.agent; print(sorted(m for m in sys.modules if m.startswith('django')))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_submit_queue_and_show_a_mig_job(cli, demo):
    Gpu.objects.filter(host__name="hgx-08-h01", index=0).update(mig_enabled=True)
    login(cli)
    code, out, err = cli("submit", "--cluster", "gb200-east", "--project", "olmo", "--mig-profile", "3g.40gb",
                         "--min-runtime", "1h", "--", "python", "serve.py")
    assert code == 0, err
    assert "1 GPU as a 3g.40gb MIG instance" in out
    job = Job.objects.get()
    assert (job.gpus, job.mig_profile) == (1, "3g.40gb")

    code, _, err = cli("submit", "--cluster", "gb200-east", "--project", "olmo", "--mig-profile", "3g.40gb",
                       "--gpus", "2", "--min-runtime", "1h", "--", "python", "serve.py")
    assert code == 1 and "mig_profile" in err and "gpus must be 1, got 2" in err
    code, _, err = cli("submit", "--cluster", "gb200-east", "--project", "olmo", "--min-runtime", "1h", "--", "x")
    assert code == 2 and "--gpus is required" in err

    run_tick(demo)
    code, out, _ = cli("queue")
    row = next(line for line in out.splitlines() if line.startswith(str(job.pk)))
    assert "3g.40gb" in row.split() and "hgx-08-h01" in row
    code, out, _ = cli("show", str(job.pk))
    assert "1 GPU as a 3g.40gb MIG instance" in out and "hgx-08-h01:0/3g.40gb@" in out


def test_submit_sends_the_directory_it_runs_in_and_the_variables_asked_for(cli, tmp_path, monkeypatch):
    login(cli)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_PROJECT", "olmo-7b")
    code, out, err = cli("submit", "--cluster", "gb200-east", "--project", "olmo", "--gpus", "1", "--min-runtime",
                         "1h", "--", "python", "train.py")
    assert code == 0, err
    job = Job.objects.get()
    assert (job.workdir, job.env) == (str(tmp_path), {})  # sbatch's defaults: here, and no variables
    (tmp_path / "sub").mkdir()
    code, out, err = cli("submit", "--cluster", "gb200-east", "--project", "olmo", "--gpus", "1", "--min-runtime",
                         "1h", "--chdir", "sub", "--env", "LR=3e-4", "--env", "NOTE=a b=c", "--export",
                         "WANDB_PROJECT", "--", "python", "train.py")
    assert code == 0, err
    job = Job.objects.latest("pk")
    assert job.workdir == str(tmp_path / "sub")
    assert job.env == {"LR": "3e-4", "NOTE": "a b=c", "WANDB_PROJECT": "olmo-7b"}
    code, out, _ = cli("show", str(job.pk))
    assert f"Directory                 {tmp_path / 'sub'}" in out and "LR NOTE WANDB_PROJECT" in out
    code, _, err = cli("submit", "--cluster", "gb200-east", "--project", "olmo", "--gpus", "1", "--min-runtime",
                       "1h", "--env", "CUDA_VISIBLE_DEVICES=1", "--", "python", "train.py")
    assert code == 1 and "env: CUDA_VISIBLE_DEVICES is set by the agent for every job" in err

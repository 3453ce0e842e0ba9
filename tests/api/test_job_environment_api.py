"""A job's `workdir` and `env` through the API and `allot submit`: checked at submit, each refusal naming
the field and the limit; shown only to those who see the job's command."""

import os

import pytest

from client.cli import job_env
from scheduler.models import Job
from tests.api.test_jobs_api import submit
from tests.conftest import get_user

pytestmark = pytest.mark.django_db


def test_workdir_and_env_are_kept_and_shown_to_the_owner_only(demo, api):
    response = submit(api, workdir="/data/alice/run-1", env={"WANDB_MODE": "offline", "EMPTY": "", "X_1": "a b"})
    assert response.status_code == 201, response.json()
    job = Job.objects.get()
    assert (job.workdir, job.env) == ("/data/alice/run-1", {"WANDB_MODE": "offline", "EMPTY": "", "X_1": "a b"})
    mine = api.get(f"/api/v1/jobs/{job.pk}/").json()
    assert mine["workdir"] == "/data/alice/run-1" and mine["env"]["WANDB_MODE"] == "offline"
    theirs = api.as_user(get_user("carol")).get(f"/api/v1/jobs/{job.pk}/").json()
    assert theirs["env"] is None and theirs["workdir"] is None and theirs["command"] is None


@pytest.mark.parametrize("changes, field, message", [
    ({"workdir": "data/run"}, "workdir", "must be an absolute path (from /); got 'data/run'"),
    ({"workdir": "/data/\nrun"}, "workdir", "holds a newline (a one-line field)"),
    ({"workdir": "/" + "d" * 5000}, "workdir", "no more than 4096 characters"),
    ({"env": {"1BAD": "x"}}, "env", "'1BAD' is not a variable name"),
    ({"env": {"BAD-NAME": "x"}}, "env", "'BAD-NAME' is not a variable name"),
    ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env", "CUDA_VISIBLE_DEVICES is set by the agent for every job"),
    ({"env": {"ALLOT_JOB_ID": "7"}}, "env", "ALLOT_JOB_ID is set by the agent"),
    ({"env": {"PET_NNODES": "7"}}, "env", "PET_NNODES is set by the agent"),
    ({"env": {"HOME": "/root"}}, "env", "HOME is set by the agent"),
    ({"env": {"BIG": "x" * 40000}}, "env", "no more than 32768 characters"),
    ({"env": {f"V{n}": "x" for n in range(300)}}, "env", "at most 256 variables; got 300"),
    ({"env": {f"V{n}": "x" * 30000 for n in range(3)}}, "env", "characters in all; at most 65536"),
    ({"env": ["A=1"]}, "env", "Expected a dictionary of items"),
])
def test_a_bad_workdir_or_env_is_a_400_naming_the_field(demo, api, changes, field, message):
    response = submit(api, **changes)
    assert response.status_code == 400, response.json()
    assert message in str(response.json()[field]), response.json()
    assert not Job.objects.exists()


def test_a_nul_in_a_value_is_refused_naming_the_variable(demo, api):
    response = submit(api, env={"TOKEN": "a\x00b"})
    assert response.status_code == 400 and "env.TOKEN" in str(response.json())


def test_the_cli_builds_the_env_as_sbatch_does(monkeypatch, capsys):
    monkeypatch.setenv("WANDB_PROJECT", "olmo")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("ALLOT_TOKEN", "secret-token")
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    assert job_env("NONE", []) == {}
    assert job_env("NONE", ["A=1", "B==2"]) == {"A": "1", "B": "=2"}
    assert job_env("WANDB_PROJECT,NOT_SET_HERE,C=3", ["C=4"]) == {"WANDB_PROJECT": "olmo", "C": "4"}
    assert "--export NOT_SET_HERE: not set in this shell" in capsys.readouterr().err
    everything = job_env("ALL", [])
    assert everything["WANDB_PROJECT"] == "olmo" and everything["PATH"] == os.environ["PATH"]
    # What the agent sets, the CLI's own token and the shell's bookkeeping never go.
    assert not {"CUDA_VISIBLE_DEVICES", "ALLOT_TOKEN", "HOME", "USER", "PWD", "SHLVL"} & set(everything)

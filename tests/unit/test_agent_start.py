"""What the agent reads at start (its token) and builds for each rank (its environment), without a server."""

import argparse
import os
from pathlib import Path

import pytest

from client.agent import TOKEN_VARIABLE, read_token
from client.execution import Account, Refused, job_environment, resolve_account
from client.text import clean_output


def args(**values):
    return argparse.Namespace(**{"token": None, "token_file": "/nonexistent/agent.token", **values})


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise SystemExit(message)


def test_the_token_file_must_be_readable_by_its_owner_only(tmp_path, monkeypatch):
    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    path = tmp_path / "agent.token"
    path.write_text("k" * 64 + "\n")
    path.chmod(0o644)
    with pytest.raises(SystemExit, match=r"is mode 0644: the token file must be readable by its owner only"):
        read_token(args(token_file=str(path)), Parser())
    path.chmod(0o600)
    assert read_token(args(token_file=str(path)), Parser()) == "k" * 64
    with pytest.raises(SystemExit, match="cannot read the token file /nonexistent/agent.token"):
        read_token(args(), Parser())


def test_a_token_in_the_environment_is_removed_from_it_once_read(monkeypatch):
    monkeypatch.setenv(TOKEN_VARIABLE, "from-the-environment")
    assert read_token(args(), Parser()) == "from-the-environment"
    assert TOKEN_VARIABLE not in os.environ


def test_a_token_on_the_command_line_works_but_warns(caplog, monkeypatch):
    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    assert read_token(args(token="on-the-command-line"), Parser()) == "on-the-command-line"
    assert "shows the token in the process list" in caplog.text


ACCOUNT = Account(name="asmith", uid=1234, gid=1234, home="/home/asmith", shell="/bin/bash")
ASSIGNMENT = {"job": 42, "run": 1, "rank": 2, "world_size": 4, "gpus": [4, 5, 6, 7], "gpu_milli": 1000,
              "restarts": 1, "master_addr": "10.0.0.1", "master_port": 29542, "env": {"LR": "3e-4"},
              "hosts": ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]}


def test_the_environment_of_a_multi_host_rank_is_what_torchrun_reads_and_nothing_of_the_agent():
    env = job_environment(account=ACCOUNT, assignment=ASSIGNMENT, host="node-03", cuda_devices="4,5,6,7",
                          job_dir=Path("/jobs/job-42"), run_dir=Path("/jobs/job-42/run-1"))
    assert env == {
        "HOME": "/home/asmith", "USER": "asmith", "LOGNAME": "asmith", "SHELL": "/bin/bash",
        "PATH": "/usr/local/bin:/usr/bin:/bin", "LR": "3e-4",
        "CUDA_VISIBLE_DEVICES": "4,5,6,7", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "ALLOT_JOB_ID": "42", "ALLOT_RANK": "2", "ALLOT_WORLD_SIZE": "4", "ALLOT_RESTARTS": "1",
        "ALLOT_GPU_MILLI": "1000", "ALLOT_HOST": "node-03", "ALLOT_JOB_DIR": "/jobs/job-42",
        "ALLOT_CHECKPOINT_FILE": "/jobs/job-42/checkpoint", "ALLOT_HOSTFILE": "/jobs/job-42/run-1/hostfile",
        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29542", "WORLD_SIZE": "4", "NODE_RANK": "2", "NNODES": "4",
        "PET_NNODES": "4", "PET_NODE_RANK": "2", "PET_NPROC_PER_NODE": "4", "PET_MASTER_ADDR": "10.0.0.1",
        "PET_MASTER_PORT": "29542",
    }


@pytest.mark.parametrize("env, message", [
    ({"CUDA_VISIBLE_DEVICES": "0"}, "may not set CUDA_VISIBLE_DEVICES"),
    ({"ALLOT_AGENT_TOKEN": "x"}, "may not set ALLOT_AGENT_TOKEN"),
    ({"A-B": "x"}, "invalid variable name"),
    ({"A": "x\x00y"}, "text without NUL"),
])
def test_the_agent_checks_the_jobs_own_variables_again(env, message):
    with pytest.raises(Refused, match=message):
        job_environment(account=ACCOUNT, assignment={**ASSIGNMENT, "env": env}, host="h", cuda_devices="0",
                        job_dir=Path("/j"), run_dir=Path("/j/r"))


def test_accounts_a_single_user_agent_and_root():
    own = Account(name="me", uid=1000, gid=1000, home="/home/me", shell="/bin/sh")
    assert resolve_account("me", host="h", own=own, allow_root=False) == own
    with pytest.raises(Refused, match="the single-user agent on h runs only me's jobs, not asmith's"):
        resolve_account("asmith", host="h", own=own, allow_root=False)
    with pytest.raises(Refused, match="no such user on h: no-such-account-here"):
        resolve_account("no-such-account-here", host="h", own=None, allow_root=False)
    with pytest.raises(Refused, match=r"would run as root \(root, uid 0\) and cluster c does not allow root jobs"):
        resolve_account("root", host="h", own=None, allow_root=False, cluster="c")
    assert resolve_account("root", host="h", own=None, allow_root=True).uid == 0


@pytest.mark.parametrize("text, cleaned", [
    ("plain\ttext\n", "plain\ttext\n"),
    ("nul\x00here", "nul\ufffdhere"),
    ("\x1b[1;32mgreen\x1b[0m", "green"),
    ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),
    ("bell\x07 cr\r del\x7f c1\x9b", "bell cr del c1"),
    ("lone \ud83d surrogate", "lone \ufffd surrogate"),
])
def test_output_is_cleaned(text, cleaned):
    assert clean_output(text, limit=100) == cleaned
    assert clean_output("x" * 50 + "end", limit=10) == "x" * 7 + "end"

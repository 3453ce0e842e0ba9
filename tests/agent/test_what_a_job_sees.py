"""What a job sees on an agent host: its submitter's account, its directory, an environment the agent built.

Real agents as root, two OS accounts made for the test (conftest.py), jobs that print `id`, `pwd` and
`env` and that the test reads back through /proc while they run.
"""

import os
import re
from pathlib import Path

import pytest

from client.cgroups import detect
from scheduler.models import Job, JobProcess
from tests.agent.conftest import HOST, PYTHON
from topology.models import Host

pytestmark = pytest.mark.django_db(transaction=True)

SHOW = "id; echo \"pwd=$(pwd)\"; echo ENV-START; env | sort; echo ENV-END; echo ready; sleep 60"


def running_pid(lab, job) -> int:
    """The job's command, once the agent reports it running."""
    def pid():
        process = JobProcess.objects.filter(job=job, pid__isnull=False, state="running").first()
        return process.pid if process else None
    return lab.wait_for(pid, what=f"job {job.pk} runs")


def output(lab, job, marker: str = "ready") -> str:
    def tail():
        process = JobProcess.objects.filter(job=job).first()
        return process.output_tail if process and marker in process.output_tail else None
    return lab.wait_for(tail, what=f"job {job.pk} prints {marker!r}")


def environment_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def status_ids(pid: int) -> dict[str, list[int]]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            fields[key] = [int(number) for number in value.split()]
    return fields


def test_a_job_runs_as_its_submitter_in_its_directory_with_only_the_environment_the_agent_built(make_lab, accounts):
    lab = make_lab(start=())
    lab.start_agent(HOST, token_in_env=True)  # the token reaches the agent in ALLOT_AGENT_TOKEN
    lab.wait_for(lambda: Host.objects.get(name=HOST).state == "up", what="the agent registers")
    ann, ben = accounts
    workdir = lab.workdir(ann)
    job = lab.submit(SHOW, workdir=workdir, env={"WANDB_MODE": "offline", "PATH": "/usr/bin:/bin"})
    pid = running_pid(lab, job)
    text = output(lab, job)
    print(f"\n--- what job {job.pk} printed on {HOST} ---\n{text}")  # for the closing note

    # Its account, primary group and supplementary groups, as the kernel has them.
    ids = status_ids(pid)
    assert ids["Uid"] == [ann.uid] * 4 and ids["Gid"] == [ann.gid] * 4
    assert sorted(ids["Groups"]) == sorted(ann.groups)
    assert f"uid={ann.uid}({ann.name}) gid={ann.gid}({ann.name})" in text
    assert f"allotg{ann.name[6:]}" in text  # the supplementary group, as `id` names it
    # The directory it asked for.
    assert os.readlink(f"/proc/{pid}/cwd") == workdir
    assert f"pwd={workdir}" in text

    # The environment: the account's, the job's own, Allot's; nothing of the agent's.
    environ = environment_of(pid)
    printed = dict(line.split("=", 1) for line in text.split("ENV-START\n")[1].split("ENV-END")[0].splitlines()
                   if "=" in line)
    token = lab.tokens[HOST]
    agent_environ = set(os.environ) | {"ALLOT_TEST_AGENT_MARKER", "ALLOT_AGENT_TOKEN"}
    for env in (environ, printed):
        assert token not in "".join(f"{key}={value}" for key, value in env.items())
        assert not {"ALLOT_TEST_AGENT_MARKER", "ALLOT_AGENT_TOKEN", "DATABASE_URL", "DJANGO_SETTINGS_MODULE",
                    "VIRTUAL_ENV", "PYTHONPATH"} & set(env)
        assert (env["HOME"], env["USER"], env["LOGNAME"], env["SHELL"]) == (ann.home, ann.name, ann.name, "/bin/sh")
        assert env["WANDB_MODE"] == "offline" and env["PATH"] == "/usr/bin:/bin"
        assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert (env["ALLOT_JOB_ID"], env["ALLOT_RANK"], env["ALLOT_WORLD_SIZE"], env["WORLD_SIZE"]) == (
            str(job.pk), "0", "1", "1")
        assert (env["PET_NNODES"], env["PET_NODE_RANK"], env["PET_NPROC_PER_NODE"]) == ("1", "0", "1")
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "127.0.0.1"
        assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == str(29500 + job.pk % 20000)
        assert Path(env["ALLOT_HOSTFILE"]).read_text() == "127.0.0.1\n"
        unexpected = set(env) & agent_environ - {"HOME", "USER", "LOGNAME", "SHELL", "PATH", "PWD", "OLDPWD",
                                                  "SHLVL", "_"}
        assert not unexpected, f"the agent's own variables reached the job: {sorted(unexpected)}"
    # The agent itself dropped the token from its environment once read.
    assert "ALLOT_AGENT_TOKEN" not in lab.log()


def test_a_job_cannot_read_another_jobs_directory_environment_or_signal_it(make_lab, accounts):
    lab = make_lab()
    ann, ben = accounts
    secret = "s3cret-of-ann"
    first = lab.submit(f"echo {secret}; echo ready; sleep 60", user="ann", env={"ANN_SECRET": secret})
    first_pid = running_pid(lab, first)
    output(lab, first)
    job_dir = lab.jobs_dir() / f"job-{first.pk}"
    assert (job_dir.stat().st_uid, oct(job_dir.stat().st_mode & 0o777)) == (ann.uid, "0o700")
    probe = lab.program("probe.sh", f"""
cat {job_dir}/run-0/rank-0.log; echo "log=$?"
ls {job_dir}; echo "ls=$?"
cat /proc/{first_pid}/environ; echo "environ=$?"
kill -0 {first_pid}; echo "kill=$?"
ls {lab.agent_dir()}/state; echo "state=$?"
echo ready
""")
    second = lab.submit(f"sh {probe} 2>&1", user="ben")
    text = output(lab, second)
    assert secret not in text
    for step in ("log", "ls", "environ", "kill", "state"):
        assert re.search(rf"^{step}=[1-9]", text, re.M), f"{step} should have failed:\n{text}"
    assert text.count("Permission denied") >= 4 and "Operation not permitted" in text
    # And the first job is still there, untouched.
    assert Path(f"/proc/{first_pid}").exists()


def test_a_job_cannot_open_another_jobs_gpu_where_a_devices_controller_exists(make_lab, accounts):
    lab = make_lab()
    if not detect(host=HOST, privileged=True).filters_devices:
        pytest.skip("no devices controller here: on cgroup v2 the agent says it cannot filter devices (needs BPF)")
    opener = lab.program("open.py", f"""
import errno, os, sys
for index in range(4):
    try:
        os.close(os.open("{lab.dev_dir}/nvidia%d" % index, os.O_RDWR))
        print(index, "opened")
    except OSError as error:
        print(index, errno.errorcode[error.errno])
print("ready")
""")
    job = lab.submit(f"{PYTHON} {opener}", gpus=2)
    text = output(lab, job)
    own = {int(index) for index in JobProcess.objects.get(job=job).job.assignments.values_list("gpu__index", flat=True)}
    for index in range(4):
        # Its own GPUs reach the (absent) driver: ENXIO; the others are refused by the cgroup: EPERM.
        assert f"{index} {'ENXIO' if index in own else 'EPERM'}" in text, text


def test_a_missing_working_directory_fails_the_job_with_the_path(make_lab, accounts):
    lab = make_lab()
    job = lab.submit("true", workdir="/nonexistent/allot-work")
    lab.wait_for(lambda: Job.objects.get(pk=job.pk).state == "failed", what="the job fails")
    job.refresh_from_db()
    assert job.failure_reason == f"no such directory on {HOST}: /nonexistent/allot-work"

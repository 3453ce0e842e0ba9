"""Real agents running real processes against the live server; the test drives the ticks.

Two `allot-agent` processes serve two hosts of 4 fake GPUs each. Each job is a
small Python program that writes what it saw (CUDA_VISIBLE_DEVICES, rank,
restarts) and records the SIGTERM it receives.

The agents are a test rig: `--single-user`, so every job runs as the account
running the tests (the Allot users map to it with `posix_user`) — as root in CI,
which the cluster allows here (`allow_root_jobs`). Jobs as their submitters' own
accounts are tested in tests/agent/.
"""

import json
import os
import pwd
import signal
import subprocess
import sys
import time

import pytest
import yaml

from budgets.loaders import load_org_file
from scheduler.choices import JobState
from scheduler.services import JobRequest, job_cancel, job_submit
from scheduler.tick import run_tick
from tests.agent_rig import remove_cgroups, rig_agent, run_cgroup_parent
from tests.conftest import get_user
from topology.choices import HostState
from topology.loaders import load_cluster_file
from topology.models import Host

pytestmark = pytest.mark.django_db(transaction=True)

ME = pwd.getpwuid(os.getuid()).pw_name  # the account every job of the rig runs as
CLUSTER = {
    "name": "lab",
    "policy": {"tick": "1s", "grace_period": "3s", "unallocated_grace": "2s", "heartbeat_timeout": "4s",
               "allow_root_jobs": os.geteuid() == 0},
    "domains": [{"name": "node-{:02d}", "count": 2, "hosts": 1, "gpus_per_host": 4, "gpu_type": "H100"}],
}
ORG = {
    "users": [{"username": "alice", "password": "alice-password", "posix_user": ME},
              {"username": "carol", "password": "carol-pass", "posix_user": ME}],
    "units": [
        {"name": "olmo", "members": ["alice"], "share": {"lab": 50}},
        {"name": "tulu", "members": ["carol"], "share": {"lab": 50}},
    ],
}
# The job: note what it saw, then work until told to stop; SIGTERM is recorded and ends it.
PROGRAM = """
import json, os, signal, sys, time
out = os.path.join(os.environ["MARKS"], f"job-{os.environ['ALLOT_JOB_ID']}-run-{os.environ['ALLOT_RESTARTS']}")
def note(**facts):
    with open(out, "a") as handle:
        handle.write(json.dumps(facts) + "\\n")
def on_term(signum, frame):
    note(event="SIGTERM")
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
note(event="start", cuda=os.environ["CUDA_VISIBLE_DEVICES"], rank=os.environ["ALLOT_RANK"],
     world=os.environ["ALLOT_WORLD_SIZE"], master=os.environ["MASTER_ADDR"], port=os.environ["MASTER_PORT"])
print("hello from", os.environ["ALLOT_JOB_ID"], flush=True)
time.sleep(float(sys.argv[1]))
note(event="done")
"""


@pytest.fixture
def lab(tmp_path, live_server):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    (tmp_path / "org.yaml").write_text(yaml.safe_dump(ORG))
    cluster, _ = load_cluster_file(tmp_path / "cluster.yaml")
    load_org_file(tmp_path / "org.yaml")
    (tmp_path / "marks").mkdir()
    (tmp_path / "job.py").write_text(PROGRAM)
    agents = {}

    def start_agent(host):
        agents[host] = subprocess.Popen(
            rig_agent(live_server.url, host, tmp_path), stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / f"{host}.log", "ab"),
        )

    for host in ("node-01-h01", "node-02-h01"):
        start_agent(host)
    lab = type("Lab", (), {})()
    lab.cluster, lab.dir, lab.agents, lab.start_agent = cluster, tmp_path, agents, start_agent
    wait_for(lambda: Host.objects.filter(state=HostState.UP).count() == 2, cluster, what="both agents register")
    yield lab
    for process in agents.values():
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=10)
    for line in subprocess.run(["pgrep", "-f", str(tmp_path / "job.py")], capture_output=True,
                               text=True).stdout.split():
        os.kill(int(line), signal.SIGKILL)
    remove_cgroups(run_cgroup_parent())


def wait_for(condition, cluster, *, what, timeout=30.0):
    """Tick the cluster every half second until `condition()` holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run_tick(cluster)
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting until {what}")


def submit(lab, user="alice", project="olmo", gpus=2, min_runtime=3600, seconds=60, resumable=True):
    return job_submit(user=get_user(user), request=JobRequest(
        cluster="lab", project=project, gpus=gpus, min_runtime=min_runtime, resumable=resumable,
        command=f"{sys.executable} {lab.dir / 'job.py'} {seconds}", env={"MARKS": str(lab.dir / "marks")},
    ))


def marks(lab, job, run=0):
    path = lab.dir / "marks" / f"job-{job.pk}-run-{run}"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def state(job):
    job.refresh_from_db()
    return job.state


def test_jobs_run_on_disjoint_gpus_with_their_peer_variables(lab):
    jobs = [submit(lab, gpus=2) for _ in range(4)]
    wait_for(lambda: all(marks(lab, job) for job in jobs), lab.cluster, what="all four jobs start")
    wait_for(lambda: all(state(job) == JobState.RUNNING for job in jobs), lab.cluster,
             what="the agents report them running")
    seen = {}
    for job in jobs:
        start = marks(lab, job)[0]
        (host,) = {a.gpu.host.name for a in job.assignments.select_related("gpu__host")}
        seen.setdefault(host, []).extend(start["cuda"].split(","))
        assert (start["rank"], start["world"], start["master"]) == ("0", "1", "127.0.0.1")
    assert {host: sorted(gpus) for host, gpus in seen.items()} == {
        "node-01-h01": ["0", "1", "2", "3"], "node-02-h01": ["0", "1", "2", "3"],
    }
    # The output tail comes back through the heartbeat.
    wait_for(lambda: "hello from" in jobs[0].processes.get().output_tail, lab.cluster, what="output tail arrives")


def test_an_unallocated_job_is_preempted_by_an_allocated_one_and_requeued(lab):
    free = [submit(lab, user="carol", project="tulu", gpus=4, min_runtime=0) for _ in range(2)]
    wait_for(lambda: all(state(job) == JobState.RUNNING for job in free), lab.cluster, what="unallocated jobs run")

    paid = submit(lab, gpus=4, min_runtime=3600)
    wait_for(lambda: any({"event": "SIGTERM"} in marks(lab, job) for job in free), lab.cluster,
             what="an unallocated job receives SIGTERM")
    victim = next(job for job in free if {"event": "SIGTERM"} in marks(lab, job))
    wait_for(lambda: marks(lab, paid), lab.cluster, what="the allocated job starts")
    victim.refresh_from_db()
    assert victim.state == JobState.PENDING and victim.restarts == 1 and victim.preemptions == 1
    kinds = list(victim.events.values_list("kind", "cause"))
    assert ("preempt", f"job:{paid.pk}") in kinds and kinds[-1][0] == "requeue"


def test_cancel_stops_the_process(lab):
    job = submit(lab, gpus=1, seconds=120)
    wait_for(lambda: marks(lab, job), lab.cluster, what="the job starts")
    job_cancel(job=job, actor=get_user("alice"))
    wait_for(lambda: state(job) == JobState.CANCELLED, lab.cluster, what="the job is cancelled")
    assert {"event": "SIGTERM"} in marks(lab, job)
    assert not job.assignments.filter(released_at__isnull=True).exists()


def test_a_killed_agent_takes_its_host_down_and_the_resumable_job_runs_again_elsewhere(lab):
    job = submit(lab, gpus=4, seconds=300)
    wait_for(lambda: marks(lab, job), lab.cluster, what="the job starts")
    (first_host,) = {a.gpu.host.name for a in job.assignments.select_related("gpu__host")}
    lab.agents[first_host].send_signal(signal.SIGKILL)
    lab.agents[first_host].wait()

    wait_for(lambda: Host.objects.get(name=first_host).state == HostState.DOWN, lab.cluster,
             what="the silent host goes down", timeout=20)
    wait_for(lambda: marks(lab, job, run=1), lab.cluster, what="the job runs again", timeout=30)
    job.refresh_from_db()
    (second_host,) = {a.gpu.host.name for a in job.assignments.filter(released_at__isnull=True)
                      .select_related("gpu__host")}
    assert second_host != first_host and job.restarts == 1
    assert job.events.filter(kind="preempt", cause=f"down:{first_host}").exists()
    host = Host.objects.get(name=first_host)
    assert host.state_reason.startswith("no heartbeat for") and host.state_actor == "system:health"

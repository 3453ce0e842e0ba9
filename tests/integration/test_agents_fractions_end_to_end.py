"""Fractions and MIG, end to end: jobs submitted through the REST API, the tick, and real `allot-agent` processes.

Two hosts of 4 fake H100s (no NVML here), GPU 0 of each in MIG mode. Each job
writes the CUDA_VISIBLE_DEVICES and ALLOT_GPU_MILLI its agent gave it to a
file, then sleeps until stopped.
"""

import os
import signal
import subprocess

import pytest
import yaml

from budgets.loaders import load_org_file
from client.api import Client
from scheduler.models import GpuAssignment
from tests.agent_rig import remove_cgroups, rig_agent, run_cgroup_parent
from tests.integration.test_agents_end_to_end import ORG, wait_for
from topology.choices import HostState
from topology.loaders import load_cluster_file
from topology.models import Host

pytestmark = pytest.mark.django_db(transaction=True)

HOSTS = ("node-01-h01", "node-02-h01")
CLUSTER = {
    "name": "lab",
    "policy": {"tick": "1s", "grace_period": "3s", "unallocated_grace": "2s", "heartbeat_timeout": "4s",
               "allow_root_jobs": os.geteuid() == 0},
    "domains": [{"name": "node-{:02d}", "count": 2, "hosts": 1, "gpus_per_host": 4, "gpu_type": "H100", "mig": [0]}],
}


@pytest.fixture
def lab(tmp_path, live_server):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    (tmp_path / "org.yaml").write_text(yaml.safe_dump(ORG))
    cluster, _ = load_cluster_file(tmp_path / "cluster.yaml")
    load_org_file(tmp_path / "org.yaml")
    (tmp_path / "marks").mkdir()
    agents = []
    for host in HOSTS:
        agents.append(subprocess.Popen(
            rig_agent(live_server.url, host, tmp_path), stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / f"{host}.log", "ab"),
        ))
    wait_for(lambda: Host.objects.filter(state=HostState.UP).count() == 2, cluster, what="both agents register")
    token = Client(live_server.url).post("auth/token/", {"username": "alice", "password": "alice-password"})["token"]
    lab = type("Lab", (), {})()
    lab.cluster, lab.marks, lab.api = cluster, tmp_path / "marks", Client(live_server.url, token=token)
    yield lab
    for process in agents:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=10)
    for line in subprocess.run(["pgrep", "-f", f"{tmp_path / 'marks'}"], capture_output=True, text=True).stdout.split():
        os.kill(int(line), signal.SIGKILL)
    remove_cgroups(run_cgroup_parent())


def submit(lab, **fields) -> dict:
    """A job through the REST API that notes what its agent gave it, then waits to be stopped."""
    note = f'echo "$CUDA_VISIBLE_DEVICES $ALLOT_GPU_MILLI" > {lab.marks}/job-$ALLOT_JOB_ID; sleep 60'
    body = {"cluster": "lab", "project": "olmo", "gpus": 1, "min_runtime": 600, "resumable": True, "command": note}
    return lab.api.post("jobs/", {**body, **fields})


def seen(lab, job: dict) -> list[str] | None:
    path = lab.marks / f"job-{job['id']}"
    text = path.read_text().strip() if path.exists() else ""
    return text.split() if text else None


def test_a_mig_job_runs_with_its_instance_in_cuda_visible_devices(lab):
    job = submit(lab, mig_profile="1g.10gb")
    assert job["mig_profile"] == "1g.10gb"
    wait_for(lambda: seen(lab, job), lab.cluster, what="the MIG job starts and notes its devices")
    (gpu_id,) = lab.api.get(f"jobs/{job['id']}/")["gpu_ids"]
    host, rest = gpu_id.split(":")
    index, instance = rest.split("/")
    profile, start = instance.split("@")
    assert (index, profile) == ("0", "1g.10gb")
    # No NVML on this machine: the agent's stable id for the instance (client/agent.py). The instance is
    # all the job sees, so it is not told to hold back as a fraction is (ALLOT_GPU_MILLI stays 1000).
    assert seen(lab, job) == [f"MIG-{host}-0-{start}", "1000"]
    # A second one shares the same MIG GPU, on an instance of its own.
    other = submit(lab, mig_profile="1g.10gb")
    wait_for(lambda: seen(lab, other), lab.cluster, what="the second MIG job starts")
    (other_id,) = lab.api.get(f"jobs/{other['id']}/")["gpu_ids"]
    assert other_id.startswith(f"{host}:0/1g.10gb@") and other_id != gpu_id
    assert seen(lab, other)[0].startswith(f"MIG-{host}-0-") and seen(lab, other) != seen(lab, job)


def test_two_half_gpu_jobs_share_one_gpu_and_both_see_it(lab):
    first, second = submit(lab, gpu_milli=500), submit(lab, gpu_milli=500)
    wait_for(lambda: seen(lab, first) and seen(lab, second), lab.cluster, what="both fractions start")
    gpus = {a.job_id: (a.gpu.host.name, a.gpu.index, a.milli) for a in
            GpuAssignment.objects.filter(released_at__isnull=True).select_related("gpu__host")}
    assert gpus[first["id"]] == gpus[second["id"]] and gpus[first["id"]][2] == 500
    host, index, _ = gpus[first["id"]]
    assert index != 0  # GPU 0 is in MIG mode: fractions go elsewhere
    assert seen(lab, first) == seen(lab, second) == [str(index), "500"]
    assert lab.api.get(f"jobs/{first['id']}/")["gpu_ids"] == [f"{host}:{index}@500"]

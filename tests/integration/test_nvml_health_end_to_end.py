"""GPU health from NVML, end to end: the agent's probe over the recorded pynvml stand-in, real heartbeats to
the live server, the cluster's health policy acting, the host page marking the GPU an event names.

The agent here is the real `Agent` (client/agent.py) in this process, its probe driven by
tests/nvml_standin.py; it runs no jobs (no containment asked for), it only reports.
"""

import time

import pytest
import yaml

from client.agent import Agent
from client.cgroups import Containment
from client.nvml import NvmlProbe
from tests.conftest import get_user
from tests.nvml_standin import RecordedNvml, recording
from topology.choices import HostState
from topology.loaders import load_cluster_file
from topology.models import AgentToken, Gpu, Host, HostEvent

pytestmark = pytest.mark.django_db(transaction=True)

HOST = "gpu-01-h01"
CLUSTER = {
    "name": "nvmllab",
    "policy": {"tick": "1s", "heartbeat_timeout": "60s"},
    "health": {"xid": {"79": "drain"}, "nvml_error": "cordon", "ecc_uncorrected": "drain"},
    "domains": [{"name": "gpu-{:02d}", "count": 1, "hosts": 1, "gpus_per_host": 4, "gpu_type": "H100"}],
}


@pytest.fixture
def reporting(tmp_path, live_server, django_user_model):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    load_cluster_file(tmp_path / "cluster.yaml")
    django_user_model.objects.create_user("olga", password="olga-password", is_staff=True, is_superuser=True)
    nvml = RecordedNvml(recording("h100x4.json"))
    agent = Agent(server=live_server.url, token=AgentToken.for_host(Host.objects.get(name=HOST)).key, host=HOST,
                  gpus=None, workdir=tmp_path / "agent", address="127.0.0.1", probe=NvmlProbe(nvml=nvml),
                  containment=Containment())
    yield agent, nvml
    agent.probe.stop()


def beat_until(agent, condition, what, tries=60):
    for _ in range(tries):
        agent.heartbeat()
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"no heartbeat brought {what}")


def gpu_cell(html: str, index: int) -> str:
    row = html.split(f'data-gpu="{HOST}:{index}"')[1]
    return row.split('data-testid="gpu-health">')[1].split("</td>")[0]


def test_an_xid_from_nvml_drains_the_host_and_marks_its_gpu(reporting, client):
    agent, nvml = reporting
    agent.heartbeat()
    host = Host.objects.get(name=HOST)
    assert host.state == HostState.UP
    assert Gpu.objects.get(host=host, index=0).uuid == "GPU-5f1c2b0e-8a5d-4c37-9a3e-0b6a2f1d7c10"

    nvml.advance()  # XID 79 on GPU 3, from nvmlEventSetWait
    beat_until(agent, lambda: Host.objects.get(name=HOST).state == HostState.DRAINING, "the drain")
    host = Host.objects.get(name=HOST)
    assert (host.state_actor, host.state_reason) == ("system:health", "XID 79 on GPU 3: GPU has fallen off the bus")
    event = HostEvent.objects.get(host=host, kind="xid")
    assert (event.gpu, event.code) == (3, 79)

    client.force_login(get_user("olga"))
    html = client.get(f"/hosts/{HOST}/").content.decode()
    assert f"XID 79 at {time.strftime('%H:%M', time.localtime(event.at.timestamp()))}" in gpu_cell(html, 3)
    assert [gpu_cell(html, index) for index in (0, 1, 2)] == ["ok", "ok", "ok"]
    api = client.get(f"/api/v1/hosts/{HOST}/").json()
    assert api["gpus"][3]["health_event"]["label"] == "XID 79" and api["gpus"][0]["health_event"] is None


def test_an_nvml_error_is_never_healthy_it_takes_the_policys_action(reporting, client):
    agent, nvml = reporting
    agent.heartbeat()
    nvml.goto(2)  # GPU 2: NVML says the GPU is lost
    beat_until(agent, lambda: HostEvent.objects.filter(kind="nvml_error").exists(), "the NVML error")
    gpu = Gpu.objects.get(host__name=HOST, index=2)
    assert gpu.health == "failed"
    event = HostEvent.objects.get(kind="nvml_error")
    assert (event.gpu, event.detail) == (2, "NVML error on GPU 2: GPU 2: GPU is lost")
    host = Host.objects.get(name=HOST)
    assert host.state == HostState.CORDONED  # this cluster's policy for an NVML error
    assert host.events.filter(kind="state", detail__contains="up → cordoned: NVML error on GPU 2").exists()
    # The same error at the next heartbeat is not a second event.
    nvml.advance()
    agent.heartbeat()
    assert HostEvent.objects.filter(kind="nvml_error").count() == 1
    client.force_login(get_user("olga"))
    assert "NVML error at" in gpu_cell(client.get(f"/hosts/{HOST}/").content.decode(), 2)


def test_uncorrected_ecc_errors_and_a_pending_row_remap_are_health_events(reporting):
    agent, nvml = reporting
    agent.heartbeat()
    nvml.goto(4)
    beat_until(agent, lambda: HostEvent.objects.filter(kind="ecc").exists(), "the ECC event")
    gpu = Gpu.objects.get(host__name=HOST, index=1)
    assert (gpu.ecc_uncorrected_volatile, gpu.remapped_rows_pending) == (1, True)
    assert HostEvent.objects.get(kind="ecc").detail == ("uncorrected ECC errors on GPU 1: 1 uncorrected ECC error "
                                                        "since the driver loaded")
    assert HostEvent.objects.get(kind="rows_pending").gpu == 1
    host = Host.objects.get(name=HOST)
    assert (host.state, host.state_reason) == (HostState.DRAINING, "uncorrected ECC errors on GPU 1: 1 uncorrected "
                                                                  "ECC error since the driver loaded")
    agent.heartbeat()  # unchanged counters: no new events
    assert HostEvent.objects.filter(kind__in=["ecc", "rows_pending"]).count() == 2

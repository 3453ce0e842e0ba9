"""The agent endpoint: a token acts for its own host only; heartbeats carry health and processes."""

import pytest

from scheduler.models import Job, JobProcess
from scheduler.tick import run_tick
from tests.factories import make_job
from topology.choices import HostState
from topology.models import AWAITING_AGENT_REASON, AgentToken, Gpu, Host, HostEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent_cluster(demo):
    demo.executor = "agent"
    demo.save()
    return demo


def as_agent(api, host_name):
    token = AgentToken.for_host(Host.objects.get(name=host_name))
    api.credentials(HTTP_AUTHORIZATION=f"Agent {token.key}")
    return api


def beat(api, host, **extra):
    return api.post("/api/v1/agent/heartbeat/", {"host": host, **extra}, format="json")


def test_an_agent_token_acts_for_its_own_host_only(agent_cluster, api):
    as_agent(api, "hgx-01-h01")
    refused = beat(api, "hgx-02-h01")
    assert refused.status_code == 403 and "acts for hgx-01-h01, not hgx-02-h01" in refused.json()["detail"]
    assert Host.objects.get(name="hgx-02-h01").last_heartbeat_at is None
    assert beat(api, "hgx-01-h01").status_code == 200


def test_a_user_token_cannot_heartbeat(agent_cluster, api):
    from tests.conftest import get_user

    api.as_user(get_user("olga"))
    assert beat(api, "hgx-01-h01").status_code in (401, 403)
    api.credentials(HTTP_AUTHORIZATION="Agent not-a-token")
    assert beat(api, "hgx-01-h01").status_code == 401


def test_the_first_heartbeat_brings_a_waiting_host_into_service(agent_cluster, api):
    host = Host.objects.get(name="hgx-01-h01")
    host.set_state(HostState.DOWN, actor="test", reason=AWAITING_AGENT_REASON)
    body = beat(as_agent(api, "hgx-01-h01"), "hgx-01-h01", address="10.0.0.7",
                gpus=[{"index": i, "health": "ok"} for i in range(8)]).json()
    host.refresh_from_db()
    assert (host.state, host.address, body["state"]) == (HostState.UP, "10.0.0.7", "up")
    assert host.state_actor == "system:agent" and host.last_heartbeat_at is not None


def test_health_reports_are_recorded(agent_cluster, api):
    as_agent(api, "hgx-01-h01")
    beat(api, "hgx-01-h01", gpus=[{"index": 0, "health": "ok"}, {"index": 1, "health": "failed"}],
         events=[{"kind": "xid", "gpu": 1, "code": 79, "detail": "GPU has fallen off the bus"}])
    assert Gpu.objects.get(host__name="hgx-01-h01", index=1).health == "failed"
    xid = HostEvent.objects.get(host__name="hgx-01-h01", kind="xid")
    assert xid.detail == "XID 79 on GPU 1: GPU has fallen off the bus" and xid.actor == "system:agent"


def test_an_assignment_reaches_the_agent_and_its_reports_move_the_job(agent_cluster, api):
    beat(as_agent(api, "hgx-01-h01"), "hgx-01-h01")
    Host.objects.exclude(name="hgx-01-h01").update(state=HostState.DOWN, state_reason="test: out of service")
    job = make_job(gpus=8, min_runtime=600)
    run_tick(agent_cluster)
    job.refresh_from_db()
    assert job.state == "starting"

    reply = beat(api, "hgx-01-h01").json()
    (assignment,) = reply["assignments"]
    assert (assignment["job"], assignment["rank"], assignment["world_size"], assignment["gpus"]) == (
        job.pk, 0, 1, [0, 1, 2, 3, 4, 5, 6, 7])
    assert assignment["command"] == "python train.py" and assignment["master_port"] > 29000

    beat(api, "hgx-01-h01", processes=[{"job": job.pk, "run": 0, "rank": 0, "state": "running", "pid": 4242,
                                         "output_tail": "step 1\n"}])
    job.refresh_from_db()
    assert job.state == "running"
    assert JobProcess.objects.get(job=job).output_tail == "step 1\n"

    beat(api, "hgx-01-h01", processes=[{"job": job.pk, "run": 0, "rank": 0, "state": "exited", "exit_code": 0}])
    job.refresh_from_db()
    assert job.state == "completed" and job.exit_code == 0
    assert not Job.objects.get(pk=job.pk).assignments.filter(released_at__isnull=True).exists()


def test_a_process_the_server_does_not_know_is_told_to_stop(agent_cluster, api):
    as_agent(api, "hgx-01-h01")
    job = make_job(gpus=1, state="completed")
    reply = beat(api, "hgx-01-h01", processes=[{"job": job.pk, "run": 0, "rank": 0, "state": "running"}]).json()
    assert reply["stops"] == [{"job": job.pk, "run": 0, "rank": 0, "grace": 0.0,
                               "cause": "not assigned to this host any more"}]


def test_a_failing_rank_fails_the_job_without_requeue(agent_cluster, api):
    as_agent(api, "hgx-01-h01")
    beat(api, "hgx-01-h01")
    Host.objects.exclude(name="hgx-01-h01").update(state=HostState.DOWN, state_reason="test: out of service")
    job = make_job(gpus=8, min_runtime=600)
    run_tick(agent_cluster)
    beat(api, "hgx-01-h01", processes=[{"job": job.pk, "run": 0, "rank": 0, "state": "exited", "exit_code": 3}])
    job.refresh_from_db()
    assert job.state == "failed" and job.exit_code == 3
    assert job.events.last().cause == "failed: rank 0 exited with 3"

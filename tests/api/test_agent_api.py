"""The agent endpoint: a token acts for its own host only; heartbeats carry health and processes."""

import json

import pytest
import yaml
from django.test import Client

from scheduler.agents import ProcessReport
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


def test_a_failing_rank_stops_the_others_and_every_reader_sees_what_failed(agent_cluster, api):
    hosts = ["hgx-02-h01", "hgx-03-h01"]  # not the fast lane's
    for host in hosts:
        beat(as_agent(api, host), host)
    Host.objects.exclude(name__in=hosts).update(state=HostState.DOWN, state_reason="test: out of service")
    job = make_job(gpus=16, min_runtime=600)
    run_tick(agent_cluster)
    job.refresh_from_db()
    assert JobProcess.objects.filter(job=job).count() == 2, job.pending_reason
    beat(as_agent(api, hosts[0]), hosts[0],
         processes=[{"job": job.pk, "run": 0, "rank": 0, "state": "exited", "exit_code": 3}])
    # The cause and what failed are kept apart; the agent, the API and the pages read them as one.
    job.refresh_from_db()
    assert (job.state, job.stop_cause, job.stop_detail) == ("starting", "failed", "rank 0 exited with 3")
    reply = beat(as_agent(api, hosts[1]), hosts[1],
                 processes=[{"job": job.pk, "run": 0, "rank": 1, "state": "running"}]).json()
    assert [stop["cause"] for stop in reply["stops"]] == ["failed: rank 0 exited with 3"]
    shown = api.as_user(job.user).get(f"/api/v1/jobs/{job.pk}/").json()
    assert (shown["state"], shown["stop_cause"]) == ("starting", "failed: rank 0 exited with 3")
    beat(as_agent(api, hosts[1]), hosts[1],
         processes=[{"job": job.pk, "run": 0, "rank": 1, "state": "exited", "exit_code": 143}])
    job.refresh_from_db()
    assert (job.state, job.exit_code, job.failure_reason) == ("failed", 143, "rank 0 exited with 3")
    assert (job.stop_cause, job.stop_detail, job.restarts) == ("", "", 0)
    event = job.events.get(kind="fail")
    assert event.cause == "failed: rank 0 exited with 3"
    assert event.detail == "failed: rank 0 exited with 3, exit code 143"
    assert api.as_user(job.user).get(f"/api/v1/jobs/{job.pk}/").json()["stop_cause"] == ""


# ---------------------------------------------------------------- one bad entry never costs the heartbeat


def running_job(agent_cluster, api, host="hgx-01-h01"):
    beat(as_agent(api, host), host)
    Host.objects.exclude(name=host).update(state=HostState.DOWN, state_reason="test: out of service")
    job = make_job(gpus=8, min_runtime=600)
    run_tick(agent_cluster)
    return job


@pytest.mark.parametrize("field", ["job", "pid", "run", "rank", "exit_code"])
def test_an_integer_past_2_to_the_63_is_refused_by_name_and_the_rest_of_the_heartbeat_applied(agent_cluster, api,
                                                                                                field):
    job = running_job(agent_cluster, api)
    bad = {"job": job.pk, "run": 0, "rank": 0, "state": "exited", "exit_code": 0, field: 2**63}
    good = {"job": job.pk, "run": 0, "rank": 0, "state": "running", "pid": 4242, "output_tail": "step 1\n"}
    response = beat(api, "hgx-01-h01", processes=[bad, good],
                    events=[{"kind": "xid", "gpu": 1, "code": 2**64}, {"kind": "xid", "gpu": 2, "code": 13}],
                    gpus=[{"index": i} for i in range(8)])
    assert response.status_code == 200, response.content
    refused = response.json()["refused"]
    assert [entry["entry"] for entry in refused] == ["events[0]", "processes[0]"]
    assert list(refused[1]["errors"]) == [field] and "less than or equal to" in refused[1]["errors"][field][0]
    assert list(refused[0]["errors"]) == ["code"]
    process = JobProcess.objects.get(job=job)
    assert (process.state, process.pid, process.output_tail) == ("running", 4242, "step 1\n")
    assert HostEvent.objects.filter(host__name="hgx-01-h01", kind="xid", code=13, gpu=2).exists()


def test_escape_sequences_controls_and_lone_surrogates_in_output_are_cleaned_not_refused(agent_cluster, api):
    job = running_job(agent_cluster, api)
    tail = "a\ufffdb \x1b[1;31mred\x1b[0m \ud800 c\x07\r\nend\t!" + "y" * 9000

    def send(text):  # as the agent sends it: JSON with \u escapes (a lone surrogate included)
        body = {"host": "hgx-01-h01", "processes": [
            {"job": job.pk, "run": 0, "rank": 0, "state": "running", "output_tail": text}]}
        return api.post("/api/v1/agent/heartbeat/", json.dumps(body), content_type="application/json")

    response = send(tail)
    assert response.status_code == 200, response.content
    assert response.json()["refused"] == []
    stored = JobProcess.objects.get(job=job).output_tail
    assert len(stored) == 8000 and stored.endswith("y" * 100)
    send(tail[:40])
    assert JobProcess.objects.get(job=job).output_tail == "a\ufffdb red \ufffd c\nend\t!" + "y" * 10


def test_the_server_cleans_a_nul_in_what_an_agent_reports(agent_cluster, api):
    # The agent replaces NUL itself (client/text.py); an agent that does not (an older one) still keeps its
    # host up: the input boundary lets NUL through in output only, and the heartbeat cleans it.
    report = ProcessReport(job=1, run=0, rank=0, state="running", output_tail="a\x00b", error="x\x00\x1b[2Jy")
    assert (report.output_tail, report.error) == ("a\ufffdb", "x\ufffdy")
    job = running_job(agent_cluster, api)
    body = {"host": "hgx-01-h01", "processes": [
        {"job": job.pk, "run": 0, "rank": 0, "state": "running", "output_tail": "step\x00 1\n"}]}
    response = api.post("/api/v1/agent/heartbeat/", json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    assert JobProcess.objects.get(job=job).output_tail == "step\ufffd 1\n"
    # Anywhere else a NUL is still refused at the boundary, by name.
    body["host"] = "hgx-01-h01\x00"
    response = api.post("/api/v1/agent/heartbeat/", json.dumps(body), content_type="application/json")
    assert response.status_code == 400 and "host" in response.json()


def test_entries_that_are_not_objects_and_too_many_entries(agent_cluster, api):
    as_agent(api, "hgx-01-h01")
    response = beat(api, "hgx-01-h01", processes=["oops", 3], gpus=[{"index": 0}, {"index": "x"}])
    assert response.status_code == 200
    assert [entry["entry"] for entry in response.json()["refused"]] == ["gpus[1]", "processes[0]", "processes[1]"]
    response = beat(api, "hgx-01-h01", events=[{"kind": "xid", "code": 1}] * 1001)
    assert response.status_code == 400 and "events" in response.json()


def test_the_gpus_seen_are_compared_as_sets_of_indices(agent_cluster, api, tmp_path):
    from topology.loaders import load_cluster_file

    (tmp_path / "two.yaml").write_text(yaml.safe_dump({"name": "pair", "policy": {"executor": "agent"}, "domains": [
        {"name": "pair-{:02d}", "count": 1, "hosts": 1, "gpus_per_host": 2, "gpu_type": "L4"}]}))
    load_cluster_file(tmp_path / "two.yaml")
    as_agent(api, "pair-01-h01")
    reply = beat(api, "pair-01-h01", gpus=[{"index": 0}, {"index": 5}]).json()
    host = Host.objects.get(name="pair-01-h01")
    event = HostEvent.objects.get(host=host, kind="gpu_missing")
    assert event.detail == "1 of 2 GPUs visible (missing: GPU 1; unknown: GPU 5, not in the inventory)"
    assert reply["state"] == host.state == "draining" and host.state_reason == event.detail


def test_an_agent_header_that_is_not_ascii_is_a_401(agent_cluster, api):
    for header in ("Agent \u00ff\u00fe", "Agent caf\u00e9", "Agent \u2603"):
        api.credentials(HTTP_AUTHORIZATION=header)
        assert beat(api, "hgx-01-h01").status_code == 401
    response = Client().post("/api/v1/agent/heartbeat/", b"{}", content_type="application/json",
                             HTTP_AUTHORIZATION=b"Agent \xff\xfe".decode("latin-1"))
    assert response.status_code == 401


def test_a_host_of_a_simulated_cluster_is_refused(demo, api):
    assert demo.executor == "simulated"
    as_agent(api, "hgx-01-h01")
    response = beat(api, "hgx-01-h01", processes=[{"job": 1, "run": 0, "rank": 0, "state": "running"}])
    assert response.status_code == 409
    assert "whose jobs are simulated (executor: simulated): no agent may run them" in response.json()["detail"]
    assert Host.objects.get(name="hgx-01-h01").last_heartbeat_at is None


def test_a_failed_rank_is_said_failed_once(agent_cluster, api):
    job = running_job(agent_cluster, api)
    beat(api, "hgx-01-h01", processes=[{"job": job.pk, "run": 0, "rank": 0, "state": "exited", "exit_code": 3}])
    job.refresh_from_db()
    event = job.events.get(kind="fail")
    assert event.detail == "failed: rank 0 exited with 3, exit code 3" and job.failure_reason == "rank 0 exited with 3"


# ---------------------------------------------------------------- what the host records of its agent


def test_the_agent_facts_are_on_the_host_and_its_page(agent_cluster, api, client):
    as_agent(api, "hgx-01-h01")
    facts = {"mode": "single-user", "account": "alice", "uid": 1000, "containment": "none",
             "notes": "the agent is not root: process groups only, no limits"}
    assert beat(api, "hgx-01-h01", agent=facts).status_code == 200
    host = Host.objects.get(name="hgx-01-h01")
    assert (host.agent_mode, host.agent_account, host.containment) == ("single-user", "alice", "none")
    from tests.conftest import get_user

    client.force_login(get_user("olga"))
    html = client.get("/hosts/hgx-01-h01/").content.decode()
    assert "single-user agent</strong>: every job runs as <code>alice</code>" in html
    assert 'containment <strong data-testid="containment">none</strong>' in html
    assert api.as_user(get_user("olga")).get("/api/v1/hosts/hgx-01-h01/").json()["containment"] == "none"


def test_a_single_user_agent_running_as_root_is_refused_unless_root_jobs_are_allowed(agent_cluster, api):
    as_agent(api, "hgx-01-h01")
    facts = {"mode": "single-user", "account": "root", "uid": 0, "containment": "v1"}
    refused = beat(api, "hgx-01-h01", agent=facts)
    assert refused.status_code == 403 and "does not allow root jobs" in refused.json()["detail"]
    agent_cluster.allow_root_jobs = True
    agent_cluster.save()
    reply = beat(api, "hgx-01-h01", agent=facts)
    assert reply.status_code == 200 and reply.json()["allow_root_jobs"] is True


def test_an_assignment_says_whom_where_and_with_what_the_job_runs(agent_cluster, api):
    from budgets.models import UserProfile
    from tests.conftest import get_user

    beat(as_agent(api, "hgx-01-h01"), "hgx-01-h01")
    Host.objects.exclude(name="hgx-01-h01").update(state=HostState.DOWN, state_reason="test: out of service")
    UserProfile.objects.create(user=get_user("alice"), posix_user="asmith")
    job = make_job(gpus=4, min_runtime=600, memory_gib=10)
    Job.objects.filter(pk=job.pk).update(workdir="/data/alice/run", env={"WANDB_MODE": "offline"})
    run_tick(agent_cluster)
    (assignment,) = beat(api, "hgx-01-h01").json()["assignments"]
    assert (assignment["account"], assignment["workdir"], assignment["env"]) == (
        "asmith", "/data/alice/run", {"WANDB_MODE": "offline"})
    assert assignment["memory_mib"] == 10 * 1024 and assignment["hosts"] == ["hgx-01-h01"]


# ---------------------------------------------------------------- tokens


def test_tokens_are_stored_hashed_and_a_revoked_one_is_refused(agent_cluster, api):
    token = AgentToken.for_host(Host.objects.get(name="hgx-01-h01"))
    assert not AgentToken.objects.filter(key_hash=token.key).exists()
    api.credentials(HTTP_AUTHORIZATION=f"Agent {token.key}")
    assert beat(api, "hgx-01-h01").status_code == 200
    assert AgentToken.objects.get(pk=token.pk).last_used_at is not None
    assert token.revoke(actor="olga", reason="host decommissioned")
    assert beat(api, "hgx-01-h01").status_code == 401
    history = Host.objects.get(name="hgx-01-h01").events.filter(actor="olga").values_list("detail", flat=True)
    assert list(history) == [f"agent token {token.prefix}… revoked: host decommissioned"]


def test_the_admin_lists_tokens_and_revokes_them(agent_cluster, client):
    from tests.conftest import get_user

    token = AgentToken.for_host(Host.objects.get(name="hgx-01-h01"))
    admin = get_user("admin")
    client.force_login(admin)
    listing = client.get("/admin/topology/agenttoken/").content.decode()
    assert token.prefix in listing and token.key not in listing
    client.post("/admin/topology/agenttoken/", {"action": "revoke", "_selected_action": [token.pk]})
    token.refresh_from_db()
    assert token.revoked and token.revoked_by == "admin"


def test_the_command_rotates_a_token(agent_cluster):
    import io

    from django.core.management import call_command
    from django.core.management.base import CommandError

    out = io.StringIO()
    call_command("agent_token", "hgx-02-h01", stdout=out)
    first = out.getvalue().strip()
    with pytest.raises(CommandError, match="already has a token"):
        call_command("agent_token", "hgx-02-h01", stdout=io.StringIO())
    out = io.StringIO()
    call_command("agent_token", "hgx-02-h01", "--rotate", stdout=out)
    second = out.getvalue().strip()
    assert AgentToken.find(first) is None and AgentToken.find(second) is not None
    assert AgentToken.objects.filter(host__name="hgx-02-h01").count() == 2

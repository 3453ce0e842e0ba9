"""The automated drain, end to end (scenario D1 started by the health policy).

An XID 79 arrives in a heartbeat → the host is draining (by system:health, with the XID as its cause) →
the unallocated job and the one past its minimum runtime leave in the same tick, the protected one at its
minimum runtime → the host is drained. The host page says what is left and when it leaves.
"""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from scheduler.models import Job
from scheduler.tick import run_tick
from tests.conftest import get_user
from tests.factories import make_job
from topology.choices import HostState
from topology.models import AgentToken, Host, HostEvent

pytestmark = pytest.mark.django_db

HOST = "nvl72-01-h02"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def lab(demo, api):
    """The demo cluster run by agents, with one host in service."""
    demo.executor = "agent"
    demo.heartbeat_timeout_seconds = 3 * 3600
    demo.save()
    Host.objects.exclude(name=HOST).update(state=HostState.DOWN, state_reason="test: out of service")
    token = AgentToken.for_host(Host.objects.get(name=HOST))
    api.credentials(HTTP_AUTHORIZATION=f"Agent {token.key}")
    return demo


def beat(api, **body):
    response = api.post("/api/v1/agent/heartbeat/", {"host": HOST, "gpus": [{"index": i} for i in range(4)], **body},
                        format="json")
    assert response.status_code == 200, response.content
    return response.json()


def report(jobs, state="running"):
    return [{"job": job.pk, "run": job.restarts, "rank": 0, "state": state,
             **({"exit_code": 143} if state == "exited" else {})} for job in jobs]


def state(job):
    job.refresh_from_db()
    return job.state


def test_an_xid_79_drains_the_host_and_its_jobs_leave_at_their_minimum_runtime(lab, api, client):
    with time_machine.travel(T0, tick=False):
        beat(api)
        past = make_job(gpus=1, min_runtime=300, name="past-minimum")
        protected = make_job(gpus=1, min_runtime=3600, name="protected")
        free = make_job(project="tulu", user="carol", gpus=1, min_runtime=0, name="free")
        run_tick(lab)
        assert [state(job) for job in (past, protected, free)] == ["starting"] * 3
        beat(api, processes=report([past, protected, free]))
        assert [state(job) for job in (past, protected, free)] == ["running"] * 3

    # Ten minutes in, the agent reports an XID 79.
    xid_at = T0 + timedelta(minutes=10)
    with time_machine.travel(xid_at, tick=False):
        reply = beat(api, events=[{"kind": "xid", "gpu": 3, "code": 79}], processes=report([past, protected, free]))
        host = Host.objects.get(name=HOST)
        assert reply["state"] == "draining" == host.state
        assert (host.state_actor, host.state_reason) == ("system:health", "XID 79 on GPU 3: GPU has fallen off the bus")

        # The next tick: the unallocated job and the one past its minimum runtime leave; the protected one stays.
        run_tick(lab)
        assert [state(job) for job in (past, protected, free)] == ["preempting", "running", "preempting"]
        for job in (past, free):
            event = job.events.get(kind="preempt")
            assert event.cause == f"drain:{HOST}" and event.at == xid_at
        assert "unallocated jobs leave at once" in free.events.get(kind="preempt").detail
        assert "its minimum runtime of 5m is over" in past.events.get(kind="preempt").detail
        stops = beat(api, processes=report([past, protected, free]))["stops"]
        assert {stop["job"] for stop in stops} == {past.pk, free.pk}

        # Their processes exit: both requeue (resumable), and wait — the only host is draining.
        beat(api, processes=report([past, free], "exited") + report([protected]))
        assert [state(job) for job in (past, protected, free)] == ["pending", "running", "pending"]

        client.force_login(get_user("olga"))
        html = client.get(f"/hosts/{HOST}/").content.decode()
        assert "1 job left;</strong> leaves by <strong>10:01</strong>" in html
        assert "at its minimum runtime" in html
        assert 'data-testid="drain-progress"' in html

    # Just before its minimum runtime ends the protected job is still there.
    with time_machine.travel(T0 + timedelta(minutes=59), tick=False):
        beat(api, processes=report([protected]))
        run_tick(lab)
        assert state(protected) == "running"

    # At its minimum runtime (1 h after its start) it is preempted for the drain, then exits.
    leave_at = T0 + timedelta(hours=1)
    with time_machine.travel(leave_at, tick=False):
        beat(api, processes=report([protected]))
        run_tick(lab)
        assert state(protected) == "preempting"
        event = protected.events.get(kind="preempt")
        assert (event.cause, event.at) == (f"drain:{HOST}", leave_at)
        beat(api, processes=report([protected], "exited"))
        assert state(protected) == "pending"
        assert Host.objects.get(name=HOST).state == HostState.DRAINING

        # With no job left, the next tick drains it; it is on the repair list with its cause.
        run_tick(lab)
        host = Host.objects.get(name=HOST)
        # "drained" is a state change: the reason, who gave it and when stay until resume (as `sinfo -R`).
        assert host.state == HostState.DRAINED
        assert (host.state_actor, host.state_reason, host.state_changed_at) == (
            "system:health", "XID 79 on GPU 3: GPU has fallen off the bus", xid_at)
        assert not Job.objects.filter(assignments__gpu__host=host, assignments__released_at__isnull=True).exists()
        changes = list(HostEvent.objects.filter(host=host, kind="state").order_by("at", "id").values_list(
            "actor", "detail"))
        assert changes[-2:] == [
            ("system:health", "up → draining: XID 79 on GPU 3: GPU has fallen off the bus"),
            ("system:scheduler", "draining → drained: no jobs left: drained, ready for repair"),
        ]
        html = client.get("/repairs/").content.decode()
        assert f'data-host="{HOST}"' in html and "XID 79 on GPU 3: GPU has fallen off the bus" in html


def test_an_on_call_drain_keeps_its_reason_who_and_when_once_drained_until_resume(demo, client):
    from topology.services import host_drain, host_resume

    host = Host.objects.get(name="hgx-02-h01")
    asked = T0 + timedelta(minutes=3)
    with time_machine.travel(asked, tick=False):
        host_drain(host=host, actor="olga", reason="RMA ticket 4242")
    with time_machine.travel(asked + timedelta(minutes=1), tick=False):
        run_tick(demo)  # nothing runs there: drained at once
    host.refresh_from_db()
    assert host.state == HostState.DRAINED
    assert (host.state_reason, host.state_actor, host.state_changed_at) == ("RMA ticket 4242", "olga", asked)
    assert HostEvent.objects.filter(host=host, kind="state").latest("at").detail.startswith("draining → drained")
    client.force_login(get_user("olga"))
    page = client.get(f"/hosts/{host.name}/").content.decode()
    assert 'data-testid="host-reason">RMA ticket 4242<' in page and "<strong>olga</strong>" in page
    assert "RMA ticket 4242" in client.get("/repairs/").content.decode()
    with time_machine.travel(asked + timedelta(hours=2), tick=False):
        host_resume(host=host, actor="olga", reason="tray replaced")
    host.refresh_from_db()
    assert (host.state, host.state_reason) == (HostState.UP, "tray replaced")

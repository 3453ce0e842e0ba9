"""The per-cluster health policy: events in heartbeats (and their absence) become recorded actions."""

import re
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from scheduler.agents import Heartbeat, agent_heartbeat
from scheduler.executors import expire_heartbeats
from topology.choices import HostState
from topology.health import DEFAULT_HEALTH_POLICY, HealthPolicy, parse_health_policy, xid_meaning
from topology.loaders import apply_cluster
from topology.models import Cluster, Host, HostEvent
from topology.services import host_drain
from topology.spec import LoadError, parse_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent_cluster(demo):
    demo.executor = "agent"
    demo.save()
    Host.objects.update(last_heartbeat_at=timezone.now())
    return demo


def heartbeat(host_name, *, gpus=None, events=(), now=None):
    host = Host.objects.get(name=host_name)
    return agent_heartbeat(Heartbeat(host=host, gpus=list(gpus or []), events=list(events)), now=now)


def all_gpus(count):
    return [{"index": index, "health": "ok"} for index in range(count)]


# ---------------------------------------------------------------- the policy itself


def test_the_defaults_drain_on_the_xids_of_the_issue_and_down_a_silent_host(demo):
    policy = demo.health
    assert {code: policy.for_xid(code) for code in (48, 79, 94, 95)} == dict.fromkeys((48, 79, 94, 95), "drain")
    assert policy.for_xid(13) == "none"
    assert (policy.heartbeat_lost, policy.gpus_missing) == ("down", "drain")
    assert demo.health_policy == DEFAULT_HEALTH_POLICY


def test_a_policy_is_checked_and_completed_with_the_defaults():
    policy, problems = parse_health_policy({"xid": {13: "cordon", "79": "down"}})
    assert problems == []
    assert policy == {"xid": {"13": "cordon", "79": "down"}, "heartbeat_lost": "down", "gpus_missing": "drain",
                      "nvml_error": "drain", "ecc_uncorrected": "drain", "rows_pending": "drain"}
    _, problems = parse_health_policy({"xid": {"x": "drain", 48: "reboot"}, "heartbeat_lost": "none", "oops": 1,
                                       "nvml_error": "ignore"})
    assert problems == [
        "health.oops: unknown key (known: xid, heartbeat_lost, gpus_missing, nvml_error, ecc_uncorrected, "
        "rows_pending)",
        "health.xid.x: not an XID code (a whole number)",
        "health.xid.48: 'reboot' must be one of drain, cordon, down, none",
        "health.heartbeat_lost: 'none' must be one of down, drain, cordon",
        "health.nvml_error: 'ignore' must be one of drain, cordon, down, none",
    ]


def test_a_broken_stored_policy_falls_back_to_the_defaults_when_read():
    assert HealthPolicy.of({"xid": "nonsense"}).for_xid(79) == "drain"
    assert HealthPolicy.of(None).heartbeat_lost == "down"


def test_the_admin_refuses_a_bad_policy(demo):
    demo.health_policy = {"xid": {"79": "explode"}}
    with pytest.raises(ValidationError) as refused:
        demo.full_clean()
    assert "health_policy.xid.79: 'explode' must be one of drain, cordon, down, none" in str(refused.value)


def test_the_xid_table_has_nvidias_names():
    assert xid_meaning(79) == "GPU has fallen off the bus"
    assert xid_meaning(48) == "Double bit ECC error"
    assert xid_meaning(95) == "Uncontained ECC error"
    assert xid_meaning(999) == "" and xid_meaning(None) == ""


def test_the_cluster_file_may_set_the_policy_and_leaving_it_out_keeps_the_stored_one(db):
    spec = {
        "name": "lab", "policy": {"executor": "simulated"},
        "domains": [{"name": "node-01", "hosts": 1, "gpus_per_host": 4, "gpu_type": "H100"}],
        "health": {"xid": {"79": "drain", "13": "cordon"}, "gpus_missing": "none"},
    }
    cluster, _ = apply_cluster(parse_cluster(spec))
    assert cluster.health.for_xid(13) == "cordon" and cluster.health.gpus_missing == "none"
    # The same file again changes nothing.
    _, changes = apply_cluster(parse_cluster(spec))
    assert changes == {"created": 0, "updated": 0, "removed": 0}
    # A file without `health:` leaves the stored policy (an admin's edit) alone.
    del spec["health"]
    apply_cluster(parse_cluster(spec))
    assert Cluster.objects.get(name="lab").health.for_xid(13) == "cordon"
    with pytest.raises(LoadError) as refused:
        parse_cluster({**spec, "health": {"heartbeat_lost": "reboot"}})
    assert refused.value.problems == ["health.heartbeat_lost: 'reboot' must be one of down, drain, cordon"]


# ---------------------------------------------------------------- events → actions


def test_an_xid_79_drains_the_host_with_its_cause(agent_cluster):
    heartbeat("nvl72-01-h02", gpus=all_gpus(4), events=[{"kind": "xid", "gpu": 3, "code": 79}])
    host = Host.objects.get(name="nvl72-01-h02")
    assert host.state == HostState.DRAINING
    assert host.state_actor == "system:health"
    assert host.state_reason == "XID 79 on GPU 3: GPU has fallen off the bus"
    xid = HostEvent.objects.get(host=host, kind="xid")
    assert (xid.code, xid.meaning, xid.actor) == (79, "GPU has fallen off the bus", "system:agent")
    change = HostEvent.objects.get(host=host, kind="state")
    assert change.actor == "system:health"
    assert change.detail == "up → draining: XID 79 on GPU 3: GPU has fallen off the bus"


def test_an_xid_outside_the_policy_is_recorded_and_nothing_more(agent_cluster):
    xid = {"kind": "xid", "gpu": 0, "code": 13, "detail": "SM exception"}
    heartbeat("nvl72-01-h02", gpus=all_gpus(4), events=[xid])
    host = Host.objects.get(name="nvl72-01-h02")
    assert host.state == HostState.UP
    detail = HostEvent.objects.get(host=host, kind="xid").detail
    assert detail == "XID 13 on GPU 0: Graphics engine exception (SM exception)"


def test_a_cluster_can_map_an_xid_to_another_action(agent_cluster):
    agent_cluster.health_policy = {"xid": {"13": "cordon", "79": "none"}}
    agent_cluster.save()
    heartbeat("nvl72-01-h02", gpus=all_gpus(4), events=[{"kind": "xid", "gpu": 0, "code": 79}])
    assert Host.objects.get(name="nvl72-01-h02").state == HostState.UP
    heartbeat("nvl72-01-h02", gpus=all_gpus(4), events=[{"kind": "xid", "gpu": 0, "code": 13}])
    host = Host.objects.get(name="nvl72-01-h02")
    assert (host.state, host.state_reason) == (HostState.CORDONED, "XID 13 on GPU 0: Graphics engine exception")


def test_automated_actions_never_bring_a_host_back_nor_repeat(agent_cluster):
    host = Host.objects.get(name="nvl72-01-h02")
    host.set_state(HostState.DRAINED, actor="olga", reason="RMA 1234")
    heartbeat("nvl72-01-h02", gpus=all_gpus(4), events=[{"kind": "xid", "gpu": 1, "code": 48}])
    host.refresh_from_db()
    assert (host.state, host.state_actor, host.state_reason) == (HostState.DRAINED, "olga", "RMA 1234")
    host.set_state(HostState.UP, actor="olga", reason="repaired")
    for _ in range(2):
        heartbeat("nvl72-01-h02", gpus=all_gpus(4), events=[{"kind": "xid", "gpu": 1, "code": 48}])
    assert HostEvent.objects.filter(host=host, kind="state", actor="system:health").count() == 1


def test_fewer_gpus_visible_than_expected_drains_the_host_once(agent_cluster):
    heartbeat("hgx-03-h01", gpus=all_gpus(6))
    host = Host.objects.get(name="hgx-03-h01")
    assert host.state == HostState.DRAINING
    assert host.state_reason == "6 of 8 GPUs visible (missing: GPU 6, 7)"
    heartbeat("hgx-03-h01", gpus=all_gpus(6))
    assert HostEvent.objects.filter(host=host, kind="gpu_missing").count() == 1
    # All GPUs back: recorded, the host stays out until someone resumes it.
    heartbeat("hgx-03-h01", gpus=all_gpus(8))
    assert HostEvent.objects.filter(host=host, kind="inventory", detail="all 8 GPUs visible again").exists()
    assert Host.objects.get(name="hgx-03-h01").state == HostState.DRAINING


def test_an_agent_that_sees_no_gpus_at_all_is_not_a_missing_gpu(agent_cluster):
    heartbeat("hgx-03-h01", gpus=[])
    assert Host.objects.get(name="hgx-03-h01").state == HostState.UP


def test_a_lost_heartbeat_takes_the_host_down_by_default(agent_cluster):
    now = timezone.now()
    Host.objects.filter(name="hgx-04-h01").update(last_heartbeat_at=now - timedelta(minutes=5))
    assert expire_heartbeats(agent_cluster, now=now) == ["hgx-04-h01"]
    host = Host.objects.get(name="hgx-04-h01")
    assert (host.state, host.state_actor) == (HostState.DOWN, "system:health")
    assert host.state_reason == "no heartbeat for 5m (timeout 1m30s)"
    assert expire_heartbeats(agent_cluster, now=now + timedelta(seconds=5)) == []


def test_a_cluster_may_drain_a_silent_host_instead(agent_cluster):
    agent_cluster.health_policy = {"heartbeat_lost": "drain"}
    agent_cluster.save()
    now = timezone.now()
    Host.objects.filter(name="hgx-04-h01").update(last_heartbeat_at=now - timedelta(minutes=5))
    expire_heartbeats(agent_cluster, now=now)
    assert Host.objects.get(name="hgx-04-h01").state == HostState.DRAINING
    expire_heartbeats(agent_cluster, now=now + timedelta(seconds=5))
    assert HostEvent.objects.filter(host__name="hgx-04-h01", kind="heartbeat_lost").count() == 1


# ---------------------------------------------------------------- the demo's faults


def test_the_demo_injects_faults_through_the_policy_and_repairs_drained_hosts(demo):
    from scheduler.demo_load import FAULT_ACTOR, REPAIR_ACTOR, DemoLoad

    load = DemoLoad(seed=3, faults=True, fault_every=0, repair_after=600, max_faulty_hosts=1)
    load.step()
    xid = HostEvent.objects.get(kind="xid", actor=FAULT_ACTOR)
    host = xid.host
    if demo.health.for_xid(xid.code) == "drain":
        assert host.state == HostState.DRAINING and host.state_actor == "system:health"
        assert host.state_reason.startswith(f"XID {xid.code} on GPU ")
    assert demo.health.for_xid(xid.code) == "drain"  # this seed's fault drains: the crew's case
    # An on-call's own drain of another host, finished long ago: not the crew's to resume.
    other = Host.objects.filter(domain__cluster=demo, state=HostState.UP).exclude(pk=host.pk).first()
    host_drain(host=other, actor="olga", reason="RMA ticket 4242")
    long_ago = timezone.now() - timedelta(minutes=11)
    for broken in (host, other):
        broken.refresh_from_db()
        broken.set_state(HostState.DRAINED, actor="system:scheduler", reason="no jobs left", keep_reason=True)
    Host.objects.filter(pk__in=[host.pk, other.pk]).update(state_changed_at=long_ago)
    HostEvent.objects.filter(pk=xid.pk).update(at=long_ago)
    # Drained, the fault long enough ago: the repair crew brings it back, recorded like anyone's action.
    load.step()
    host.refresh_from_db()
    assert (host.state, host.state_actor) == (HostState.UP, REPAIR_ACTOR)
    other.refresh_from_db()
    assert (other.state, other.state_actor, other.state_reason) == (HostState.DRAINED, "olga", "RMA ticket 4242")


def test_without_faults_the_demo_only_submits(demo):
    from scheduler.demo_load import DemoLoad

    DemoLoad(faults=False).step()
    assert not HostEvent.objects.filter(kind="xid").exists()


def test_a_gpu_an_xid_names_is_marked_on_the_host_page_and_the_rack(demo, client):
    from tests.conftest import get_user
    from topology.services import host_report_xid

    host = Host.objects.get(name="nvl72-02-h05")
    host_report_xid(host=host, code=79, gpu=2, actor="demo:fault-injector")
    client.force_login(get_user("olga"))
    page = client.get("/hosts/nvl72-02-h05/").content.decode()
    cells = page.split('data-testid="gpu-health">')[1:]
    assert [cell.startswith('<span class="gpu-mark"') for cell in cells] == [False, False, True, False]
    rack = client.get("/clusters/gb200-east/domains/nvl72-02/").content.decode()
    assert rack.count("data-mark=") == 1
    assert re.search(r'data-gpu="nvl72-02-h05:2" data-state="\w+" data-mark="XID 79"', rack)
    assert "XID 79 on GPU 2: GPU has fallen off the bus" in rack

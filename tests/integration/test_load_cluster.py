"""load_cluster: FORMATS.md's cluster spec, idempotent, refused whole with the entry and field named."""

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduler.models import GpuAssignment
from tests.factories import make_job
from topology.choices import HostState
from topology.loaders import LoadError, load_cluster_file
from topology.models import AWAITING_AGENT_REASON, Block, Cluster, Domain, Gpu, Host

pytestmark = pytest.mark.django_db

SPEC = {
    "name": "gb200-east",
    "policy": {"tick": "5s", "window": "7d", "max_min_runtime": "8h", "grace_period": 60, "fast_lane_gpus": 8},
    "domains": [
        {"name": "nvl72-{:02d}", "count": 2, "block": "spine-a", "hosts": 18, "gpus_per_host": 4,
         "gpu_type": "GB200", "cpus_per_host": 144, "memory_gib_per_host": 900},
        {"name": "hgx-{:02d}", "count": 3, "hosts": 1, "gpus_per_host": 8, "gpu_type": "H100"},
    ],
    "unhealthy_hosts": ["nvl72-02-h07"],
}


def write(tmp_path, spec, name="cluster.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


def test_it_loads_the_inventory_of_the_spec(tmp_path):
    call_command("load_cluster", str(write(tmp_path, SPEC)))

    cluster = Cluster.objects.get(name="gb200-east")
    assert (cluster.tick_seconds, cluster.window_seconds, cluster.max_min_runtime_seconds) == (5, 604800, 28800)
    assert cluster.grace_period_seconds == 60 and cluster.fast_lane_gpus == 8
    assert cluster.heartbeat_timeout_seconds == 90  # default kept
    assert list(Domain.objects.values_list("name", "kind")) == [
        ("hgx-01", "server"), ("hgx-02", "server"), ("hgx-03", "server"), ("nvl72-01", "nvl72"), ("nvl72-02", "nvl72"),
    ]
    assert Domain.objects.get(name="nvl72-01").block == Block.objects.get(name="spine-a")
    assert Host.objects.count() == 2 * 18 + 3
    tray = Host.objects.get(name="nvl72-01-h18")
    assert (tray.position, tray.gpu_type, tray.gpu_count, tray.cpus, tray.memory_gib) == (18, "GB200", 4, 144, 900)
    assert Gpu.objects.count() == 2 * 72 + 24
    assert sorted(Gpu.objects.filter(host=tray).values_list("index", flat=True)) == [0, 1, 2, 3]
    failed = Host.objects.get(name="nvl72-02-h07")
    assert failed.state == HostState.DOWN and "unhealthy_hosts" in failed.state_reason
    assert failed.events.last().actor == "system:load_cluster"
    # An agent cluster's hosts take work once their agent reports.
    assert set(Host.objects.exclude(pk=failed.pk).values_list("state", "state_reason")) == {
        (HostState.DOWN, AWAITING_AGENT_REASON)
    }
    assert cluster.gpu_counts() == {"total": 168, "healthy": 0}


def test_a_simulated_cluster_is_in_service_at_once(tmp_path):
    cluster, _ = load_cluster_file(write(tmp_path, {**SPEC, "policy": {"executor": "simulated"}}))
    assert cluster.gpu_counts() == {"total": 168, "healthy": 164}
    assert cluster.largest_healthy_domain() == 72
    assert cluster.largest_domain_capacity() == 72


def test_loading_the_same_file_twice_changes_nothing(tmp_path):
    path = write(tmp_path, SPEC)
    load_cluster_file(path)
    before = list(Host.objects.values_list("name", "state", "state_changed_at"))
    _, changes = load_cluster_file(path)
    assert changes == {"created": 0, "updated": 0, "removed": 0}
    assert list(Host.objects.values_list("name", "state", "state_changed_at")) == before


def test_a_changed_file_updates_the_inventory_and_keeps_running_jobs_hosts(tmp_path, demo_org_units):
    load_cluster_file(write(tmp_path, SPEC))
    job = make_job(cluster="gb200-east", gpus=4, on_hosts=["hgx-03-h01"])
    changed = {
        **SPEC,
        "policy": {**SPEC["policy"], "grace_period": "2m"},
        "domains": [SPEC["domains"][0], {**SPEC["domains"][1], "count": 2}],  # hgx-03 removed
        "unhealthy_hosts": [],
    }
    with pytest.raises(LoadError) as refused:
        load_cluster_file(write(tmp_path, changed, "changed.yaml"))
    assert "hgx-03-h01" in str(refused.value) and "runs jobs" in str(refused.value)
    assert Host.objects.filter(name="hgx-03-h01").exists()
    assert Cluster.objects.get().grace_period_seconds == 60  # refused whole

    GpuAssignment.objects.filter(job=job).update(released_at="2026-01-01T00:00:00Z")
    _, changes = load_cluster_file(write(tmp_path, changed, "changed.yaml"))
    assert Cluster.objects.get().grace_period_seconds == 120
    # hgx-03 ran a job once: it stays, out of service, so the job's history keeps its host.
    assert Host.objects.get(name="hgx-03-h01").state == HostState.DOWN
    repaired = Host.objects.get(name="nvl72-02-h07")  # no longer listed: waits for its agent like the others
    assert (repaired.state, repaired.state_reason) == (HostState.DOWN, AWAITING_AGENT_REASON)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"policy": {"tick": "5 seconds"}}, "policy.tick: '5 seconds' is not a duration"),
        ({"policy": {"window": "-7d"}}, "policy.window"),
        ({"policy": {"grace": "60s"}}, "policy.grace: unknown key"),
        ({"policy": {"executor": "slurm"}}, "policy.executor: 'slurm' must be one of agent, simulated"),
        ({"domains": [{"name": "a-{:02d}", "count": 2, "hosts": 0, "gpus_per_host": 4, "gpu_type": "GB200"}]},
         "domains[0] (a-{:02d}).hosts: 0 must be between 1 and 1024"),
        ({"domains": [{"name": "a", "count": 2, "hosts": 1, "gpus_per_host": 4, "gpu_type": "GB200"}]},
         "domains[0] (a).name: 'a' needs a placeholder"),
        ({"domains": [{"name": "a", "hosts": 1, "gpus_per_host": "four", "gpu_type": "GB200"}]},
         "domains[0] (a).gpus_per_host: 'four' is not a whole number"),
        ({"domains": [{"name": "a", "hosts": 1, "gpus_per_host": 4}]}, "domains[0] (a).gpu_type"),
        ({"domains": [{"name": "a", "hosts": 1, "gpus_per_host": 4, "gpu_type": "X"},
                      {"name": "a", "hosts": 1, "gpus_per_host": 4, "gpu_type": "X"}]},
         "domains[1] (a).name: domain a is defined twice"),
        ({"unhealthy_hosts": ["nvl72-09-h01"]}, "unhealthy_hosts[0]: 'nvl72-09-h01' is not a host of this cluster"),
        ({"name": "GB200 East"}, "name: 'GB200 East' must be a lower-case name"),
    ],
)
def test_a_bad_file_is_refused_whole_with_the_entry_and_field_named(tmp_path, change, message):
    spec = {**SPEC, **change}
    if "policy" in change:
        spec["policy"] = change["policy"]
    with pytest.raises(CommandError) as refused:
        call_command("load_cluster", str(write(tmp_path, spec)))
    assert message in str(refused.value)
    assert "nothing changed" in str(refused.value)
    assert not Cluster.objects.exists() and not Host.objects.exists()


def test_a_file_that_is_not_yaml_is_refused(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(CommandError, match="not valid YAML"):
        call_command("load_cluster", str(path))


def test_the_fast_lane_takes_whole_small_hosts_the_simulator_would_pick(tmp_path):
    from scheduler.sim.inputs import read_cluster

    path = write(tmp_path, {**SPEC, "policy": {"fast_lane_gpus": 12}})
    load_cluster_file(path)
    lane = set(Host.objects.filter(fast_lane=True).values_list("name", flat=True))
    assert lane == {"hgx-01-h01", "hgx-02-h01"}  # two 8-GPU servers; no NVL72 tray is taken
    simulated = {host.name for host in read_cluster(path).topology.hosts if host.fast_lane}
    assert simulated == lane
    load_cluster_file(write(tmp_path, {**SPEC, "policy": {"fast_lane_gpus": 0}}, "no-lane.yaml"))
    assert not Host.objects.filter(fast_lane=True).exists()


def test_root_jobs_are_refused_unless_the_policy_allows_them(tmp_path):
    cluster, _ = load_cluster_file(write(tmp_path, SPEC))
    assert cluster.allow_root_jobs is False
    cluster, _ = load_cluster_file(write(tmp_path, {**SPEC, "policy": {**SPEC["policy"], "allow_root_jobs": True}}))
    assert Cluster.objects.get(name=cluster.name).allow_root_jobs is True
    with pytest.raises(LoadError, match="policy.allow_root_jobs: 'yes' must be true or false"):
        load_cluster_file(write(tmp_path, {**SPEC, "policy": {**SPEC["policy"], "allow_root_jobs": "yes"}}))


def test_the_shield_cap_is_a_policy_key_the_tick_and_the_simulator_read_alike(tmp_path):
    from scheduler.core.model import preempted_protection_cap
    from scheduler.sim.inputs import read_cluster

    default, _ = load_cluster_file(write(tmp_path, SPEC))
    assert preempted_protection_cap(default.scheduling_policy()) == 16 * 3600  # twice max_min_runtime
    spec = {**SPEC, "policy": {**SPEC["policy"], "max_preempted_protection": "12h"}}
    cluster, _ = load_cluster_file(write(tmp_path, spec))
    assert cluster.scheduling_policy().max_preempted_protection == 12 * 3600
    assert read_cluster(write(tmp_path, spec, "sim.yaml")).policy.max_preempted_protection == 12 * 3600


def test_the_longest_wait_for_a_checkpoint_is_a_policy_key_the_tick_and_the_simulator_read_alike(tmp_path):
    from scheduler.sim.inputs import read_cluster

    default, _ = load_cluster_file(write(tmp_path, SPEC))
    assert default.scheduling_policy().max_checkpoint_wait == 30 * 60
    spec = {**SPEC, "policy": {**SPEC["policy"], "max_checkpoint_wait": "0s"}}
    cluster, _ = load_cluster_file(write(tmp_path, spec))
    assert cluster.scheduling_policy().max_checkpoint_wait == 0
    assert read_cluster(write(tmp_path, spec, "sim.yaml")).policy.max_checkpoint_wait == 0
    with pytest.raises(LoadError, match="policy.max_checkpoint_wait"):
        load_cluster_file(write(tmp_path, {**SPEC, "policy": {**SPEC["policy"], "max_checkpoint_wait": "soon"}}))

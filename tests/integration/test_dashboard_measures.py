"""The dashboard's measures on a hand-computable cluster: the live selectors agree with the pure
definitions the simulator uses (scheduler/core/measures.py, DESIGN §5)."""

from datetime import timedelta

import pytest
from django.db import IntegrityError
from django.utils import timezone

from operations.selectors import project_consumption
from scheduler.core import Domain, Host, Topology
from scheduler.core.measures import Held, measure
from scheduler.history import record_sample
from scheduler.models import ClusterSample, Tick
from scheduler.racks import domain_views
from scheduler.selectors import cluster_measures, cluster_sample, free_by_domain, sample_series
from scheduler.tick import run_tick
from tests.factories import make_job
from topology.choices import HostState
from topology.loaders import apply_cluster
from topology.models import Gpu
from topology.models import Host as HostRow
from topology.spec import parse_cluster

pytestmark = pytest.mark.django_db

LAB = {
    "name": "lab",
    "policy": {"executor": "simulated"},
    "domains": [
        {"name": "rack", "hosts": 4, "gpus_per_host": 4, "gpu_type": "GB200", "kind": "rack"},
        {"name": "srv-{:02d}", "count": 2, "hosts": 1, "gpus_per_host": 8, "gpu_type": "H100"},
    ],
}


@pytest.fixture
def lab(demo_org_units):
    """32 GPUs: a 4-tray rack (16 GB200) and two 8-GPU H100 servers, with work and trouble on them.

    rack-h01: an allocated 4-GPU job.        rack-h02: an unallocated 2-GPU job, 2 idle.
    rack-h03: draining, idle.                rack-h04: down.
    srv-01:   a 500-milli allocated job on GPU 0, 7 idle.
    srv-02:   GPU 7 failed, 7 idle.
    """
    cluster, _ = apply_cluster(parse_cluster(LAB))
    make_job(cluster="lab", gpus=4, min_runtime=3600, on_hosts=["rack-h01"])
    make_job(cluster="lab", project="tulu", gpus=2, min_runtime=0, on_hosts=["rack-h02"])
    make_job(cluster="lab", gpus=1, milli=500, min_runtime=600, gpu_ids=["srv-01-h01:0"])
    HostRow.objects.get(name="rack-h03").set_state(HostState.DRAINING, actor="test", reason="test")
    HostRow.objects.get(name="rack-h04").set_state(HostState.DOWN, actor="test", reason="test")
    Gpu.objects.filter(host__name="srv-02-h01", index=7).update(health="failed")
    return cluster


def hand_built_topology():
    """The same cluster written by hand for the pure functions."""

    def host(name, domain, gpu_type, healthy, state="up"):
        return Host(name, domain, gpu_type, tuple(f"{name}:{i}" for i in healthy), state=state)

    hosts = (
        host("rack-h01", "rack", "GB200", range(4)), host("rack-h02", "rack", "GB200", range(4)),
        host("rack-h03", "rack", "GB200", range(4), HostState.DRAINING),
        host("rack-h04", "rack", "GB200", range(4), HostState.DOWN),
        host("srv-01-h01", "srv-01", "H100", range(8)), host("srv-02-h01", "srv-02", "H100", range(7)),
    )
    domains = (Domain("rack", tuple(h.name for h in hosts[:4])), Domain("srv-01", ("srv-01-h01",)),
               Domain("srv-02", ("srv-02-h01",)))
    held = [Held(f"rack-h01:{i}", 1000, True) for i in range(4)]
    held += [Held(f"rack-h02:{i}", 1000, False) for i in range(2)]
    held += [Held("srv-01-h01:0", 500, True)]
    return Topology(domains, hosts), held


def test_gpu_states_by_hand(lab):
    states = cluster_measures(lab).states
    assert states.total == 32
    assert states.allocated == pytest.approx(4.5)
    assert states.unallocated == pytest.approx(2)
    # idle: rack-h02 2, srv-01 7 + the free half of GPU 0, srv-02 7 healthy.
    assert states.idle == pytest.approx(16.5)
    # unavailable: rack-h03 (draining) 4, rack-h04 (down) 4, srv-02's failed GPU.
    assert states.unavailable == pytest.approx(9)
    assert states.availability == pytest.approx(23 / 32)
    assert states.occupancy == pytest.approx(6.5 / 23)
    assert states.allocated_occupancy == pytest.approx(4.5 / 23)


def test_fragmentation_by_hand(lab):
    fragmentation = cluster_measures(lab).fragmentation
    # Free whole GPUs: rack 2 (rack-h02), srv-01 7 (GPU 0 is half used), srv-02 7.
    assert fragmentation.free_gpus == 16
    assert fragmentation.largest_placeable == 7
    assert fragmentation.stranded == {8: 1.0, 16: 1.0, 32: 1.0, 72: 1.0}
    # One more free GPU on srv-01 and an 8-GPU job fits there: only rack's 2 and srv-02's 7 are stranded for 8.
    from scheduler.models import GpuAssignment

    GpuAssignment.objects.filter(gpu__host__name="srv-01-h01").update(released_at=timezone.now())
    fragmentation = cluster_measures(lab).fragmentation
    assert (fragmentation.free_gpus, fragmentation.largest_placeable) == (17, 8)
    assert fragmentation.stranded[8] == pytest.approx(9 / 17)


def test_the_live_selectors_agree_with_the_simulators_definition(lab):
    topology, held = hand_built_topology()
    expected = measure(topology, held, total_gpus=32)
    live = cluster_measures(lab)
    assert live.states == expected.states
    assert live.fragmentation == expected.fragmentation


def test_free_gpus_per_domain_now(lab):
    rows = {row["domain"]: row for row in free_by_domain(domain_views(lab))}
    assert rows["rack"] == {"domain": "rack", "total": 16, "free": 2, "in_use": 6, "unavailable": 8}
    assert rows["srv-01"]["free"] == 7 and rows["srv-02"]["free"] == 7


def test_a_tick_keeps_one_sample_a_minute_with_the_same_numbers(lab, settings):
    settings.ALLOT_SAMPLE_SECONDS = 60
    now = timezone.now()
    run_tick(lab, now=now)
    run_tick(lab, now=now + timedelta(seconds=5))
    assert ClusterSample.objects.filter(cluster=lab).count() == 1
    run_tick(lab, now=now + timedelta(seconds=65))
    samples = list(ClusterSample.objects.filter(cluster=lab))
    assert len(samples) == 2
    measures = cluster_measures(lab)
    last = samples[-1]
    assert (last.total_gpus, last.allocated, last.unallocated, last.idle, last.unavailable) == (
        32, measures.states.allocated, measures.states.unallocated, measures.states.idle,
        measures.states.unavailable)
    assert last.free_gpus == measures.fragmentation.free_gpus
    assert last.largest_placeable == measures.fragmentation.largest_placeable
    assert last.stranded == {str(k): pytest.approx(v, abs=1e-4) for k, v in measures.fragmentation.stranded.items()}
    # The ticks since the previous sample: the second and third.
    assert last.ticks == 2 and last.tick_seconds_max >= last.tick_seconds_mean > 0


def test_samples_and_ticks_are_pruned(lab):
    now = timezone.now()
    old = now - timedelta(seconds=lab.window_seconds + 60)
    ClusterSample.objects.create(cluster=lab, at=old, total_gpus=32, allocated=0, unallocated=0, idle=32,
                                 unavailable=0, free_gpus=32, largest_placeable=16)
    Tick.objects.create(cluster=lab, started_at=now - timedelta(days=3), duration=0.1)
    record_sample(lab, now=now, sample=cluster_sample(lab))
    assert list(ClusterSample.objects.filter(cluster=lab).values_list("at", flat=True)) == [now]
    assert not Tick.objects.filter(cluster=lab, started_at__lt=now - timedelta(days=2)).exists()


def sample(cluster, at, **values):
    fields = {"total_gpus": 32, "allocated": 0, "unallocated": 0, "idle": 32, "unavailable": 0, "free_gpus": 32,
              "largest_placeable": 16, "stranded": {"8": 0.0}, "ticks": 12, "tick_seconds_mean": 0.1,
              "tick_seconds_max": 0.2}
    fields.update(values)
    return ClusterSample.objects.create(cluster=cluster, at=at, **fields)


def test_the_series_averages_samples_into_buckets_and_keeps_the_worst_tick(lab, settings):
    settings.ALLOT_SAMPLE_SECONDS = 60
    now = timezone.now().replace(microsecond=0)
    # Two hours of range at 10 points: 12-minute buckets. Two samples in the first, one in the last.
    start = now - timedelta(hours=2)
    sample(lab, start + timedelta(minutes=1), allocated=10, idle=22, stranded={"8": 0.5}, tick_seconds_max=0.3)
    sample(lab, start + timedelta(minutes=2), allocated=20, idle=12, stranded={"8": 0.0}, ticks=4,
           tick_seconds_mean=0.4)
    sample(lab, now - timedelta(minutes=1), allocated=30, idle=2, largest_placeable=4)
    series = sample_series(lab, now=now, seconds=7200, points=10)
    assert series["bucket_seconds"] == 720
    assert series["allocated"] == [15, 30]
    assert series["idle"] == [17, 2]
    assert series["healthy"] == [32, 32]
    assert series["stranded"]["8"] == [0.25, 0.0]
    assert series["largest_placeable"] == [16, 4]
    assert series["tick_max"] == [0.3, 0.2]
    # The mean tick weighs each sample by its ticks: (12 × 0.1 + 4 × 0.4) / 16.
    assert series["tick_mean"][0] == pytest.approx(0.175)
    assert len(series["x"]) == 2


def test_each_project_against_its_entitlement(demo):
    now = timezone.now()
    # olmo ran 8 GPUs for an hour (charged); tulu 4 GPUs for 30 min unallocated.
    make_job(gpus=8, min_runtime=3600, on_hosts=["hgx-01-h01"], started=now - timedelta(hours=2))
    from scheduler.models import GpuAssignment

    GpuAssignment.objects.update(released_at=now - timedelta(hours=1))
    make_job(project="tulu", user="carol", gpus=4, min_runtime=0, on_hosts=["hgx-02-h01"],
             started=now - timedelta(minutes=30))
    rows = {row["project"]: row for row in project_consumption(demo, now=now)}
    assert set(rows) == {"olmo", "tulu", "safety", "molmo", "pixmo"}
    assert rows["olmo"]["used"] == pytest.approx(8.0)
    assert rows["olmo"]["parent"] == "nlp"
    healthy = demo.schedulable_gpus()
    assert rows["olmo"]["entitled"] == pytest.approx(0.60 * 0.55 * healthy * 168, abs=0.01)
    assert rows["olmo"]["ratio"] == pytest.approx(8.0 / (0.60 * 0.55 * healthy * 168), rel=1e-3)
    assert rows["tulu"]["used"] == 0 and rows["tulu"]["unallocated"] == pytest.approx(2.0, abs=0.01)


def test_the_sample_a_tick_keeps_is_what_the_dashboard_reads_right_after_it(lab, settings):
    """The tick measures the cluster from its snapshot and the decisions it applied; the dashboard's selectors,
    reading the database right after the tick, find the same numbers."""
    settings.ALLOT_SAMPLE_SECONDS = 60
    # Beside the lab's work and trouble (a draining and a down host, a failed GPU, half of srv-01's GPU 0 in use):
    # a job still on the draining host, a resumable and a one-shot job on the down host (the tick ends both and
    # requeues the first), and a queue: fractions of a GPU, whole GPUs, unallocated work, and a 16-GPU domain job
    # no domain can hold now.
    make_job(cluster="lab", gpus=2, min_runtime=3600, on_hosts=["rack-h03"])
    make_job(cluster="lab", gpus=2, min_runtime=600, on_hosts=["rack-h04"], resumable=True)
    make_job(cluster="lab", gpus=1, min_runtime=600, on_hosts=["rack-h04"], resumable=False)
    make_job(cluster="lab", gpus=1, milli=300, min_runtime=600, state="pending")
    make_job(cluster="lab", project="tulu", gpus=1, milli=250, min_runtime=0, state="pending")
    make_job(cluster="lab", gpus=4, min_runtime=3600, state="pending")
    make_job(cluster="lab", project="tulu", gpus=2, min_runtime=0, state="pending")
    make_job(cluster="lab", gpus=16, min_runtime=3600, state="pending", topology="domain")
    before = cluster_sample(lab)
    result = run_tick(lab, now=timezone.now())
    assert result.started == 4 and result.preempted == 2

    row = ClusterSample.objects.get(cluster=lab)
    live = cluster_sample(lab)
    assert live != before  # the tick changed the cluster, and the sample is of the cluster after it
    states, fragmentation = live.measures.states, live.measures.fragmentation
    assert (row.total_gpus, row.allocated, row.unallocated, row.idle, row.unavailable) == (
        states.total, pytest.approx(states.allocated, abs=5e-4), pytest.approx(states.unallocated, abs=5e-4),
        pytest.approx(states.idle, abs=5e-4), pytest.approx(states.unavailable, abs=5e-4))
    assert (row.free_gpus, row.largest_placeable) == (fragmentation.free_gpus, fragmentation.largest_placeable)
    assert row.stranded == {str(k): pytest.approx(v, abs=5e-5) for k, v in fragmentation.stranded.items()}
    assert (row.pending_jobs, row.pending_gpus, row.pending_allocated_gpus, row.running_jobs) == (
        live.pending.jobs, live.pending.gpus, live.pending.allocated_gpus, live.running_jobs)
    # By hand: 4 + 2 + 0.8 (0.5 + 0.3 shared) + 4 allocated GPUs held, 2 + 0.25 + 2 unallocated; the requeued job
    # (2 GPUs) and the domain job wait; 8 live jobs (4 before, 4 started).
    assert (row.allocated, row.unallocated) == (pytest.approx(10.8), pytest.approx(4.25))
    assert (row.pending_jobs, row.pending_gpus, row.running_jobs, result.tick.running) == (2, 18, 8, 8)


def test_a_tick_that_rolled_back_leaves_the_sample_to_the_next(lab, settings, monkeypatch):
    """What the database holds is then not what the tick's snapshot saw: no sample is measured from it."""
    settings.ALLOT_SAMPLE_SECONDS = 60
    make_job(cluster="lab", gpus=2, min_runtime=3600, state="pending")
    from scheduler import tick as tick_module

    def raced(*args, **kwargs):
        raise IntegrityError("another writer took the GPU")

    now = timezone.now()
    with monkeypatch.context() as patch:
        patch.setattr(tick_module, "_apply_start", raced)
        assert run_tick(lab, now=now).skipped
    assert not ClusterSample.objects.filter(cluster=lab).exists()
    run_tick(lab, now=now + timedelta(seconds=5))
    assert ClusterSample.objects.get(cluster=lab).running_jobs == cluster_sample(lab).running_jobs == 4

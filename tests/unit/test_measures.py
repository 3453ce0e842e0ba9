"""DESIGN §5 measures on hand-computable clusters (pure: no database)."""

import pytest

from scheduler.core import (
    CORDONED,
    DOWN,
    DRAINING,
    UP,
    Decisions,
    Domain,
    Host,
    PendingJob,
    Preemption,
    RunningJob,
    Snapshot,
    Start,
    Topology,
)
from scheduler.core.measures import (
    FRAGMENTATION_SIZES,
    Demand,
    Held,
    TimeAverage,
    fragmentation,
    free_gpus_by_host,
    free_groups,
    gpu_states,
    held_by,
    largest_placeable,
    measure,
    running_after,
    sample_after,
    stranded,
    stranded_gpus,
)


def rack(name, hosts, gpus=4, *, gpu_type="GB200", states=None, failed=None, fast_lane=()):
    """`hosts` hosts × `gpus` GPUs; `failed` maps a host number to how many of its GPUs failed."""
    states, failed = states or {}, failed or {}
    members = tuple(
        Host(f"{name}-h{n:02d}", name, gpu_type, tuple(f"{name}-h{n:02d}:{i}" for i in range(gpus - failed.get(n, 0))),
             state=states.get(n, UP), fast_lane=n in fast_lane)
        for n in range(1, hosts + 1)
    )
    return Domain(name, tuple(h.name for h in members)), members


def cluster(*racks):
    return Topology(tuple(d for d, _ in racks), tuple(h for _, hosts in racks for h in hosts))


def whole(*gpu_ids, allocated=True):
    return [Held(gpu_id, 1000, allocated) for gpu_id in gpu_ids]


def test_it_splits_every_gpu_into_exactly_one_state():
    # r1: 4 hosts × 4; host 2 draining, host 3 down, host 4 has one failed GPU. 16 GPUs in the inventory.
    topology = cluster(rack("r1", 4, states={2: DRAINING, 3: DOWN}, failed={4: 1}))
    held = [
        *whole("r1-h01:0", "r1-h01:1"),  # allocated on an up host
        *whole("r1-h02:0", allocated=False),  # unallocated, still running on the draining host
        Held("r1-h04:0", 600, True), Held("r1-h04:0", 400, False),  # one GPU shared 600 + 400
    ]
    states = gpu_states(topology, held, total_gpus=16)
    assert states.allocated == pytest.approx(2.6)
    assert states.unallocated == pytest.approx(1.4)
    # Idle: h01 has 2 free, h04 has 2 free whole GPUs (3 healthy, one shared in full).
    assert states.idle == pytest.approx(4)
    # Unavailable: h02's 3 idle GPUs (draining), h03's 4 (down), h04's failed GPU.
    assert states.unavailable == pytest.approx(8)
    assert states.healthy == pytest.approx(8)
    assert states.availability == pytest.approx(8 / 16)
    assert states.occupancy == pytest.approx(4 / 8)
    assert states.allocated_occupancy == pytest.approx(2.6 / 8)
    assert states.unallocated_occupancy == pytest.approx(1.4 / 8)


def test_an_empty_cluster_measures_zero_not_a_division_error():
    states = gpu_states(cluster(), [], total_gpus=0)
    assert (states.availability, states.occupancy, states.unavailable) == (0.0, 0.0, 0.0)
    assert fragmentation(cluster(), {}).stranded == dict.fromkeys(FRAGMENTATION_SIZES, 0.0)


def test_a_gpu_held_on_a_cordoned_host_is_in_use_not_unavailable():
    topology = cluster(rack("r1", 1, states={1: CORDONED}))
    states = gpu_states(topology, whole("r1-h01:0"), total_gpus=4)
    assert (states.allocated, states.idle, states.unavailable) == (1, 0, 3)


def test_free_gpus_are_whole_healthy_gpus_of_up_hosts_nobody_holds():
    topology = cluster(rack("r1", 3, states={3: CORDONED}, failed={2: 1}))
    free = free_gpus_by_host(topology, {"r1-h01:0", "r1-h02:1"})
    assert free == {"r1-h01": 3, "r1-h02": 2}


def test_skypilots_example_strands_all_twenty_free_gpus_for_a_16_gpu_job():
    # Rack A: 3 empty trays (12 GPUs); rack B: 2 (8 GPUs); 20 free, no domain holds 16.
    topology = cluster(rack("a", 18), rack("b", 18))
    free = {"a-h01": 4, "a-h02": 4, "a-h03": 4, "b-h01": 4, "b-h02": 4}
    groups = free_groups(topology, free)
    assert groups == {("a", "GB200", False): 12, ("b", "GB200", False): 8}
    assert stranded_gpus(groups, 16) == 20 and stranded(groups, 16) == 1.0
    assert stranded_gpus(groups, 8) == 0 and stranded(groups, 8) == 0.0
    assert stranded(groups, 12) == pytest.approx(8 / 20)
    assert largest_placeable(groups) == 12


def test_gpu_types_and_the_fast_lane_split_groups_and_servers_strand_large_jobs():
    # One rack of 4 trays, tray 1 in the fast lane; two 8-GPU H100 servers.
    topology = cluster(
        rack("r", 4, fast_lane=(1,)), rack("s1", 1, 8, gpu_type="H100"), rack("s2", 1, 8, gpu_type="H100"))
    free = {"r-h01": 4, "r-h02": 4, "r-h03": 2, "r-h04": 0, "s1-h01": 8, "s2-h01": 3}
    groups = free_groups(topology, free)
    assert groups == {("r", "GB200", True): 4, ("r", "GB200", False): 6, ("s1", "H100", False): 8,
                      ("s2", "H100", False): 3}
    frag = fragmentation(topology, free)
    assert frag.free_gpus == 21
    # k=8: only s1 (8) fits; the fast-lane tray (4), r's other trays (6) and s2 (3) are stranded: 13 of 21.
    assert frag.stranded[8] == pytest.approx(13 / 21)
    assert frag.stranded[16] == frag.stranded[32] == frag.stranded[72] == 1.0
    assert frag.largest_placeable == 8


def test_a_partial_rack_never_places_a_72_gpu_job():
    topology = cluster(rack("r", 18, states={7: DOWN}))
    frag = fragmentation(topology, free_gpus_by_host(topology, set()))
    assert frag.free_gpus == 68 and frag.largest_placeable == 68
    assert frag.stranded[72] == 1.0 and frag.stranded[32] == 0.0


def test_free_counts_are_capped_by_healthy_gpus_and_ignore_hosts_that_take_no_jobs():
    topology = cluster(rack("r", 2, states={2: DRAINING}, failed={1: 1}))
    assert free_groups(topology, {"r-h01": 4, "r-h02": 4}) == {("r", "GB200", False): 3}


def test_measure_takes_what_running_jobs_hold():
    topology = cluster(rack("r", 2))
    jobs = [
        RunningJob("1", "olmo", ("r-h01:0", "r-h01:1", "r-h01:2", "r-h01:3"), 0, 3600, True, 0, 1),
        RunningJob("2", "tulu", ("r-h02:0",), 0, 0, True, 0, 2, gpu_milli=500),
    ]
    result = measure(topology, held_by(jobs), total_gpus=8)
    assert (result.states.allocated, result.states.unallocated, result.states.idle) == (4, 0.5, 3.5)
    # The half-used GPU is not free: 3 whole GPUs are, all on r-h02.
    assert result.fragmentation.free_gpus == 3
    assert result.fragmentation.largest_placeable == 3
    assert result.fragmentation.stranded[8] == 1.0


def test_the_sample_after_a_tick_is_the_snapshot_with_the_decisions_that_took_effect():
    # r-h01: an allocated 2-GPU job, one holding 400 milli of GPU 2, and an unallocated one being preempted (it
    # keeps GPU 3 through its grace period). r-h02: down, with a resumable 2-GPU job and a one-shot 1-GPU one.
    # r-h03: draining, empty. r-h04: up, empty.
    topology = cluster(rack("r", 4, states={2: DOWN, 3: DRAINING}))
    running = (
        RunningJob("a", "olmo", ("r-h01:0", "r-h01:1"), 0, 3600, True, 0, 1),
        RunningJob("b", "olmo", ("r-h01:2",), 0, 600, True, 0, 2, gpu_milli=400),
        RunningJob("stopping", "tulu", ("r-h01:3",), 0, 0, True, 0, 3),
        RunningJob("lost", "olmo", ("r-h02:0", "r-h02:1"), 0, 3600, True, 0, 4),
        RunningJob("gone", "tulu", ("r-h02:2",), 0, 0, False, 0, 5),
    )
    pending = (
        PendingJob("f", "olmo", 1, 600, True, 0, 6, gpu_milli=500),
        PendingJob("w", "olmo", 4, 3600, True, 0, 7),
        PendingJob("cancelled", "tulu", 2, 0, True, 0, 8),
        PendingJob("waits", "tulu", 8, 0, True, 0, 9),
    )
    snapshot = Snapshot(topology, (), running, pending)
    # What took effect: "cancelled" was decided a start too, but another writer got there first.
    applied = Decisions(
        starts=(Start("f", ("r-h01:2",), 500), Start("w", ("r-h04:0", "r-h04:1", "r-h04:2", "r-h04:3"))),
        preemptions=(Preemption("lost", "down:r-h02", "", 0, True), Preemption("gone", "down:r-h02", "", 0, False),
                     Preemption("stopping", "job:w", "", 10, True)),
    )
    sample = sample_after(snapshot, applied, total_gpus=16)
    states = sample.measures.states
    # Held: a 2 + b 0.4 + f 0.5 + w 4 allocated, the stopping job's GPU unallocated; idle: what is left of GPU 2.
    assert (states.allocated, states.unallocated, states.idle) == (pytest.approx(6.9), 1, pytest.approx(0.1))
    # Unavailable: the down host's and the draining host's 4 GPUs each (the lost jobs hold none any more).
    assert states.unavailable == pytest.approx(8) and sample.measures.fragmentation.free_gpus == 0
    # The resumable lost job waits again; the one-shot one is gone.
    assert sample.pending == Demand(jobs=3, gpus=12, allocated_gpus=2)
    assert sample.running_jobs == 5 == running_after(snapshot, applied)
    # With nothing applied, the snapshot as it was, by the one definition of the measures.
    assert sample_after(snapshot, Decisions(), total_gpus=16).measures == measure(
        topology, held_by(running), total_gpus=16)


def test_time_average_weights_each_value_by_how_long_it_held():
    average = TimeAverage()
    average.observe(0, 1.0)
    average.observe(30, 0.0)
    average.observe(40, 0.5)
    assert average.mean(100) == pytest.approx((1.0 * 30 + 0 * 10 + 0.5 * 60) / 100)
    with pytest.raises(ValueError):
        average.observe(10, 1.0)
    assert TimeAverage().mean(10) == 0.0

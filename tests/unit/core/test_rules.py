"""The rules of DESIGN §3 beyond the worked scenarios: one table row per behaviour."""

from __future__ import annotations

import pytest

from scheduler.core import DOMAIN, DOWN, DRAINED, DRAINING, PREEMPTING, Policy, choose_fast_lane_hosts, schedule
from scheduler.core.baselines import fifo_first_fit, node_level
from scheduler.core.reasons import format_duration, format_time

from .builders import HOUR, domain, gpus_of, hgx, nvl72, pending, running, snapshot, topology, units
from .cases import Case, check

NOW = 10 * HOUR


def down_host() -> Case:
    topo = topology(hgx("hgx-00", states={1: DOWN}))
    held = [running("lost-resumable", "p", gpus_of("hgx-00-h01", 4), start_time=NOW - 600),
            running("lost-stopped", "p", gpus_of("hgx-00-h01", 4, 4), start_time=NOW - 600, resumable=False)]
    return Case(
        "a host that is down loses its jobs at once", snapshot(topo, units(("p", None, 100)), running_jobs=held),
        NOW, starts={},
        preempted={"lost-resumable": ("down:hgx-00-h01", True, 0), "lost-stopped": ("down:hgx-00-h01", False, 0)},
        facts={"lost-stopped": ("host hgx-00-h01 is down", "not resumable: it fails"),
               "lost-resumable": ("requeued with its original submit time",)},
    )


def max_runtime() -> Case:
    held = [running("long", "p", gpus_of("hgx-00-h01", 8), start_time=NOW - 2 * HOUR, max_runtime=2 * HOUR)]
    return Case(
        "a job past its maximum runtime is stopped, not requeued",
        snapshot(topology(hgx("hgx-00")), units(("p", None, 100)), running_jobs=held), NOW, starts={},
        preempted={"long": ("max_runtime", False, 60)}, facts={"long": ("maximum runtime of 2h",)},
    )


def drained_host() -> Case:
    topo = topology(domain("hgx", 1, 8, states={1: DRAINING}, gpu_type="H100"))
    return Case(
        "an empty draining host is drained", snapshot(topo, units(("p", None, 100))), NOW, starts={},
        host_changes={"hgx-h01": (DRAINED, "no jobs left")},
    )


def reservation_backfill() -> Case:
    """The rack is reserved for the large job: a 2 h job may not start there, short and unallocated ones may."""
    topo = topology(nvl72("rack"))
    held = [running(f"hold-{n}", "other", gpus_of(f"rack-h{n:02d}", 4), start_time=NOW, min_runtime=2 * HOUR)
            for n in range(1, 17)]
    org = units(("big", None, 50), ("other", None, 50, 500))
    jobs = [
        pending("large", "big", 72, topology=DOMAIN),
        pending("three-hours", "other", 4, min_runtime=3 * HOUR, submit_time=1),
        pending("ten-minutes", "other", 4, min_runtime=600, submit_time=2),
        pending("free", "other", 4, min_runtime=0, submit_time=3),
    ]
    return Case(
        "a reservation lets short and unallocated jobs backfill", snapshot(topo, org, running_jobs=held,
                                                                           pending_jobs=jobs), NOW,
        started_in={"ten-minutes": {"rack"}, "free": {"rack"}}, reserved={"large": "rack"},
        facts={"large": ("rack is reserved for it and frees in 2h1m",),
               "three-hours": ("were reserved for job large", "protection (its minimum runtime, longer after a "
                                                                 "preemption) would outlast that")},
    )


def fast_lane() -> Case:
    topo = topology(hgx("hgx-00", fast_lane=True), hgx("hgx-01"))
    jobs = [
        pending("long", "p", 8, min_runtime=2 * HOUR, submit_time=0),
        pending("debug", "p", 1, min_runtime=300, submit_time=1),
        pending("free", "p", 1, min_runtime=0, submit_time=2),
        pending("long-2", "p", 4, min_runtime=2 * HOUR, submit_time=3),
    ]
    return Case(
        "short jobs take the fast lane, unallocated ones fill it, long ones never use it",
        snapshot(topo, units(("p", None, 100)), pending_jobs=jobs), NOW,
        starts={"long": gpus_of("hgx-01-h01", 8), "debug": ("hgx-00-h01:0",), "free": ("hgx-00-h01:1",)},
        facts={"long-2": ("every host that could hold it is held by project p itself",)},
    )


def defragmentation() -> Case:
    """Rack a holds three small resumable jobs of a less-served project; rack b has room for them."""
    topo = topology(nvl72("a"), nvl72("b"))
    held = [running(f"small-{n}", "small", gpus_of(f"a-h{n:02d}", 4), start_time=NOW - 2 * HOUR,
                    last_checkpoint=NOW - 60) for n in (1, 2, 3)]
    held += [running(f"hold-{n}", "other", gpus_of(f"b-h{n:02d}", 4), start_time=NOW, min_runtime=2 * HOUR)
             for n in range(1, 16)]
    org = units(("big", None, 40, 10), ("small", None, 30), ("other", None, 30, 1000))
    return Case(
        "defragmentation moves small jobs out of a rack for a whole-rack job",
        snapshot(topo, org, running_jobs=held, pending_jobs=[pending("large", "big", 72, topology=DOMAIN)]), NOW,
        starts={}, reserved={"large": "a"},
        preempted={f"small-{n}": ("defrag", True, 60) for n in (1, 2, 3)},
        facts={"large": ("jobs are being moved out of a for it",),
               "small-1": ("to make one whole NVLink domain for job large",)},
    )


def earmarked_gpus() -> Case:
    """GPUs a job preempted are its own: the first job in line can't have them."""
    jobs = [pending("first", "low", 8), pending("owner", "high", 4, earmarked_gpus=gpus_of("hgx-00-h01", 4, 4))]
    org = units(("low", None, 50), ("high", None, 50, 100))
    return Case(
        "earmarked GPUs go only to the job they were preempted for",
        snapshot(topology(hgx("hgx-00")), org, pending_jobs=jobs), NOW,
        starts={"owner": gpus_of("hgx-00-h01", 4, 4)}, reserved={"first": "hgx-00"},
        positions={"first": 1}, facts={"owner": ("on the GPUs preempted for it",)},
    )


def victims_in_flight() -> Case:
    """A job waiting for its victims keeps the free GPUs it will start on."""
    held = [running("victim", "other", gpus_of("hgx-00-h01", 4), state=PREEMPTING, preempted_for="waiter",
                    grace_ends=NOW + 30, start_time=NOW - HOUR)]
    jobs = [pending("waiter", "p", 8), pending("latecomer", "q", 1, submit_time=1)]
    org = units(("p", None, 40), ("q", None, 30, 100), ("other", None, 30, 100))
    return Case(
        "free GPUs next to a leaving victim are held for its preemptor",
        snapshot(topology(hgx("hgx-00")), org, running_jobs=held, pending_jobs=jobs), NOW, starts={},
        # The victim's GPUs go to the waiter, not to the latecomer: it holds no host "freeing in 30s" for itself.
        reserved={},
        facts={"waiter": ("waiting for the jobs it preempted (victim) to leave, in 30s",),
               "latecomer": ("entitled to keep their GPUs: it waits for jobs to end",)},
    )


def no_allocation() -> Case:
    held = [running("owned", "owner", gpus_of("hgx-00-h01", 8), start_time=NOW)]
    jobs = [pending("asks", "guest", 4, min_runtime=HOUR), pending("free", "guest", 4, min_runtime=0)]
    return Case(
        "a project without an allocation runs only unallocated",
        snapshot(topology(hgx("hgx-00")), units(("guest", None, None), ("owner", None, 100)), running_jobs=held,
                 pending_jobs=jobs), NOW, starts={},
        facts={"asks": ("project guest has no allocation on this cluster: its allocated jobs come after",),
               "free": ("project guest has no allocation on this cluster: runs unallocated, preemptible",)},
    )


def unallocated_interleave() -> Case:
    jobs = [pending(f"{p}{i}", p, 1, min_runtime=0, submit_time=i) for p in "pq" for i in range(4)]
    return Case(
        "free time is shared: unallocated starts interleave projects",
        snapshot(topology(domain("box", 1, 4)), units(("p", None, 50), ("q", None, 50)), pending_jobs=jobs), NOW,
        started_in={"p0": {"box"}, "q0": {"box"}, "p1": {"box"}, "q1": {"box"}},
        facts={"p2": ("runs unallocated (minimum runtime 0), preemptible", "no GPUs free")},
    )


def cpu_only() -> Case:
    topo = topology(domain("cpu", 1, 0, cpus=32, memory_gib=128), hgx("hgx-00"))
    return Case(
        "a CPU-only job gets a host and no GPUs",
        snapshot(topo, units(("p", None, 100)), pending_jobs=[pending("etl", "p", 0, cpus=8, memory_gib=64)]), NOW,
        starts={"etl": ()},
    )


def cordoned_and_type() -> Case:
    topo = topology(hgx("hgx-00", states={1: "cordoned"}), nvl72("rack"))
    jobs = [pending("h100", "p", 1, gpu_types=frozenset({"H100"})), pending("gb200", "p", 1, submit_time=1)]
    return Case(
        "cordoned hosts take nothing; a GPU type with none healthy is said so",
        snapshot(topo, units(("p", None, 100)), pending_jobs=jobs), NOW,
        started_in={"gb200": {"rack"}}, facts={"h100": ("needs 1 GPU of type H100", "no healthy GPUs of type H100")},
    )


CASES = [
    down_host(), max_runtime(), drained_host(), reservation_backfill(), fast_lane(), defragmentation(),
    earmarked_gpus(), victims_in_flight(), no_allocation(), unallocated_interleave(), cpu_only(),
    cordoned_and_type(),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_it_follows_the_rule(case: Case) -> None:
    check(case)


def test_a_cpu_only_start_names_its_host() -> None:
    decisions = check(cpu_only())
    assert decisions.starts[0].host == "cpu-h01"


def test_a_defragmentation_is_capped_per_hour() -> None:
    case = defragmentation()
    recent = tuple(NOW - 60 * n for n in range(1, 3))  # two migrations in the last hour, cap 4
    capped = snapshot(case.snapshot.topology, case.snapshot.units, running_jobs=case.snapshot.running,
                      pending_jobs=case.snapshot.pending, recent_defrag_migrations=recent)
    decisions = schedule(capped, now=NOW, policy=Policy())
    assert not [p for p in decisions.preemptions if p.cause == "defrag"]


@pytest.mark.parametrize(("gpus", "expected"), [
    (8, ("hgx-00-h01",)),
    (9, ("hgx-00-h01", "hgx-01-h01")),
    (20, ("hgx-00-h01", "hgx-01-h01", "rack-h01")),
])
def test_it_picks_fast_lane_hosts_from_the_smallest_domains(gpus: int, expected: tuple[str, ...]) -> None:
    topo = topology(nvl72("rack"), hgx("hgx-01"), hgx("hgx-00"))
    assert choose_fast_lane_hosts(topo, gpus) == expected


def test_it_prefers_up_hosts_for_the_fast_lane() -> None:
    topo = topology(hgx("hgx-00", states={1: DOWN}), hgx("hgx-01"))
    assert choose_fast_lane_hosts(topo, 8) == ("hgx-01-h01",)
    assert choose_fast_lane_hosts(topo, 0) == ()


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (45, "45s"), (90, "1m30s"), (720, "12m"), (4800, "1h20m"), (7200, "2h"), (3 * 86400, "3d"),
    (2 * 86400 + 3 * 3600, "2d3h"),
])
def test_it_formats_durations(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_it_formats_times_relative_to_the_tick() -> None:
    assert format_time(NOW - 5, NOW) == "now"
    assert format_time(NOW + 3660, NOW) == "in 1h1m"


def test_baselines_start_in_submission_order() -> None:
    topo = topology(domain("box", 2, 4, gpu_type="X"))
    jobs = [pending("second", "p", 1, submit_time=2), pending("first", "p", 1, submit_time=1)]
    snap = snapshot(topo, units(("p", None, 100)), pending_jobs=jobs)
    fifo = fifo_first_fit(snap, now=NOW, policy=Policy())
    assert [(s.job_id, s.gpu_ids) for s in fifo.starts] == [("first", ("box-h01:0",)), ("second", ("box-h01:1",))]
    spread = node_level(snap, now=NOW, policy=Policy())
    assert [(s.job_id, s.gpu_ids) for s in spread.starts] == [("first", ("box-h01:0",)), ("second", ("box-h02:0",))]


def test_baselines_give_every_waiting_job_a_status() -> None:
    topo = topology(hgx("hgx-00"))
    jobs = [pending("big", "p", 16), pending("fits", "p", 8, submit_time=1)]
    decisions = fifo_first_fit(snapshot(topo, units(("p", None, 100)), pending_jobs=jobs), now=NOW, policy=Policy())
    assert [s.job_id for s in decisions.starts] == ["fits"]
    assert decisions.pending["big"].position == 1


@pytest.mark.parametrize("min_runtime", [0, HOUR], ids=["unallocated", "allocated"])
def test_a_job_asking_fewer_cpus_starts_though_a_hungrier_one_alike_did_not_fit(min_runtime) -> None:
    """What the tick learns from a job that did not fit stands for jobs asking at least as much: GPUs, and CPUs
    and memory too. One GPU and 24 CPUs does not fit where 8 CPUs are free; one GPU and 4 CPUs does, and starts,
    though it comes after it in the queue."""
    topo = topology(hgx("hgx-00", cpus=32, memory_gib=256))
    held = running("other", "q", gpus_of("hgx-00-h01", 6), cpus=24, memory_gib=64, start_time=NOW - 600,
                   min_runtime=0)
    jobs = [pending("hungry", "p", 1, cpus=24, memory_gib=8, min_runtime=min_runtime, submit_time=1),
            pending("lean", "p", 1, cpus=4, memory_gib=8, min_runtime=min_runtime, submit_time=2),
            pending("greedy", "p", 1, cpus=4, memory_gib=200, min_runtime=min_runtime, submit_time=3)]
    decisions = schedule(snapshot(topo, units(("p", None, 50), ("q", None, 50)), running_jobs=[held],
                                  pending_jobs=jobs), now=NOW, policy=Policy(tick=5))
    assert [s.job_id for s in decisions.starts if s.job_id != "other"] == ["lean"]
    assert "greedy" in decisions.pending


def test_a_job_that_may_span_hosts_starts_though_a_smaller_one_host_job_did_not_fit() -> None:
    """4 GPUs fit on one 4-GPU host, so that job must have one host to itself: none has 4 free. An 8-GPU job
    of topology `any` may span hosts, and 8 GPUs are free across three hosts of the rack: it starts, though the
    4-GPU job before it did not (a tick's memo once took the two for one class)."""
    topo = topology(domain("rack", 3, 4))
    held = [running("q1", "q", gpus_of("rack-h01", 1), min_runtime=0, start_time=NOW - 600),
            running("q2", "q", gpus_of("rack-h02", 2), min_runtime=0, start_time=NOW - 600),
            running("q3", "q", gpus_of("rack-h03", 1), min_runtime=0, start_time=NOW - 600)]
    jobs = [pending("four", "p", 4, min_runtime=0, submit_time=1),
            pending("eight", "p", 8, min_runtime=0, submit_time=2)]
    decisions = schedule(snapshot(topo, units(("p", None, 50), ("q", None, 50)), running_jobs=held,
                                  pending_jobs=jobs), now=NOW, policy=Policy(tick=5))
    assert [s.job_id for s in decisions.starts] == ["eight"]
    assert len(decisions.starts[0].gpu_ids) == 8


def test_a_job_kept_out_of_reservations_is_told_whose() -> None:
    """Two reservations: large-a's on rack-a (only GB200 will do; its jobs are protected for 10 hours, none of its
    GPUs free) is made first, large-b's on rack-b (it starts in about 2 hours) second. A 3-hour job may start
    under large-a's, not under large-b's, and only rack-b has GPUs free: its reason names large-b's reservation,
    the one that kept it out. Before, it named the tick's first reservation, large-a's, which did not. A job
    preempted before and asking 8 hours is protected for 16 on its restart: it may start under neither, and its
    reason names both."""
    rack_a = nvl72("rack-a")
    rack_b = nvl72("rack-b", gpu_type="GB300")
    held = [running(f"a-{n}", "other", gpus_of(f"rack-a-h{n:02d}", 4), start_time=NOW, min_runtime=10 * HOUR)
            for n in range(1, 19)]
    held += [running(f"b-{n}", "other", gpus_of(f"rack-b-h{n:02d}", 4), start_time=NOW, min_runtime=2 * HOUR)
             for n in range(1, 17)]
    org = units(("big", None, 50), ("other", None, 50, 500))
    jobs = [pending("large-a", "big", 72, topology=DOMAIN, gpu_types=frozenset({"GB200"})),
            pending("large-b", "big", 72, topology=DOMAIN, submit_time=1),
            pending("three-hours", "other", 4, min_runtime=3 * HOUR, submit_time=2),
            pending("restarting", "other", 4, min_runtime=8 * HOUR, preemptions=1, submit_time=3)]
    policy = Policy(tick=5, max_min_runtime=10 * HOUR, max_reservations=2)

    decisions = schedule(snapshot(topology(rack_a, rack_b), org, running_jobs=held, pending_jobs=jobs), now=NOW,
                         policy=policy)

    assert [(r.job_id, r.domain) for r in decisions.reservations] == [("large-a", "rack-a"), ("large-b", "rack-b")]
    assert decisions.starts == ()
    reason = decisions.pending["three-hours"].reason
    assert "the free GPUs that fit were reserved for job large-b (it starts in 2h1m)" in reason
    assert "large-a" not in reason
    assert ("were under the reservations of jobs large-a (it starts in 10h1m) and large-b (it starts in 2h1m)"
            in decisions.pending["restarting"].reason)

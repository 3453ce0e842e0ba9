"""SCENARIOS.md, one table row per worked case: snapshot in, exact decisions and reasons out."""

from __future__ import annotations

import pytest

from scheduler.core import DOMAIN, DOWN, DRAINING, PREFERRED

from .builders import DAY, HOUR, domain, gpus_of, hgx, nvl72, pending, running, snapshot, topology, units
from .cases import Case, check

WEEK = 7 * DAY


def _full_of_protected(topo, project: str, now: float, skip_hosts=()) -> list:
    """One job per host holding all its GPUs, started at `now` (protected, no usage yet)."""
    jobs = []
    for host in topo.hosts:
        if host.name not in skip_hosts:
            jobs.append(running(f"hold-{host.name}", project, host.gpus, start_time=now, min_runtime=2 * HOUR))
    return jobs


def f1_sibling_dominance() -> Case:
    now = 10 * DAY
    topo = topology(domain("pod", 25, 4))
    org = units(("A", None, 60), ("a1", "A", 50, 300), ("a2", "A", 50, 100), ("B", None, 40), ("b1", "B", 100, 100),
                ("ops", None, None))
    jobs = [pending(f"{p}-{i}", p, 1, submit_time=i) for p in ("a1", "a2", "b1") for i in range(3)]
    return Case(
        "F1 sibling dominance", snapshot(topo, org, running_jobs=_full_of_protected(topo, "ops", now),
                                         pending_jobs=jobs),
        now, starts={}, reserved={"b1-0": "pod"},
        positions={"b1-0": 1, "b1-1": 2, "b1-2": 3, "a2-0": 4, "a2-1": 5, "a2-2": 6, "a1-0": 7, "a1-2": 9},
        ratios={"A": 400 / (0.6 * 16800), "B": 100 / (0.4 * 16800), "a1": 300 / 5040, "a2": 100 / 5040},
        facts={"a1-0": ("waiting behind project b1", "usage ratio 1.5 % vs yours 6.0 %")},
    )


def f1_sibling_dominance_starts() -> Case:
    now = 10 * DAY
    topo = topology(domain("pod", 25, 4))
    org = units(("A", None, 60), ("a1", "A", 50, 300), ("a2", "A", 50, 100), ("B", None, 40), ("b1", "B", 100, 100),
                ("ops", None, None))
    jobs = [pending(f"{p}-{i}", p, 1, submit_time=i) for p in ("a1", "a2", "b1") for i in range(3)]
    held = _full_of_protected(topo, "ops", now, skip_hosts={"pod-h25"})
    return Case(
        "F1 free GPUs go to b1, then a2", snapshot(topo, org, running_jobs=held, pending_jobs=jobs), now,
        starts={"b1-0": gpus_of("pod-h25", 1), "b1-1": gpus_of("pod-h25", 1, 1), "b1-2": gpus_of("pod-h25", 1, 2),
                "a2-0": gpus_of("pod-h25", 1, 3)},
        reserved={"a2-1": "pod"}, positions={"a2-1": 1, "a2-2": 2, "a1-0": 3},
    )


def f2_interleaving() -> Case:
    topo = topology(*(hgx(f"hgx-{i:02d}") for i in range(8)))
    org = units(("p", None, 50), ("q", None, 50))
    jobs = [pending(f"{p}{i:03d}", p, 1, submit_time=i) for p in "pq" for i in range(100)]
    return Case(
        "F2 interleaving", snapshot(topo, org, pending_jobs=jobs), HOUR,
        started_in={f"{p}{i:03d}": {f"hgx-{k:02d}" for k in range(8)} for p in "pq" for i in range(32)},
        # Nothing else starts, so nothing more is charged: p's rest, then q's.
        positions={"p032": 1, "p099": 68, "q032": 69},
    )


def _f3_usage(ratio: float, gpus: int, running_gpu_seconds: float) -> float:
    entitled = 0.5 * gpus * WEEK
    return (ratio * entitled - running_gpu_seconds) / HOUR


def f3_no_thrashing() -> Case:
    now = 3 * HOUR
    topo = topology(hgx("hgx-00"), hgx("hgx-01"))
    held = [
        running("p-a", "p", gpus_of("hgx-00-h01", 4), last_checkpoint=now - 60),
        running("p-b", "p", gpus_of("hgx-00-h01", 4, 4), last_checkpoint=now - 120),
        running("p-c", "p", gpus_of("hgx-01-h01", 4), last_checkpoint=now - 600),
        running("p-d", "p", gpus_of("hgx-01-h01", 4, 4), last_checkpoint=now - 900),
    ]
    org = units(("p", None, 50, _f3_usage(0.9, 16, 16 * now)), ("q", None, 50, _f3_usage(0.1, 16, 0)))
    return Case(
        "F3 q preempts exactly what it needs", snapshot(topo, org, running_jobs=held,
                                                        pending_jobs=[pending("q-big", "q", 8)]),
        now, starts={},
        preempted={"p-a": ("job:q-big", True, 60), "p-b": ("job:q-big", True, 60)},
        facts={"p-a": ("preempted by job q-big of project q", "used 10 % of its 7-day budget against your 90 %"),
               "q-big": ("preempting p-a, p-b",)},
        ratios={"p": 0.9, "q": 0.1},
    )


def c1_protected_until_min_runtime(now: float) -> Case:
    topo = topology(hgx("hgx-00"))
    org = units(("p", None, 50, 500), ("q", None, 50))
    held = [running("p-job", "p", gpus_of("hgx-00-h01", 8), start_time=0, min_runtime=2 * HOUR)]
    waiting = [pending("q-job", "q", 8)]
    past = now >= 2 * HOUR
    return Case(
        f"C1 protected until its minimum runtime (t={now:.0f})",
        snapshot(topo, org, running_jobs=held, pending_jobs=waiting), now, starts={},
        preempted={"p-job": ("job:q-job", True, 60)} if past else {},
        reserved={} if past else {"q-job": "hgx-00"},
        facts={} if past else {"q-job": ("hgx-00 is reserved for it and frees in 1m1s",)},
    )


def c1_unallocated_gives_way() -> Case:
    topo = topology(hgx("hgx-00"))
    org = units(("p", None, 50), ("q", None, 50))
    held = [
        running("free-1", "p", gpus_of("hgx-00-h01", 4), min_runtime=0, resumable=True, start_time=0),
        running("free-2", "p", gpus_of("hgx-00-h01", 4, 4), min_runtime=0, resumable=False, start_time=0),
    ]
    return Case(
        "C1 unallocated jobs give way at once, never charged",
        snapshot(topo, org, running_jobs=held, pending_jobs=[pending("q-job", "q", 8)]), HOUR, starts={},
        preempted={"free-1": ("job:q-job", True, 10), "free-2": ("job:q-job", False, 10)},
        facts={"free-2": ("unallocated jobs (minimum runtime 0) give way",)},
        ratios={"p": 0.0, "q": 0.0},
    )


def _racks_with_free_hosts(free: dict[str, int], now: float):
    """NVL72 racks where the last `free[rack]` hosts are free and the rest hold protected jobs."""
    topo = topology(*(nvl72(name) for name in free))
    skip = {f"{name}-h{n:02d}" for name, count in free.items() for n in range(19 - count, 19)}
    return topo, _full_of_protected(topo, "other", now, skip_hosts=skip)


def t1_fragmentation_domain() -> Case:
    now = DAY
    topo, held = _racks_with_free_hosts({"nvl72-a": 3, "nvl72-b": 2}, now)
    org = units(("p", None, 50), ("other", None, 50, 100))
    return Case(
        "T1 16-GPU domain job can't use 12 + 8", snapshot(topo, org, running_jobs=held,
                                                         pending_jobs=[pending("big", "p", 16, topology=DOMAIN)]),
        now, starts={}, reserved={"big": "nvl72-a"},
        facts={"big": ("needs one 16-GPU NVLink domain", "largest free is 12")},
    )


def t1_fragmentation_preferred() -> Case:
    now = DAY
    topo, held = _racks_with_free_hosts({"nvl72-a": 3, "nvl72-b": 2}, now)
    org = units(("p", None, 50), ("other", None, 50, 100))
    a = sum((gpus_of(f"nvl72-a-h{n}", 4) for n in (16, 17, 18)), ())
    return Case(
        "T1 16-GPU preferred job spans both racks",
        snapshot(topo, org, running_jobs=held, pending_jobs=[pending("big", "p", 16, topology=PREFERRED)]),
        now, starts={"big": a + gpus_of("nvl72-b-h17", 4)},
        facts={"big": ("across 2 NVLink domains",)},
    )


def t2_best_fit_keeps_domains_whole() -> Case:
    topo = topology(nvl72("nvl72-01"), nvl72("nvl72-02"))
    org = units(("p", None, 100))
    small = [pending(f"s{i:02d}", "p", 4, submit_time=i) for i in range(18)]
    big = pending("big", "p", 72, topology=DOMAIN, submit_time=100)
    return Case(
        "T2 4-GPU jobs fill one rack, the 72-GPU job gets the other",
        snapshot(topo, org, pending_jobs=small + [big]), HOUR,
        started_in={**{job.id: {"nvl72-01"} for job in small}, "big": {"nvl72-02"}},
        facts={"big": ("one NVLink domain, nvl72-02",)},
    )


def t3_partial_rack_fits() -> Case:
    topo = topology(nvl72("nvl72-01", states={7: DOWN}), nvl72("nvl72-02"))
    org = units(("p", None, 100))
    return Case(
        "T3 a 64-GPU job prefers the 68-GPU partial rack",
        snapshot(topo, org, pending_jobs=[pending("j64", "p", 64, topology=DOMAIN)]), HOUR,
        started_in={"j64": {"nvl72-01"}},
        facts={"j64": ("nvl72-01 (4 GPUs left free there)",)},
    )


def t3_partial_rack_too_small() -> Case:
    topo = topology(nvl72("nvl72-01", missing={7: 4}))
    org = units(("p", None, 100))
    return Case(
        "T3 a 72-GPU job never fits a 68-GPU rack",
        snapshot(topo, org, pending_jobs=[pending("j72", "p", 72, topology=DOMAIN)]), HOUR, starts={},
        facts={"j72": ("needs one 72-GPU NVLink domain", "largest healthy domain has 68 GPUs")},
    )


def t4_fewest_domains() -> Case:
    topo = topology(domain("a", 2, 4), domain("b", 3, 4), domain("c", 1, 4), domain("d", 3, 4))
    org = units(("p", None, 100))
    job = pending("seven", "p", 28, gpus_per_host=4, topology=PREFERRED)
    hosts = ["b-h01", "b-h02", "b-h03", "c-h01", "d-h01", "d-h02", "d-h03"]
    return Case(
        "T4 3 + 3 + 1, not 3 + 3 + 2", snapshot(topo, org, pending_jobs=[job]), HOUR,
        starts={"seven": sum((gpus_of(h, 4) for h in hosts), ())},
    )


def d1_drain() -> Case:
    now = 3 * HOUR
    topo = topology(domain("hgx", 1, 8, states={1: DRAINING}, gpu_type="H100"))
    org = units(("p", None, 100))
    held = [
        running("free", "p", gpus_of("hgx-h01", 2), min_runtime=0, start_time=now - HOUR),
        running("young", "p", gpus_of("hgx-h01", 2, 2), start_time=now - 600, min_runtime=HOUR),
        running("old", "p", gpus_of("hgx-h01", 4, 4), start_time=now - 2 * HOUR, min_runtime=HOUR),
    ]
    return Case(
        "D1 drain: unallocated and past-minimum jobs leave now", snapshot(topo, org, running_jobs=held), now,
        starts={},
        preempted={"free": ("drain:hgx-h01", True, 10), "old": ("drain:hgx-h01", True, 60)},
        host_changes={"hgx-h01": (DRAINING, "3 jobs left; leaves in 51m")},
        facts={"free": ("host hgx-h01 is draining", "unallocated jobs leave at once"),
               "old": ("minimum runtime of 1h is over",)},
    )


def p1_gpu_sharing() -> Case:
    topo = topology(domain("box", 1, 2, gpu_type="T4"))
    org = units(("p", None, 100))
    jobs = [pending(f"m{milli}", "p", 1, gpu_milli=milli, submit_time=i) for i, milli in enumerate((600, 500, 400))]
    return Case(
        "P1 best fit on milli-GPU", snapshot(topo, org, pending_jobs=jobs), HOUR,
        starts={"m600": ("box-h01:0",), "m500": ("box-h01:1",), "m400": ("box-h01:0",)},
    )


CASES = [
    f1_sibling_dominance(),
    f1_sibling_dominance_starts(),
    f2_interleaving(),
    f3_no_thrashing(),
    c1_protected_until_min_runtime(2 * HOUR - 1),
    c1_protected_until_min_runtime(2 * HOUR),
    c1_unallocated_gives_way(),
    t1_fragmentation_domain(),
    t1_fragmentation_preferred(),
    t2_best_fit_keeps_domains_whole(),
    t3_partial_rack_fits(),
    t3_partial_rack_too_small(),
    t4_fewest_domains(),
    d1_drain(),
    p1_gpu_sharing(),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_it_decides_the_worked_scenario(case: Case) -> None:
    check(case)

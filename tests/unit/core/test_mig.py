"""MIG jobs in the engine: profile placement, layouts chosen from demand, busy GPUs never repartitioned.

Tables of small scenarios, then Hypothesis properties over random MIG GPUs,
layouts and queues: instances never overlap and never exceed the 7 compute
slices or the 8 memory slices, no instance is held twice, and a GPU with a
job on it keeps every instance it had.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core import DOWN, DRAINING, UP, Domain, Host, Policy, Snapshot, Topology, schedule
from scheduler.core import mig as geometry
from scheduler.core.model import MigGpu
from tests.unit.core.builders import HOUR, pending, running, snapshot, units

NOW = 10 * HOUR
POLICY = Policy()


def mig_host(name: str, gpus: int = 2, *, mig: dict[int, tuple] | None = None, gpu_type: str = "H100",
             state: str = UP, cpus: int = 0, memory_gib: int = 0) -> Host:
    """A one-host domain `name`; `mig` maps GPU index -> its layout (GPUs in MIG mode)."""
    host = f"{name}-h01"
    mig = mig or {}
    return Host(host, name, gpu_type, tuple(f"{host}:{i}" for i in range(gpus)), state=state, cpus=cpus,
                memory_gib=memory_gib, mig=tuple(MigGpu(f"{host}:{i}", tuple(layout)) for i, layout in mig.items()))


def cluster(*hosts: Host) -> Topology:
    return Topology(tuple(Domain(h.domain, (h.name,)) for h in hosts), hosts)


def mig_running(job_id: str, gpu: str, profile: str, start: int, **kwargs):
    kwargs.setdefault("start_time", NOW - HOUR)
    return running(job_id, "p", (gpu,), mig_profile=profile, mig_start=start, **kwargs)


def mig_pending(job_id: str, profile: str, submit_time: float = 0.0, **kwargs):
    return pending(job_id, "p", 1, mig_profile=profile, submit_time=submit_time, **kwargs)


ORG = units(("p", None, 100))


@dataclass
class Case:
    name: str
    snapshot: Snapshot
    # job -> (gpu, profile, start); absent jobs must not start.
    starts: dict[str, tuple[str, str, int]]
    # gpu -> layout after the tick (only GPUs whose layout changes).
    layouts: dict[str, tuple] = field(default_factory=dict)
    # job -> words its pending reason must contain.
    reasons: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


def cases() -> list[Case]:
    table = []
    busy = mig_host("a", 2, mig={0: [("1g.10gb", 0)], 1: []})
    table.append(Case(
        "a GPU already running MIG jobs takes the next one in its free slices, the empty one stays empty",
        snapshot(cluster(busy), ORG, running_jobs=[mig_running("r", "a-h01:0", "1g.10gb", 0)],
                 pending_jobs=[mig_pending("j", "2g.20gb")]),
        starts={"j": ("a-h01:0", "2g.20gb", geometry.place("2g.20gb", [("1g.10gb", 0)]))},
        layouts={"a-h01:0": geometry.add_instance("2g.20gb", [("1g.10gb", 0)])},
    ))
    idle = mig_host("a", 1, mig={0: [("3g.40gb", 0), ("1g.10gb", 6)]})
    table.append(Case(
        "an idle instance of the profile is reused: no layout change",
        snapshot(cluster(idle), ORG, running_jobs=[mig_running("r", "a-h01:0", "1g.10gb", 6)],
                 pending_jobs=[mig_pending("j", "3g.40gb")]),
        starts={"j": ("a-h01:0", "3g.40gb", 0)},
    ))
    empty = mig_host("a", 1, mig={0: []})
    demand = [mig_pending(f"s{i}", "1g.10gb", submit_time=i) for i in range(3)] + [
        mig_pending("big", "3g.40gb", submit_time=10)]
    chosen = geometry.choose_layout({"1g.10gb": 3, "3g.40gb": 1}, required="1g.10gb")
    table.append(Case(
        "an empty MIG GPU is partitioned for the demand it sees, and every job of it starts in one tick",
        snapshot(cluster(empty), ORG, pending_jobs=demand),
        starts={
            "s0": ("a-h01:0", "1g.10gb", chosen[0][1]), "s1": ("a-h01:0", "1g.10gb", chosen[1][1]),
            "s2": ("a-h01:0", "1g.10gb", chosen[2][1]), "big": ("a-h01:0", "3g.40gb", chosen[3][1]),
        },
        layouts={"a-h01:0": chosen},
    ))
    full = mig_host("a", 1, mig={0: [("4g.40gb", 0), ("1g.10gb", 4)]})
    table.append(Case(
        "a GPU with a job on it is never repartitioned: a 7g.80gb waits although the rest is idle",
        snapshot(cluster(full), ORG, running_jobs=[mig_running("r", "a-h01:0", "1g.10gb", 4)],
                 pending_jobs=[mig_pending("j", "7g.80gb")]),
        starts={},
        reasons={"j": ("needs a 7g.80gb MIG instance", "none is free of jobs")},
    ))
    spare = mig_host("b", 1, mig={0: [("1g.10gb", 0), ("1g.10gb", 1)]})
    table.append(Case(
        "a GPU with only idle instances is repartitioned for the job; the busy one is left alone",
        snapshot(cluster(full, spare), ORG, running_jobs=[mig_running("r", "a-h01:0", "1g.10gb", 4)],
                 pending_jobs=[mig_pending("j", "7g.80gb")]),
        starts={"j": ("b-h01:0", "7g.80gb", 0)},
        layouts={"b-h01:0": (("7g.80gb", 0),)},
    ))
    mixed = mig_host("a", 2, mig={1: []})
    table.append(Case(
        "MIG GPUs take no whole-GPU job and no fraction; MIG jobs take no ordinary GPU",
        snapshot(cluster(mixed), ORG, pending_jobs=[
            pending("two", "p", 2, submit_time=0), pending("half", "p", 1, gpu_milli=500, submit_time=1),
            mig_pending("m", "1g.10gb", submit_time=2), pending("one", "p", 1, submit_time=3),
        ]),
        starts={"half": ("a-h01:0", "", 0), "m": ("a-h01:1", "1g.10gb", 6)},
        layouts={"a-h01:1": (("1g.10gb", 6),)},
        reasons={"two": ("needs 2 GPUs",), "one": ("needs 1 GPU",)},
    ))
    plain = mig_host("a", 4)
    table.append(Case(
        "no GPU in MIG mode: the reason says so",
        snapshot(cluster(plain), ORG, pending_jobs=[mig_pending("m", "1g.10gb")]),
        starts={},
        reasons={"m": ("no healthy GPU in MIG mode",)},
    ))
    a100 = mig_host("a", 1, mig={0: []}, gpu_type="A100")
    h100 = mig_host("b", 1, mig={0: []}, gpu_type="H100")
    table.append(Case(
        "GPU types are honoured for MIG jobs",
        snapshot(cluster(a100, h100), ORG, pending_jobs=[mig_pending("m", "2g.20gb", gpu_types=frozenset({"H100"}))]),
        starts={"m": ("b-h01:0", "2g.20gb", 4)},
        layouts={"b-h01:0": (("2g.20gb", 4),)},
    ))
    cramped = mig_host("a", 1, mig={0: []}, cpus=8)
    roomy = mig_host("b", 1, mig={0: []}, cpus=64)
    table.append(Case(
        "CPUs bound MIG placement too",
        snapshot(cluster(cramped, roomy), ORG, pending_jobs=[mig_pending("m", "1g.10gb", cpus=16)]),
        starts={"m": ("b-h01:0", "1g.10gb", 6)},
        layouts={"b-h01:0": (("1g.10gb", 6),)},
    ))
    down = mig_host("a", 1, mig={0: []}, state=DRAINING)
    table.append(Case(
        "a draining host takes no MIG job",
        snapshot(cluster(down), ORG, pending_jobs=[mig_pending("m", "1g.10gb")]),
        starts={},
    ))
    return table


@pytest.mark.parametrize("case", cases(), ids=str)
def test_it_places_mig_jobs(case: Case) -> None:
    decisions = schedule(case.snapshot, now=NOW, policy=POLICY)
    got = {s.job_id: (s.gpu_ids[0], s.mig_profile, s.mig_start if s.mig_profile else 0) for s in decisions.starts}
    assert got == case.starts
    assert {layout.gpu: layout.instances for layout in decisions.mig_layouts} == case.layouts
    for job_id, words in case.reasons.items():
        for word in words:
            assert word in decisions.pending[job_id].reason, decisions.pending[job_id].reason


def test_a_mig_job_holds_its_profiles_share_of_the_gpu() -> None:
    job = mig_pending("m", "3g.40gb")
    assert job.gpu_milli == geometry.profile_milli("3g.40gb") == 428
    decisions = schedule(snapshot(cluster(mig_host("a", 1, mig={0: []})), ORG, pending_jobs=[job]), now=NOW,
                         policy=POLICY)
    (start,) = decisions.starts
    assert start.gpu_milli == 428 and start.reason.startswith("MIG: 3g.40gb instance")


def test_whole_gpu_jobs_never_preempt_mig_jobs() -> None:
    host = mig_host("a", 2, mig={1: [("7g.80gb", 0)]})
    free = [running("w", "q", ("a-h01:0",), min_runtime=0, start_time=NOW - HOUR),
            mig_running("m", "a-h01:1", "7g.80gb", 0, min_runtime=0)]
    org = units(("p", None, 50), ("q", None, 50))
    decisions = schedule(snapshot(cluster(host), org, running_jobs=free,
                                  pending_jobs=[pending("need", "p", 1)]), now=NOW, policy=POLICY)
    assert [p.job_id for p in decisions.preemptions] == ["w"]


def test_mig_jobs_leave_a_draining_host_like_any_other() -> None:
    host = mig_host("a", 1, mig={0: [("1g.10gb", 6)]}, state=DRAINING)
    job = mig_running("m", "a-h01:0", "1g.10gb", 6, min_runtime=0)
    decisions = schedule(snapshot(cluster(host), ORG, running_jobs=[job]), now=NOW, policy=POLICY)
    assert [(p.job_id, p.cause) for p in decisions.preemptions] == [("m", "drain:a-h01")]
    host = mig_host("a", 1, mig={0: [("1g.10gb", 6)]}, state=DOWN)
    decisions = schedule(snapshot(cluster(host), ORG, running_jobs=[job]), now=NOW, policy=POLICY)
    assert [(p.job_id, p.cause) for p in decisions.preemptions] == [("m", "down:a-h01")]


def test_mig_gpus_count_as_healthy_capacity_for_entitlement() -> None:
    from scheduler.core.capacity import Capacity

    topo = cluster(mig_host("a", 4, mig={2: [], 3: []}))
    capacity = Capacity(topo, (), (), NOW)
    assert capacity.healthy_gpus == 4 and capacity.free_gpus == 2


# ---------------------------------------------------------------- properties

PROFILES = tuple(geometry.PROFILES)


@st.composite
def layouts_with_holders(draw):
    """A valid layout, and which of its instances are held."""
    layout = draw(st.sampled_from(geometry.all_layouts()))
    held = [instance for instance in layout if draw(st.booleans())]
    return layout, held


@st.composite
def mig_snapshots(draw) -> Snapshot:
    hosts, running_jobs = [], []
    seq = 0
    for h in range(draw(st.integers(1, 3))):
        name = f"d{h}"
        gpus = draw(st.integers(1, 3))
        host = f"{name}-h01"
        mig, state = {}, draw(st.sampled_from([UP, UP, UP, DRAINING]))
        for i in range(gpus):
            if draw(st.booleans()):
                layout, held = draw(layouts_with_holders())
                mig[i] = layout
                for profile, start in held:
                    seq += 1
                    running_jobs.append(mig_running(f"r{seq}", f"{host}:{i}", profile, start, seq=seq,
                                                    min_runtime=draw(st.sampled_from([0.0, HOUR, 20 * HOUR]))))
            elif draw(st.booleans()):
                seq += 1
                running_jobs.append(running(f"w{seq}", "p", (f"{host}:{i}",), seq=seq, start_time=NOW - HOUR,
                                            gpu_milli=draw(st.sampled_from([1000, 400]))))
        hosts.append(mig_host(name, gpus, mig=mig, gpu_type=draw(st.sampled_from(["A100", "H100"])), state=state,
                              cpus=draw(st.sampled_from([0, 0, 16]))))
    queue = []
    for j in range(draw(st.integers(0, 12))):
        seq += 1
        kind = draw(st.sampled_from(["mig", "mig", "mig", "whole", "fraction"]))
        if kind == "mig":
            queue.append(mig_pending(f"q{j}", draw(st.sampled_from(PROFILES)), submit_time=j, seq=seq,
                                     cpus=draw(st.sampled_from([0, 0, 4, 12])),
                                     min_runtime=draw(st.sampled_from([0.0, HOUR])),
                                     gpu_types=draw(st.sampled_from([frozenset(), frozenset({"H100"})]))))
        else:
            queue.append(pending(f"q{j}", "p", 1, submit_time=j, seq=seq,
                                 gpu_milli=1000 if kind == "whole" else 300))
    return snapshot(cluster(*hosts), units(("p", None, 100)), running_jobs=running_jobs, pending_jobs=queue)


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(mig_snapshots())
def test_instances_never_overlap_nor_exceed_the_gpu_and_busy_gpus_are_never_repartitioned(snap: Snapshot) -> None:
    decisions = schedule(snap, now=NOW, policy=POLICY)
    before = {m.gpu: m.instances for h in snap.topology.hosts for m in h.mig}
    after = dict(before)
    for change in decisions.mig_layouts:
        after[change.gpu] = change.instances
    busy = {j.gpu_ids[0] for j in snap.running if j.mig_profile}
    for gpu, layout in after.items():
        assert geometry.validate_layout(layout) == tuple(sorted(layout, key=lambda i: (i[1], i[0])))
        assert len(geometry.used_slices(layout)) == sum(geometry.PROFILES[p].size for p, _ in layout)
        assert len(geometry.used_slices(layout)) <= geometry.MEMORY_SLICES
        assert geometry.compute_used(layout) <= geometry.COMPUTE_SLICES
        if gpu in busy:
            assert set(before[gpu]) <= set(layout), f"{gpu} had jobs and lost instances: {before[gpu]} -> {layout}"
    holders: dict[tuple, list[str]] = defaultdict(list)
    milli: Counter = Counter()
    for job in snap.running:
        if job.mig_profile:
            holders[(job.gpu_ids[0], job.mig_profile, job.mig_start)].append(job.id)
    pending = {j.id: j for j in snap.pending}
    hosts = {h.name: h for h in snap.topology.hosts}
    for start in decisions.starts:
        job = pending[start.job_id]
        (gpu,) = start.gpu_ids
        host = hosts[gpu.rsplit(":", 1)[0]]
        on_mig = gpu in before
        assert on_mig == bool(job.mig_profile), f"{job.id} ({job.mig_profile or 'no MIG'}) on {gpu}"
        if job.mig_profile:
            assert start.mig_profile == job.mig_profile and host.state == UP
            assert (job.mig_profile, start.mig_start) in after[gpu]
            assert not job.gpu_types or host.gpu_type in job.gpu_types
            holders[(gpu, start.mig_profile, start.mig_start)].append(job.id)
            milli[gpu] += start.gpu_milli
    for instance, jobs in holders.items():
        assert len(jobs) == 1, f"{instance} held by {jobs}"
    for job in snap.running:
        if job.mig_profile:
            milli[job.gpu_ids[0]] += job.gpu_milli
    assert all(used <= 1000 for used in milli.values()), milli


@SETTINGS
@given(mig_snapshots())
def test_mig_decisions_are_deterministic(snap: Snapshot) -> None:
    first = schedule(snap, now=NOW, policy=POLICY)
    assert schedule(snap, now=NOW, policy=POLICY) == first
    permuted = Snapshot(Topology(tuple(reversed(snap.topology.domains)), tuple(reversed(snap.topology.hosts))),
                        snap.units, tuple(reversed(snap.running)), tuple(reversed(snap.pending)))
    assert schedule(permuted, now=NOW, policy=POLICY) == first


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(PROFILES), st.integers(0, 8)), st.sampled_from(PROFILES))
def test_a_layout_chosen_for_demand_is_valid_holds_the_job_and_asks_nothing_unwanted(demand, required) -> None:
    layout = geometry.choose_layout(demand, required=required)
    geometry.validate_layout(layout)
    counts = Counter(name for name, _ in layout)
    assert counts[required] >= 1
    for name, count in counts.items():
        assert count <= max(demand.get(name, 0), 1 if name == required else 0)

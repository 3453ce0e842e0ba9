"""Hypothesis properties of `schedule()` over random small clusters and queues."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core import (
    ANY,
    CORDONED,
    DOMAIN,
    DOWN,
    DRAINING,
    PREEMPTING,
    PREFERRED,
    RUNNING,
    UP,
    Decisions,
    Domain,
    Host,
    PendingJob,
    Policy,
    RunningJob,
    Snapshot,
    Topology,
    Unit,
    protected_until,
    schedule,
)
from scheduler.core.capacity import per_host_share
from scheduler.core.reasons import queue_step

HOUR = 3600.0
NOW = 100 * HOUR


@st.composite
def snapshots(draw) -> Snapshot:
    """A small cluster with a valid set of running jobs and a random queue."""
    domains, hosts = [], []
    for d in range(draw(st.integers(1, 3))):
        name = f"d{d}"
        gpu_type = draw(st.sampled_from(["A", "B"]))
        members = []
        for h in range(draw(st.integers(1, 4))):
            host = f"{name}-h{h}"
            hosts.append(Host(
                host, name, gpu_type, tuple(f"{host}:{i}" for i in range(draw(st.integers(0, 8)))),
                state=draw(st.sampled_from([UP, UP, UP, UP, CORDONED, DRAINING, DOWN])),
                cpus=draw(st.sampled_from([0, 0, 16, 64])), memory_gib=draw(st.sampled_from([0, 0, 64, 512])),
                fast_lane=draw(st.booleans()) and draw(st.booleans()),
            ))
            members.append(host)
        domains.append(Domain(name, tuple(members)))
    projects = [f"p{i}" for i in range(draw(st.integers(1, 4)))]
    units = [Unit("org", None, draw(st.sampled_from([None, 50.0, 100.0])))]
    for project in projects:
        units.append(Unit(project, "org", draw(st.sampled_from([None, 20.0, 40.0])),
                          allocated_usage=draw(st.floats(0, 1000 * HOUR))))
    units.append(Unit("other", None, draw(st.sampled_from([None, 50.0]))))

    running = []
    free = {h.name: list(h.gpus) for h in hosts}
    cpus_left = {h.name: h.cpus for h in hosts}
    memory_left = {h.name: h.memory_gib for h in hosts}
    milli_used: dict[str, int] = defaultdict(int)
    sharing: dict[str, str] = {}
    seq = 0
    for host in hosts:
        for _ in range(draw(st.integers(0, 3))):
            if not free[host.name]:
                break
            seq += 1
            shared = draw(st.booleans()) and draw(st.booleans())
            count = 1 if shared else draw(st.integers(1, len(free[host.name])))
            cpus = draw(st.sampled_from([0, 0, 4]))
            memory = draw(st.sampled_from([0, 0, 16]))
            if (host.cpus and cpus > cpus_left[host.name]) or (host.memory_gib and memory > memory_left[host.name]):
                continue
            cpus_left[host.name] -= cpus
            memory_left[host.name] -= memory
            milli = 1000
            if shared:
                milli = draw(st.sampled_from([250, 500]))
                gpu = sharing.get(host.name)
                if gpu is None or milli_used[gpu] + milli > 1000:
                    gpu = sharing[host.name] = free[host.name].pop(0)
                milli_used[gpu] += milli
                gpu_ids = (gpu,)
            else:
                gpu_ids = tuple(free[host.name][:count])
                del free[host.name][:count]
            min_runtime = draw(st.sampled_from([0.0, 600.0, HOUR, 4 * HOUR]))
            preempting = draw(st.integers(0, 5)) == 0
            running.append(RunningJob(
                f"r{seq}", draw(st.sampled_from(projects)), gpu_ids, NOW - draw(st.floats(0, 6 * HOUR)),
                min_runtime, draw(st.booleans()), 0.0, seq, gpu_milli=milli, cpus=cpus, memory_gib=memory,
                max_runtime=draw(st.sampled_from([None, None, min_runtime + HOUR])),
                last_checkpoint=draw(st.sampled_from([None, NOW - 60])),
                state=PREEMPTING if preempting else RUNNING, grace_ends=NOW + 30 if preempting else None,
                preemptions=draw(st.sampled_from([0, 0, 1, 3])),
            ))
    pending = []
    for i in range(draw(st.integers(0, 14))):
        gpus = draw(st.sampled_from([1, 1, 2, 4, 8, 12, 16]))
        pending.append(PendingJob(
            f"q{i}", draw(st.sampled_from(projects)), gpus,
            draw(st.sampled_from([0.0, 300.0, HOUR, 2 * HOUR])), draw(st.booleans()),
            draw(st.floats(0, NOW)), 1000 + i,
            gpus_per_host=draw(st.sampled_from([None, None, 2, 4])) if gpus > 1 else None,
            gpu_milli=draw(st.sampled_from([1000, 1000, 300, 700])) if gpus == 1 else 1000,
            gpu_types=draw(st.sampled_from([frozenset(), frozenset(), frozenset({"A"})])),
            topology=draw(st.sampled_from([ANY, DOMAIN, PREFERRED])),
            cpus=draw(st.sampled_from([0, 0, 8])), memory_gib=draw(st.sampled_from([0, 0, 32])),
            priority=draw(st.integers(0, 2)),
        ))
    return Snapshot(Topology(tuple(domains), tuple(hosts)), tuple(units), tuple(running), tuple(pending))


POLICY = Policy(fast_lane_max_min_runtime=900, max_reservations=2)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _host(gpu: str) -> str:
    return gpu.rsplit(":", 1)[0]


@SETTINGS
@given(snapshots())
def test_no_gpu_is_held_twice_and_fractions_stay_within_one_gpu(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot, now=NOW, policy=POLICY)
    whole: dict[str, str] = {}
    milli: dict[str, int] = defaultdict(int)
    holders = [(j.id, j.gpu_ids, j.gpu_milli) for j in snapshot.running]
    holders += [(s.job_id, s.gpu_ids, s.gpu_milli) for s in decisions.starts]
    for job_id, gpu_ids, gpu_milli in holders:
        for gpu in gpu_ids:
            if len(gpu_ids) == 1 and gpu_milli < 1000:
                milli[gpu] += gpu_milli
            else:
                assert gpu not in whole, f"{gpu} held by {whole[gpu]} and {job_id}"
                whole[gpu] = job_id
    for gpu, used in milli.items():
        assert gpu not in whole and used <= 1000, (gpu, used)


@SETTINGS
@given(snapshots())
def test_it_never_exceeds_a_hosts_gpus_cpus_or_memory(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot, now=NOW, policy=POLICY)
    hosts = {h.name: h for h in snapshot.topology.hosts}
    pending = {j.id: j for j in snapshot.pending}
    cpus: dict[str, int] = defaultdict(int)
    memory: dict[str, int] = defaultdict(int)
    for start in decisions.starts:
        job = pending[start.job_id]
        assert len(start.gpu_ids) == job.gpus
        per_host: dict[str, int] = defaultdict(int)
        for gpu in start.gpu_ids:
            assert gpu in hosts[_host(gpu)].gpus, f"{gpu} is not a healthy GPU"
            per_host[_host(gpu)] += 1
        for host, count in per_host.items():
            cpus[host] += per_host_share(job.cpus, count, job.gpus)
            memory[host] += per_host_share(job.memory_gib, count, job.gpus)
            if job.gpus_per_host and job.gpus_per_host < job.gpus:
                assert count == job.gpus_per_host
    for job in snapshot.running:
        per_host = defaultdict(int)
        for gpu in job.gpu_ids:
            per_host[_host(gpu)] += 1
        for host, count in per_host.items():
            cpus[host] += per_host_share(job.cpus, count, len(job.gpu_ids))
            memory[host] += per_host_share(job.memory_gib, count, len(job.gpu_ids))
    for name, host in hosts.items():
        assert not host.cpus or cpus[name] <= host.cpus
        assert not host.memory_gib or memory[name] <= host.memory_gib


@SETTINGS
@given(snapshots())
def test_it_starts_jobs_only_on_up_hosts_and_domain_jobs_in_one_domain(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot, now=NOW, policy=POLICY)
    hosts = {h.name: h for h in snapshot.topology.hosts}
    pending = {j.id: j for j in snapshot.pending}
    for start in decisions.starts:
        placed = {hosts[_host(gpu)] for gpu in start.gpu_ids}
        assert all(h.state == UP for h in placed)
        job = pending[start.job_id]
        if job.topology == DOMAIN:
            assert len({h.domain for h in placed}) == 1
        if job.gpu_types:
            assert all(h.gpu_type in job.gpu_types for h in placed)
        long = job.min_runtime > POLICY.fast_lane_max_min_runtime
        assert not (long and any(h.fast_lane for h in placed)), "a long job on the fast lane"


@SETTINGS
@given(snapshots())
def test_no_allocated_job_is_preempted_before_its_minimum_runtime_unless_its_host_is_down(snapshot: Snapshot) -> None:
    """Nor before its protection, which doubles with each earlier preemption up to the cap (the churn bound)."""
    decisions = schedule(snapshot, now=NOW, policy=POLICY)
    running = {j.id: j for j in snapshot.running}
    for preemption in decisions.preemptions:
        job = running[preemption.job_id]
        protected = min(POLICY.max_min_runtime, job.min_runtime * 2 ** job.preemptions)
        assert protected_until(job, POLICY) == job.start_time + max(job.min_runtime, protected)
        if job.allocated and NOW < protected_until(job, POLICY):
            # Only its host going down ends it early, or the maximum runtime it declared itself.
            at_limit = job.max_runtime is not None and NOW >= job.start_time + job.max_runtime
            assert preemption.cause.startswith("down:") or (preemption.cause == "max_runtime" and at_limit), preemption
        assert job.state == RUNNING or preemption.cause.startswith("down:"), "preempted twice"


@SETTINGS
@given(snapshots())
def test_every_job_left_pending_has_a_status_and_a_place_in_line(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot, now=NOW, policy=POLICY)
    started = {s.job_id for s in decisions.starts}
    assert set(decisions.pending) == {j.id for j in snapshot.pending} - started
    assert sorted(s.position for s in decisions.pending.values()) == list(range(1, len(decisions.pending) + 1))
    assert all(status.reason for status in decisions.pending.values())


@SETTINGS
@given(snapshots())
def test_the_order_is_explained_once_per_waiting_project_where_its_first_job_stands(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot, now=NOW, policy=POLICY)
    project = {job.id: job.project for job in snapshot.pending}
    firsts: dict[str, int] = {}
    for job_id, status in sorted(decisions.pending.items(), key=lambda item: item[1].position):
        firsts.setdefault(project[job_id], status.position)
    assert [(step.project, step.position) for step in decisions.queue_order] == list(firsts.items())
    assert all(queue_step(step) for step in decisions.queue_order)


def _permuted(snapshot: Snapshot) -> Snapshot:
    return Snapshot(
        Topology(tuple(reversed(snapshot.topology.domains)), tuple(reversed(snapshot.topology.hosts))),
        tuple(reversed(snapshot.units)), tuple(reversed(snapshot.running)), tuple(reversed(snapshot.pending)),
    )


@SETTINGS
@given(snapshots())
def test_same_snapshot_same_decisions(snapshot: Snapshot) -> None:
    first: Decisions = schedule(snapshot, now=NOW, policy=POLICY)
    assert schedule(snapshot, now=NOW, policy=POLICY) == first
    assert schedule(_permuted(snapshot), now=NOW, policy=POLICY) == first

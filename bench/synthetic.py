"""Seeded synthetic clusters, orgs and queues for benchmarks (pure: all randomness from `random.Random(seed)`).

`synthetic_snapshot(gpus, seed)` builds a cluster of about `gpus` GPUs (nine
tenths GB200 NVL72 racks, a few with a failed tray, the rest HGX H100
servers), a three-level org, a nearly full cluster of running jobs and a
queue of pending ones: about 20,000 pending and 4,000 running jobs at 16,384
GPUs, proportionally fewer on smaller clusters.

The cluster is ~97 % occupied; a job runs for its project in proportion to
the project's entitlement; many are past their minimum runtime; usage ratios
sit within ±25 % of entitlement. The queue is a realistic mix: mostly 1-8 GPU
jobs, some multi-host and whole-domain ones, a few fractional and
GPU-type-constrained ones, one in five unallocated.

Such a made-up state is not one the scheduler would have left behind: its
first tick rebalances it (hundreds of preemptions). `settle()` plays ticks
(applying the decisions as the live tick would, preempted jobs leaving after
their grace period) until that is done: the *steady* snapshot a live cluster
holds from one tick to the next.
"""

from __future__ import annotations

import random
from dataclasses import replace

from scheduler.core import (
    ANY,
    DOMAIN,
    PREFERRED,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    UP,
    Domain,
    Host,
    PendingJob,
    Policy,
    RunningJob,
    Snapshot,
    Topology,
    Unit,
    schedule,
)

HOUR = 3600.0
DAY = 86400.0
NOW = 30 * DAY

PENDING_PER_GPU = 20_000 / 16_384

# GPUs per job and how often they are asked for.
SIZES = ((1, 30), (2, 10), (4, 26), (8, 16), (16, 7), (32, 5), (64, 3), (72, 3))
MIN_RUNTIMES = ((15 * 60, 10), (HOUR, 30), (2 * HOUR, 25), (4 * HOUR, 20), (8 * HOUR, 15))


def _pick(rng: random.Random, weighted) -> object:
    values, weights = zip(*weighted, strict=True)
    return rng.choices(values, weights)[0]


def synthetic_topology(gpus: int, rng: random.Random) -> Topology:
    racks = max(1, round(gpus * 0.9 / 72))
    servers = max(1, (gpus - racks * 72) // 8)
    domains: list[Domain] = []
    hosts: list[Host] = []
    for r in range(1, racks + 1):
        name = f"nvl72-{r:03d}"
        failed = rng.random() < 0.05
        members = []
        for h in range(1, 19):
            host = f"{name}-h{h:02d}"
            broken = failed and h == 7
            hosts.append(Host(host, name, "GB200", () if broken else tuple(f"{host}:{i}" for i in range(4)),
                              state=UP, cpus=144, memory_gib=900))
            members.append(host)
        domains.append(Domain(name, tuple(members)))
    for s in range(1, servers + 1):
        name = f"hgx-{s:03d}"
        host = f"{name}-h01"
        hosts.append(Host(host, name, "H100", tuple(f"{host}:{i}" for i in range(8)), cpus=192, memory_gib=2000))
        domains.append(Domain(name, (host,)))
    return Topology(tuple(domains), tuple(hosts))


def synthetic_units(rng: random.Random) -> tuple[Unit, ...]:
    """4 organisations × 3 programs × 4 projects; sibling shares add up to 100."""
    units: list[Unit] = []

    def split(count: int) -> list[float]:
        weights = [rng.uniform(1, 3) for _ in range(count)]
        return [100 * w / sum(weights) for w in weights]

    for o, org_share in enumerate(split(4)):
        org = f"org{o}"
        units.append(Unit(org, None, org_share))
        for p, program_share in enumerate(split(3)):
            program = f"{org}-prog{p}"
            units.append(Unit(program, org, program_share))
            for j, project_share in enumerate(split(4)):
                units.append(Unit(f"{program}-proj{j}", program, project_share))
    return tuple(units)


def _projects(units: tuple[Unit, ...]) -> list[tuple[str, float]]:
    """Leaf units with their share of the cluster."""
    by_name = {u.name: u for u in units}
    parents = {u.parent for u in units}
    leaves = []
    for unit in units:
        if unit.name in parents:
            continue
        share, node = 1.0, unit
        while node is not None:
            share *= node.share / 100
            node = by_name.get(node.parent) if node.parent else None
        leaves.append((unit.name, share))
    return leaves


def _running_jobs(topology: Topology, projects: list[tuple[str, float]], rng: random.Random) -> list[RunningJob]:
    """Fill ~97 % of the GPUs with jobs of ~4 GPUs on average: whole-host gangs in racks, small jobs elsewhere."""
    names, weights = zip(*projects, strict=True)
    host_list = [h for h in topology.hosts if h.gpus]
    jobs: list[RunningJob] = []
    by_domain: dict[str, list[Host]] = {}
    for host in host_list:
        by_domain.setdefault(host.domain, []).append(host)
    seq = 0

    def add(gpu_ids: list[str], topology_kind: str) -> None:
        nonlocal seq
        seq += 1
        min_runtime = _pick(rng, MIN_RUNTIMES)
        allocated = rng.random() > 0.15
        start = NOW - rng.uniform(0, 12 * HOUR)
        checkpoint = start + rng.uniform(0, NOW - start) if rng.random() < 0.6 else None
        jobs.append(RunningJob(
            f"r{seq:06d}", rng.choices(names, weights)[0], tuple(gpu_ids), start,
            min_runtime if allocated else 0, rng.random() < 0.8, start - rng.uniform(0, 6 * HOUR), seq,
            topology=topology_kind, last_checkpoint=checkpoint,
            max_runtime=48 * HOUR if rng.random() < 0.2 else None,
        ))

    for domain in sorted(by_domain):
        hosts = by_domain[domain]
        i = 0
        while i < len(hosts):
            # Gangs of whole hosts (about half the rack hosts), or one host split into small jobs.
            if len(hosts) > 1 and rng.random() < 0.08:
                span = min(len(hosts) - i, rng.choice((2, 4, 8, 16)))
                add([g for h in hosts[i:i + span] for g in h.gpus], rng.choice((DOMAIN, PREFERRED)))
                i += span
                continue
            gpus = list(hosts[i].gpus)
            while gpus:
                size = min(len(gpus), rng.choice((1, 1, 1, 2, 2, 4)))
                if rng.random() < 0.03:
                    gpus = gpus[size:]  # left free
                    continue
                add(gpus[:size], ANY)
                gpus = gpus[size:]
            i += 1
    return jobs


def _pending_jobs(projects: list[tuple[str, float]], count: int, rng: random.Random) -> list[PendingJob]:
    names, weights = zip(*projects, strict=True)
    jobs = []
    for seq in range(1, count + 1):
        gpus = _pick(rng, SIZES)
        allocated = rng.random() > 0.2
        topology = ANY
        per_host = None
        if gpus >= 8:
            topology = rng.choices((DOMAIN, PREFERRED, ANY), (6, 3, 1))[0]
            per_host = 4 if gpus > 8 and rng.random() < 0.5 else None
        milli = 1000
        if gpus == 1 and rng.random() < 0.1:
            milli = rng.choice((250, 500, 750))
        jobs.append(PendingJob(
            f"p{seq:06d}", rng.choices(names, weights)[0], gpus,
            _pick(rng, MIN_RUNTIMES) if allocated else 0, rng.random() < 0.8,
            NOW - rng.uniform(0, 3 * DAY), 1_000_000 + seq,
            gpus_per_host=per_host, gpu_milli=milli, topology=topology,
            gpu_types=frozenset({"H100"}) if gpus <= 8 and rng.random() < 0.08 else frozenset(),
            priority=rng.choices((PRIORITY_LOW, PRIORITY_NORMAL, PRIORITY_HIGH), (1, 8, 1))[0],
            max_runtime=24 * HOUR if rng.random() < 0.1 else None,
        ))
    return jobs


def synthetic_snapshot(gpus: int, seed: int = 1) -> tuple[Snapshot, float, Policy]:
    """(snapshot, now, policy) for a cluster of about `gpus` GPUs."""
    rng = random.Random(seed)
    policy = Policy()
    topology = synthetic_topology(gpus, rng)
    units = synthetic_units(rng)
    projects = _projects(units)
    healthy = sum(len(h.gpus) for h in topology.hosts)
    running = _running_jobs(topology, projects, rng)
    pending = _pending_jobs(projects, round(gpus * PENDING_PER_GPU), rng)
    # Usage near entitlement (±25 %), less what the running jobs add themselves.
    running_usage: dict[str, float] = {}
    for job in running:
        if job.allocated:
            running_usage[job.project] = running_usage.get(job.project, 0.0) + len(job.gpu_ids) * (NOW - job.start_time)
    leaf_share = dict(projects)
    units = tuple(
        Unit(u.name, u.parent, u.share, allocated_usage=max(
            0.0, leaf_share[u.name] * healthy * policy.window * 0.9 * rng.uniform(0.75, 1.25)
            - running_usage.get(u.name, 0.0)))
        if u.name in leaf_share else u
        for u in units
    )
    return Snapshot(topology, units, tuple(running), tuple(pending)), NOW, policy


def settle(snapshot: Snapshot, now: float, policy: Policy, *, ticks: int = 8) -> tuple[Snapshot, float]:
    """Play up to `ticks` ticks, each a grace period apart, until one preempts (almost) nothing."""
    running = {job.id: job for job in snapshot.running}
    pending = {job.id: job for job in snapshot.pending}
    for _ in range(ticks):
        decisions = schedule(Snapshot(snapshot.topology, snapshot.units, tuple(running.values()),
                                      tuple(pending.values())), now=now, policy=policy)
        for preemption in decisions.preemptions:
            job = running.pop(preemption.job_id)
            preemptor = pending.get(preemption.preemptor or "")
            if preemptor is not None:
                pending[preemptor.id] = replace(preemptor, earmarked_gpus=preemptor.earmarked_gpus + job.gpu_ids)
            if preemption.requeue:
                pending[job.id] = PendingJob(
                    job.id, job.project, len(job.gpu_ids), job.min_runtime, job.resumable, job.submit_time,
                    job.seq, gpu_milli=job.gpu_milli, topology=job.topology, max_runtime=job.max_runtime)
        for start in decisions.starts:
            job = pending.pop(start.job_id)
            running[job.id] = RunningJob(
                job.id, job.project, start.gpu_ids, now, job.min_runtime, job.resumable, job.submit_time, job.seq,
                gpu_milli=start.gpu_milli, topology=job.topology, max_runtime=job.max_runtime)
        now += policy.grace_period + policy.tick
        if len(decisions.preemptions) <= len(running) // 200:
            break
    return Snapshot(snapshot.topology, snapshot.units, tuple(running.values()), tuple(pending.values())), now

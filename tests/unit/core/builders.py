"""Small builders for core snapshots: racks, servers, jobs (tests only)."""

from __future__ import annotations

from scheduler.core import UP, Domain, Host, PendingJob, RunningJob, Snapshot, Topology, Unit

HOUR = 3600.0
DAY = 86400.0


def domain(name: str, hosts: int = 18, gpus: int = 4, *, gpu_type: str = "GB200", states: dict | None = None,
           missing: dict | None = None, cpus: int = 0, memory_gib: int = 0,
           fast_lane: bool = False) -> tuple[Domain, tuple[Host, ...]]:
    """A domain of `hosts` hosts × `gpus` GPUs named like the loader does (`<domain>-hNN`, `<host>:<i>`).

    `states` maps a host number (1-based) to its state; `missing` maps a host
    number to how many of its GPUs are unhealthy.
    """
    states = states or {}
    missing = missing or {}
    members = []
    for n in range(1, hosts + 1):
        host = f"{name}-h{n:02d}"
        healthy = gpus - missing.get(n, 0)
        members.append(Host(host, name, gpu_type, tuple(f"{host}:{i}" for i in range(healthy)),
                            state=states.get(n, UP), cpus=cpus, memory_gib=memory_gib, fast_lane=fast_lane))
    return Domain(name, tuple(h.name for h in members)), tuple(members)


def topology(*domains: tuple[Domain, tuple[Host, ...]]) -> Topology:
    return Topology(tuple(d for d, _ in domains), tuple(h for _, hosts in domains for h in hosts))


def nvl72(name: str, **kwargs) -> tuple[Domain, tuple[Host, ...]]:
    return domain(name, 18, 4, **kwargs)


def hgx(name: str, **kwargs) -> tuple[Domain, tuple[Host, ...]]:
    kwargs.setdefault("gpu_type", "H100")
    return domain(name, 1, 8, **kwargs)


def gpus_of(host: str, count: int, first: int = 0) -> tuple[str, ...]:
    return tuple(f"{host}:{i}" for i in range(first, first + count))


_seq = [0]


def pending(job_id: str, project: str, gpus: int, *, min_runtime: float = HOUR, resumable: bool = True,
            submit_time: float = 0.0, seq: int | None = None, **kwargs) -> PendingJob:
    if seq is None:
        _seq[0] += 1
        seq = _seq[0]
    return PendingJob(job_id, project, gpus, min_runtime, resumable, submit_time, seq, **kwargs)


def running(job_id: str, project: str, gpu_ids: tuple[str, ...], *, start_time: float = 0.0,
            min_runtime: float = HOUR, resumable: bool = True, submit_time: float | None = None,
            seq: int | None = None, **kwargs) -> RunningJob:
    if seq is None:
        _seq[0] += 1
        seq = _seq[0]
    return RunningJob(job_id, project, tuple(gpu_ids), start_time, min_runtime, resumable,
                      start_time if submit_time is None else submit_time, seq, **kwargs)


def units(*specs: tuple) -> tuple[Unit, ...]:
    """(name, parent, share[, allocated usage in GPU-hours])."""
    result = []
    for spec in specs:
        name, parent, share = spec[:3]
        usage = spec[3] * HOUR if len(spec) > 3 else 0.0
        result.append(Unit(name, parent, share, allocated_usage=usage))
    return tuple(result)


def snapshot(topo: Topology, unit_list: tuple[Unit, ...], *, running_jobs=(), pending_jobs=(), **kwargs) -> Snapshot:
    return Snapshot(topo, unit_list, tuple(running_jobs), tuple(pending_jobs), **kwargs)

"""Small clusters, orgs and jobs for simulator tests (no database, no files)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core import Policy, Unit
from scheduler.sim.engine import simulate
from scheduler.sim.inputs import Cluster, with_fast_lane
from scheduler.sim.policies import decision_function
from scheduler.sim.workload import SimJob
from tests.unit.core.builders import domain, hgx, nvl72, topology

HOUR = 3600.0


def cluster(*domains, policy: Policy | None = None, name: str = "test", total: int | None = None) -> Cluster:
    topo = topology(*domains)
    policy = policy or Policy()
    topo = with_fast_lane(topo, policy.fast_lane_gpus)
    return Cluster(name, topo, policy, total if total is not None else sum(len(h.gpus) for h in topo.hosts))


def one_host(gpus: int = 8, **policy) -> Cluster:
    return cluster(domain("box", 1, gpus, gpu_type="H100"), policy=Policy(**policy))


def org(*projects: tuple[str, float | None], parent: str | None = None) -> tuple[Unit, ...]:
    return tuple(Unit(name, parent, share) for name, share in projects)


_seq = [0]


def job(job_id: str, submit: float, project: str, gpus: int, duration: float, *, min_runtime: float = HOUR,
        resumable: bool = True, **kwargs) -> SimJob:
    _seq[0] += 1
    kwargs.setdefault("seq", _seq[0])
    return SimJob(job_id, submit, project, gpus, min_runtime, resumable, duration, **kwargs)


def run(cluster: Cluster, units, jobs, *, policy: str = "allot", **kwargs):
    return simulate(cluster, units, jobs, decide=decision_function(policy), policy_name=policy, **kwargs)


__all__ = ["HOUR", "cluster", "domain", "hgx", "job", "nvl72", "one_host", "org", "replace", "run"]

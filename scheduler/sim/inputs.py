"""From the cluster and org specs (the parsed files) to what the core sees.

The simulator reads the same files as `load_cluster` and `load_org`, checked
by the same parsers (`topology.spec.parse_cluster`, and
`budgets.spec.parse_org` against the cluster file instead of the database),
and turns them into a core `Topology`, `Policy` and `Unit`s the
way the live snapshot does: host names `<domain>-hNN`, GPU ids
`<host>:<index>`, hosts listed in `unhealthy_hosts` down, the fast lane on
the hosts `core.choose_fast_lane_hosts` picks.

What a simulation starts from besides (the budget what-if's live queue):
`InitialState`, the runs already going, the usage before the start, the
hosts' states.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from budgets.spec import OrgSpec, parse_org
from scheduler.core import model as core
from scheduler.core.placement import choose_fast_lane_hosts
from topology.spec import ClusterSpec, parse_cluster, read_yaml

from .workload import SimJob, WorkloadError

# ClusterSpec.policy holds Cluster model field names.
POLICY_FIELDS = {
    "tick_seconds": "tick",
    "window_seconds": "window",
    "max_min_runtime_seconds": "max_min_runtime",
    "grace_period_seconds": "grace_period",
    "unallocated_grace_seconds": "unallocated_grace",
    "fast_lane_gpus": "fast_lane_gpus",
    "fast_lane_max_min_runtime_seconds": "fast_lane_max_min_runtime",
    "heartbeat_timeout_seconds": "heartbeat_timeout",
    "restart_overhead_seconds": "restart_overhead",
    "unallocated_backoff_seconds": "unallocated_backoff",
    "max_unallocated_backoff_seconds": "max_unallocated_backoff",
    "max_preempted_protection_seconds": "max_preempted_protection",
    "max_checkpoint_wait_seconds": "max_checkpoint_wait",
}


@dataclass(frozen=True)
class Cluster:
    """A cluster as the simulator runs it."""

    name: str
    topology: core.Topology
    policy: core.Policy
    # Every GPU of the inventory, healthy or not (availability's denominator).
    total_gpus: int

    @property
    def host_names(self) -> set[str]:
        return {host.name for host in self.topology.hosts}


@dataclass(frozen=True)
class UsageInterval:
    """GPU time a project used before the simulation started (for the fair-share window)."""

    project: str
    gpus: float
    start: float
    end: float
    allocated: bool


@dataclass(frozen=True)
class InitialRun:
    """A job already running when the simulation starts (the what-if from a live queue)."""

    job: SimJob
    start: float  # <= 0
    gpu_ids: tuple[str, ...]
    gpu_milli: int = core.WHOLE_GPU_MILLI
    # Work done in earlier runs.
    done: float = 0.0
    host: str = ""


@dataclass(frozen=True)
class InitialState:
    running: tuple[InitialRun, ...] = ()
    history: tuple[UsageInterval, ...] = ()
    # Host name -> state at the start (default: as in the topology).
    host_states: dict[str, str] = field(default_factory=dict)


def cluster_from_spec(spec: ClusterSpec) -> Cluster:
    """A parsed cluster file as a simulated cluster."""
    policy = core.Policy(**{POLICY_FIELDS[key]: value for key, value in spec.policy.items() if key in POLICY_FIELDS})
    topology = spec.core_topology()
    return Cluster(spec.name, with_fast_lane(topology, policy.fast_lane_gpus), policy,
                   sum(len(h.gpus) for h in topology.hosts))


def with_fast_lane(topology: core.Topology, gpus: int) -> core.Topology:
    lane = set(choose_fast_lane_hosts(topology, gpus))
    if not lane:
        return topology
    return replace(topology, hosts=tuple(replace(h, fast_lane=h.name in lane) for h in topology.hosts))


def read_cluster(path) -> Cluster:
    return cluster_from_spec(parse_cluster(read_yaml(path)))


def units_from_spec(spec: OrgSpec, cluster: str) -> tuple[core.Unit, ...]:
    """A parsed org file as core units on one cluster (usage zero)."""
    return tuple(
        core.Unit(unit.name, unit.parent, float(unit.shares[cluster]) if cluster in unit.shares else None)
        for unit in spec.units
    )


def read_org(path, cluster: str) -> tuple[core.Unit, ...]:
    return units_from_spec(parse_org(read_yaml(path), clusters={cluster}), cluster)


def projects_of(units: tuple[core.Unit, ...]) -> set[str]:
    """Units with no children: the ones jobs are charged to."""
    parents = {unit.parent for unit in units if unit.parent}
    return {unit.name for unit in units if unit.name not in parents}


def check_jobs(jobs: list[SimJob], cluster: Cluster, units: tuple[core.Unit, ...]) -> None:
    """What the API would refuse at submission (DESIGN §7), named by row and column; raise WorkloadError."""
    problems: list[str] = []
    projects = projects_of(units)
    known = {unit.name for unit in units}
    policy = cluster.policy
    domain_gpus: dict[str, int] = {}
    host_gpus = 0
    types = set()
    for host in cluster.topology.hosts:
        domain_gpus[host.domain] = domain_gpus.get(host.domain, 0) + len(host.gpus)
        host_gpus = max(host_gpus, len(host.gpus))
        types.add(host.gpu_type)
    largest_domain = max(domain_gpus.values(), default=0)
    for job in jobs:
        where = f"row {job.seq} (line {job.seq + 1}, job {job.id}), column"
        if job.project not in known:
            problems.append(f"{where} project: unknown project {job.project!r} (not in the org file)")
        elif job.project not in projects:
            problems.append(f"{where} project: {job.project!r} has children; jobs are charged to projects")
        if job.min_runtime > policy.max_min_runtime:
            problems.append(f"{where} min_runtime: {job.min_runtime:g} s is over the cluster's cap of "
                            f"{policy.max_min_runtime:g} s")
        if job.topology == core.DOMAIN and job.gpus > largest_domain:
            problems.append(f"{where} gpus: {job.gpus} GPUs in one domain; the largest domain has {largest_domain}")
        if job.gpus > cluster.total_gpus:
            problems.append(f"{where} gpus: {job.gpus} GPUs; the cluster has {cluster.total_gpus}")
        if job.gpus_per_host is not None and job.gpus_per_host > host_gpus:
            problems.append(f"{where} gpus_per_host: {job.gpus_per_host}; the largest host has {host_gpus} GPUs")
        if job.gpu_types and not job.gpu_types & types:
            problems.append(f"{where} gpu_type: {'|'.join(sorted(job.gpu_types))} is not on this cluster "
                            f"(it has {', '.join(sorted(types))})")
    if problems:
        raise WorkloadError(problems)


def load(cluster_spec: dict, org_spec: dict) -> tuple[Cluster, tuple[core.Unit, ...]]:
    """Cluster and units from the YAML mappings (as a generator holds them), checked by the same parsers."""
    cluster = cluster_from_spec(parse_cluster(cluster_spec))
    return cluster, units_from_spec(parse_org(org_spec, clusters={cluster.name}), cluster.name)

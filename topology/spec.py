"""The cluster file of FORMATS.md, parsed and checked into plain specs: no Django, no database.

`parse_cluster` turns the file's mapping into a `ClusterSpec` or raises
`LoadError` naming every entry and field at fault. `topology.loaders` writes a
spec to the inventory; the simulator (`scheduler.sim.inputs`) runs it.

Beyond FORMATS.md (additions, all optional): GPUs in MIG mode, per domain
entry (`mig: true` for every GPU of its hosts, or `mig: [0, 1]` for those
indices) or per host (`mig_hosts: {hgx-02-h01: true, hgx-03-h01: [4, 5]}`,
which overrides the domain's entry for that host). Only A100 and H100 GPUs
(the 80 GB MIG geometry of scheduler/core/mig.py) may be put in MIG mode.
"""

import re
import unicodedata
from dataclasses import dataclass, field

import yaml

from scheduler.core import model as core
from scheduler.core.durations import parse_duration
from scheduler.core.placement import choose_fast_lane_hosts
from topology.health import parse_health_policy

# policy key -> (Cluster field, kind)
POLICY_FIELDS = {
    "tick": ("tick_seconds", "duration"),
    "window": ("window_seconds", "duration"),
    "max_min_runtime": ("max_min_runtime_seconds", "duration"),
    "grace_period": ("grace_period_seconds", "duration"),
    "unallocated_grace": ("unallocated_grace_seconds", "duration"),
    "fast_lane_gpus": ("fast_lane_gpus", "count"),
    "fast_lane_max_min_runtime": ("fast_lane_max_min_runtime_seconds", "duration"),
    "heartbeat_timeout": ("heartbeat_timeout_seconds", "duration"),
    "restart_overhead": ("restart_overhead_seconds", "duration"),
    "unallocated_backoff": ("unallocated_backoff_seconds", "duration"),
    "max_unallocated_backoff": ("max_unallocated_backoff_seconds", "duration"),
    "max_preempted_protection": ("max_preempted_protection_seconds", "duration"),
    "max_checkpoint_wait": ("max_checkpoint_wait_seconds", "duration"),
    "executor": ("executor", "executor"),
    "allow_root_jobs": ("allow_root_jobs", "bool"),
    "submit": ("submit_policy", "submit"),
}
DOMAIN_KEYS = {
    "name", "count", "block", "hosts", "gpus_per_host", "gpu_type",
    "cpus_per_host", "memory_gib_per_host", "kind", "mig",
}
# The values of topology.choices.DomainKind and Executor, in their order (a unit test holds them equal).
NVL72, RACK, SERVER = "nvl72", "rack", "server"
DOMAIN_KINDS = (NVL72, RACK, SERVER)
EXECUTORS = ("agent", "simulated")
# MIG follows the 80 GB A100/H100 geometry (scheduler/core/mig.py): only those GPU types may be put in MIG mode.
MIG_GPU_TYPES = ("A100", "H100")
MAX_HOSTS_PER_DOMAIN = 1024
MAX_GPUS_PER_HOST = 64

# Who may submit to a cluster (`policy.submit`).
SUBMIT_ALL, SUBMIT_ALLOCATED = "all", "allocated"


class LoadError(Exception):
    """A file refused whole; `problems` lists every entry and field at fault."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


def read_yaml(path) -> object:
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except OSError as error:
        raise LoadError([f"{path}: cannot read ({error.strerror})"]) from None
    except yaml.YAMLError as error:
        raise LoadError([f"{path}: not valid YAML ({error})"]) from None


def is_slug(value: str) -> bool:
    """Whether Django's `slugify` would leave `value` as it is: the rule for names in the files.

    The same steps as `django.utils.text.slugify` (a unit test compares them), so parsing needs no Django.
    """
    text = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text.lower())
    return re.sub(r"[-\s]+", "-", text).strip("-_") == value


def parse_submit_policy(value, where: str = "policy.submit") -> tuple[object, list[str]]:
    """Who may submit to a cluster: `all`, `allocated` (units holding a share of it), or a list of unit names
    (those units and every unit under them). Returns the value as stored, and the problems found."""
    if value in (SUBMIT_ALL, SUBMIT_ALLOCATED):
        return value, []
    if isinstance(value, list) and value and all(isinstance(name, str) and name for name in value):
        bad = [name for name in value if not name.replace("-", "").replace("_", "").isalnum() or not name.isascii()]
        if bad:
            return None, [f"{where}: {', '.join(map(repr, bad))} are not unit names"]
        return sorted(set(value)), []
    return None, [f"{where}: {value!r} must be `all`, `allocated` or a list of unit names"]


def _count(value, where: str, problems: list[str], *, minimum: int, maximum: int | None = None) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{where}: {value!r} is not a whole number")
        return None
    if value < minimum or (maximum is not None and value > maximum):
        limit = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        problems.append(f"{where}: {value} must be {limit}")
        return None
    return value


@dataclass
class HostSpec:
    name: str
    position: int
    gpu_type: str
    gpu_count: int
    cpus: int
    memory_gib: int
    # Indices of its GPUs in MIG mode.
    mig_gpus: tuple[int, ...] = ()


@dataclass
class DomainSpec:
    name: str
    block: str | None
    kind: str
    hosts: list[HostSpec] = field(default_factory=list)


@dataclass
class ClusterSpec:
    name: str
    # Cluster model field names -> values (the second column of POLICY_FIELDS).
    policy: dict
    domains: list[DomainSpec]
    unhealthy_hosts: list[str]
    # The health policy, complete; None when the file has no `health:` key (the stored one stays).
    health: dict | None = None

    @property
    def host_names(self) -> set[str]:
        return {host.name for domain in self.domains for host in domain.hosts}

    def core_topology(self) -> core.Topology:
        """The spec as the scheduler core sees it: listed unhealthy hosts down, every GPU healthy."""
        unhealthy = set(self.unhealthy_hosts)
        hosts = [
            core.Host(
                name=host.name, domain=domain.name, gpu_type=host.gpu_type,
                gpus=tuple(f"{host.name}:{index}" for index in range(host.gpu_count)),
                state=core.DOWN if host.name in unhealthy else core.UP, cpus=host.cpus, memory_gib=host.memory_gib,
                mig=tuple(core.MigGpu(f"{host.name}:{index}") for index in host.mig_gpus),
            )
            for domain in self.domains for host in domain.hosts
        ]
        domains = [
            core.Domain(domain.name, tuple(host.name for host in domain.hosts), block=domain.block, kind=domain.kind)
            for domain in self.domains
        ]
        return core.Topology(tuple(domains), tuple(hosts))

    def fast_lane_hosts(self) -> set[str]:
        """The hosts set aside for the fast lane: the same ones the simulator picks from the same file."""
        return set(choose_fast_lane_hosts(self.core_topology(), self.policy.get("fast_lane_gpus", 0)))


def _mig_gpus(value, where: str, gpu_type: str | None, gpus: int | None, problems: list[str]) -> tuple[int, ...]:
    """A `mig` entry: true (every GPU), false, or a list of GPU indices; checked against the GPU type and count."""
    if value is None or value is False:
        return ()
    if gpus is None or gpu_type is None:
        return ()
    if value is True:
        indices = list(range(gpus))
    elif isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        indices = value
        bad = sorted({v for v in value if not 0 <= v < gpus})
        if bad:
            problems.append(f"{where}: GPU indices {', '.join(map(str, bad))} are not between 0 and {gpus - 1}")
            return ()
        if len(set(value)) != len(value):
            problems.append(f"{where}: a GPU index is listed twice")
            return ()
    else:
        problems.append(f"{where}: {value!r} must be true (every GPU in MIG mode) or a list of GPU indices")
        return ()
    if indices and not gpu_type.upper().startswith(MIG_GPU_TYPES):
        problems.append(f"{where}: MIG follows the 80 GB A100/H100 geometry; {gpu_type} GPUs cannot be put in "
                        "MIG mode")
        return ()
    return tuple(sorted(indices))


def parse_cluster(data) -> ClusterSpec:
    """Check a cluster spec; raise LoadError listing every problem."""
    problems: list[str] = []
    if not isinstance(data, dict):
        raise LoadError(["the file must be a mapping with name, policy and domains"])
    unknown = set(data) - {"name", "policy", "domains", "unhealthy_hosts", "health", "mig_hosts"}
    if unknown:
        problems.append(f"unknown top-level keys: {', '.join(sorted(map(str, unknown)))}")

    name = data.get("name")
    if not isinstance(name, str) or not name or not is_slug(name):
        problems.append(f"name: {name!r} must be a lower-case name of letters, digits and dashes")

    policy = {}
    raw_policy = data.get("policy") or {}
    if not isinstance(raw_policy, dict):
        problems.append("policy: must be a mapping")
        raw_policy = {}
    for key, value in raw_policy.items():
        if key not in POLICY_FIELDS:
            problems.append(f"policy.{key}: unknown key (known: {', '.join(POLICY_FIELDS)})")
            continue
        model_field, kind = POLICY_FIELDS[key]
        if kind == "duration":
            try:
                policy[model_field] = parse_duration(value)
            except ValueError as error:
                problems.append(f"policy.{key}: {error}")
        elif kind == "count":
            checked = _count(value, f"policy.{key}", problems, minimum=0)
            if checked is not None:
                policy[model_field] = checked
        elif kind == "bool":
            if isinstance(value, bool):
                policy[model_field] = value
            else:
                problems.append(f"policy.{key}: {value!r} must be true or false")
        elif kind == "submit":
            submit, submit_problems = parse_submit_policy(value, f"policy.{key}")
            problems.extend(submit_problems)
            if not submit_problems:
                policy[model_field] = submit
        elif value not in EXECUTORS:
            problems.append(f"policy.{key}: {value!r} must be one of {', '.join(EXECUTORS)}")
        else:
            policy[model_field] = value
    for key in ("tick", "window", "heartbeat_timeout"):
        field_name = POLICY_FIELDS[key][0]
        if policy.get(field_name) == 0:
            problems.append(f"policy.{key}: must be more than 0")

    domains: list[DomainSpec] = []
    raw_domains = data.get("domains")
    if not isinstance(raw_domains, list) or not raw_domains:
        problems.append("domains: must be a non-empty list")
        raw_domains = []
    seen_domains: set[str] = set()
    for number, entry in enumerate(raw_domains):
        where = f"domains[{number}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: must be a mapping")
            continue
        where = f"domains[{number}] ({entry.get('name', '?')})"
        for key in sorted(set(entry) - DOMAIN_KEYS):
            problems.append(f"{where}.{key}: unknown key")
        template = entry.get("name")
        count = _count(entry.get("count", 1), f"{where}.count", problems, minimum=1, maximum=10000)
        host_count = _count(entry.get("hosts"), f"{where}.hosts", problems, minimum=1, maximum=MAX_HOSTS_PER_DOMAIN)
        gpus_per_host = _count(
            entry.get("gpus_per_host"), f"{where}.gpus_per_host", problems, minimum=0, maximum=MAX_GPUS_PER_HOST
        )
        cpus = _count(entry.get("cpus_per_host", 0), f"{where}.cpus_per_host", problems, minimum=0)
        memory = _count(entry.get("memory_gib_per_host", 0), f"{where}.memory_gib_per_host", problems, minimum=0)
        gpu_type = entry.get("gpu_type")
        if not isinstance(gpu_type, str) or not gpu_type.strip() or "|" in gpu_type:
            problems.append(f"{where}.gpu_type: {gpu_type!r} must be a GPU type name such as GB200 or H100")
            gpu_type = None
        block = entry.get("block")
        if block is not None and (not isinstance(block, str) or not is_slug(block)):
            problems.append(f"{where}.block: {block!r} must be a lower-case name")
        kind = entry.get("kind")
        if kind is not None and kind not in DOMAIN_KINDS:
            problems.append(f"{where}.kind: {kind!r} must be one of {', '.join(DOMAIN_KINDS)}")
        if not isinstance(template, str) or not template:
            problems.append(f"{where}.name: required")
            continue
        mig = _mig_gpus(entry.get("mig"), f"{where}.mig", gpu_type, gpus_per_host, problems)
        if None in (count, host_count, gpus_per_host, cpus, memory, gpu_type):
            continue
        if count > 1 and "{" not in template:
            problems.append(f"{where}.name: {template!r} needs a placeholder such as {{:02d}} when count is {count}")
            continue
        if kind is None:
            if host_count == 18 and gpus_per_host == 4:
                kind = NVL72
            elif host_count > 1:
                kind = RACK
            else:
                kind = SERVER
        for index in range(1, count + 1):
            try:
                domain_name = template.format(index) if "{" in template else template
            except (IndexError, KeyError, ValueError):
                problems.append(f"{where}.name: {template!r} is not a valid template (use {{:02d}})")
                break
            if not is_slug(domain_name):
                problems.append(f"{where}.name: {domain_name!r} must be lower-case letters, digits and dashes")
                break
            if domain_name in seen_domains:
                problems.append(f"{where}.name: domain {domain_name} is defined twice")
                continue
            seen_domains.add(domain_name)
            domain = DomainSpec(name=domain_name, block=block, kind=kind)
            for position in range(1, host_count + 1):
                domain.hosts.append(
                    HostSpec(
                        name=f"{domain_name}-h{position:02d}",
                        position=position,
                        gpu_type=gpu_type.strip(),
                        gpu_count=gpus_per_host,
                        cpus=cpus,
                        memory_gib=memory,
                        mig_gpus=mig,
                    )
                )
            domains.append(domain)

    unhealthy = data.get("unhealthy_hosts") or []
    if not isinstance(unhealthy, list):
        problems.append("unhealthy_hosts: must be a list of host names")
        unhealthy = []
    known_hosts = {host.name for domain in domains for host in domain.hosts}
    for number, host_name in enumerate(unhealthy):
        if host_name not in known_hosts:
            problems.append(f"unhealthy_hosts[{number}]: {host_name!r} is not a host of this cluster")

    mig_hosts = data.get("mig_hosts") or {}
    if not isinstance(mig_hosts, dict):
        problems.append("mig_hosts: must be a mapping of host name to true or a list of GPU indices")
        mig_hosts = {}
    by_name = {host.name: host for domain in domains for host in domain.hosts}
    for host_name, value in mig_hosts.items():
        host = by_name.get(host_name)
        if host is None:
            problems.append(f"mig_hosts.{host_name}: not a host of this cluster")
            continue
        host.mig_gpus = _mig_gpus(value, f"mig_hosts.{host_name}", host.gpu_type, host.gpu_count, problems)

    health = None
    if "health" in data:
        health, health_problems = parse_health_policy(data["health"])
        problems.extend(health_problems)

    if problems:
        raise LoadError(problems)
    return ClusterSpec(name=name, policy=policy, domains=domains, unhealthy_hosts=list(unhealthy), health=health)

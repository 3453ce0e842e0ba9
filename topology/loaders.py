"""`load_cluster`: the cluster spec of FORMATS.md into the inventory.

`topology.spec.parse_cluster` checks a file whole before anything is written;
every problem names the entry and the field. `apply_cluster` writes the
checked spec: loading the same file twice changes nothing; a changed file
updates the inventory without touching the hosts of running jobs, and a GPU
running a job keeps its MIG mode until it is drained.
"""

from django.db import transaction
from django.utils import timezone

from topology.choices import Executor, GpuHealth, HostState
from topology.models import AWAITING_AGENT_REASON, Block, Cluster, Domain, Gpu, Host, MigInstance
from topology.spec import POLICY_FIELDS, ClusterSpec, HostSpec, LoadError, parse_cluster, read_yaml

LOADER_ACTOR = "system:load_cluster"
UNHEALTHY_REASON = "listed in unhealthy_hosts of the cluster file"


@transaction.atomic
def apply_cluster(spec: ClusterSpec, *, actor: str = LOADER_ACTOR) -> tuple[Cluster, dict]:
    """Create or update the inventory to match `spec`; returns the cluster and counts of changes."""
    changes = {"created": 0, "updated": 0, "removed": 0}
    defaults = {field_name: model_field.get_default() for field_name, model_field in _policy_model_fields().items()}
    defaults.update(spec.policy)
    if spec.health is not None:
        defaults["health_policy"] = spec.health
    cluster, created = Cluster.objects.get_or_create(name=spec.name, defaults=defaults)
    if created:
        changes["created"] += 1
    else:
        dirty = [name for name, value in defaults.items() if getattr(cluster, name) != value]
        for name in dirty:
            setattr(cluster, name, defaults[name])
        if dirty:
            cluster.save(update_fields=[*dirty, "updated_at"])
            changes["updated"] += 1

    # Hosts and domains that belong to another cluster cannot be taken over silently.
    foreign = Host.objects.filter(name__in=spec.host_names).exclude(domain__cluster=cluster)
    clashes = [f"host {name} already belongs to another cluster" for name in foreign.values_list("name", flat=True)]
    if clashes:
        raise LoadError(clashes)

    # A GPU's assignments are the scheduler's rows pointing at it (related name `assignments`): asked through
    # the relation, so the inventory needs no import of the app above it.
    live_gpu_ids = set(
        Gpu.objects.filter(assignments__isnull=False, assignments__released_at__isnull=True,
                           host__domain__cluster=cluster)
        .values_list("pk", flat=True)
    )
    blocks = {block.name: block for block in cluster.blocks.all()}
    for block_name in sorted({d.block for d in spec.domains if d.block} - set(blocks)):
        blocks[block_name] = Block.objects.create(cluster=cluster, name=block_name)
        changes["created"] += 1

    domains = {domain.name: domain for domain in cluster.domains.all()}
    hosts = {host.name: host for host in Host.objects.filter(domain__cluster=cluster).select_related("domain")}
    gpus_by_host: dict[int, list[Gpu]] = {}
    for gpu in Gpu.objects.filter(host__domain__cluster=cluster).order_by("index"):
        gpus_by_host.setdefault(gpu.host_id, []).append(gpu)

    problems = []
    for domain_spec in spec.domains:
        block = blocks.get(domain_spec.block) if domain_spec.block else None
        domain = domains.get(domain_spec.name)
        if domain is None:
            domain = Domain.objects.create(cluster=cluster, name=domain_spec.name, block=block, kind=domain_spec.kind)
            changes["created"] += 1
        elif (domain.block_id, domain.kind) != (block.pk if block else None, domain_spec.kind):
            domain.block, domain.kind = block, domain_spec.kind
            domain.save(update_fields=["block", "kind"])
            changes["updated"] += 1
        for host_spec in domain_spec.hosts:
            host = hosts.get(host_spec.name)
            wanted = {
                "domain_id": domain.pk, "position": host_spec.position, "gpu_type": host_spec.gpu_type,
                "gpu_count": host_spec.gpu_count, "cpus": host_spec.cpus, "memory_gib": host_spec.memory_gib,
            }
            if host is None:
                # An agent's host takes work once its agent reports; a simulated one at once.
                initial = (
                    {"state": HostState.DOWN, "state_reason": AWAITING_AGENT_REASON, "state_actor": actor}
                    if cluster.executor == Executor.AGENT else {}
                )
                host = Host.objects.create(name=host_spec.name, **wanted, **initial)
                changes["created"] += 1
            else:
                dirty = [key for key, value in wanted.items() if getattr(host, key) != value]
                if dirty:
                    if any(gpu.pk in live_gpu_ids for gpu in gpus_by_host.get(host.pk, [])):
                        problems.append(f"host {host.name} runs jobs; its spec cannot change until it is drained")
                        continue
                    for key in dirty:
                        setattr(host, key, wanted[key])
                    host.save(update_fields=dirty)
                    changes["updated"] += 1
            existing = gpus_by_host.get(host.pk, [])
            have = {gpu.index for gpu in existing}
            missing = [Gpu(host=host, index=index, mig_enabled=index in host_spec.mig_gpus)
                       for index in range(host_spec.gpu_count) if index not in have]
            if missing:
                Gpu.objects.bulk_create(missing)
                changes["created"] += len(missing)
            _apply_mig(host, host_spec, existing, live_gpu_ids, problems, changes)
            extra = [
                gpu for gpu in existing if gpu.index >= host_spec.gpu_count and gpu.health == GpuHealth.OK
            ]
            if any(gpu.pk in live_gpu_ids for gpu in extra):
                problems.append(f"host {host.name}: GPUs in use cannot be removed")
            elif extra:
                _retire_gpus(extra)
                changes["removed"] += len(extra)
            _apply_health(host, host_spec.name in spec.unhealthy_hosts, actor, changes)

    for name, host in hosts.items():
        if name in spec.host_names:
            continue
        host_gpus = gpus_by_host.get(host.pk, [])
        if any(gpu.pk in live_gpu_ids for gpu in host_gpus):
            problems.append(f"host {name} is no longer in the file but runs jobs; drain it first")
        elif Gpu.objects.filter(host=host, assignments__isnull=False).exists():
            if host.state != HostState.DOWN:
                host.set_state(HostState.DOWN, actor=actor, reason="removed from the cluster file")
                changes["updated"] += 1
        else:
            host.delete()
            changes["removed"] += 1
    for name, domain in domains.items():
        if name not in {d.name for d in spec.domains} and not domain.hosts.exists():
            domain.delete()
            changes["removed"] += 1
    if problems:
        raise LoadError(problems)
    lane = spec.fast_lane_hosts()
    in_cluster = Host.objects.filter(domain__cluster=cluster)
    changes["updated"] += in_cluster.filter(name__in=lane, fast_lane=False).update(fast_lane=True)
    changes["updated"] += in_cluster.exclude(name__in=lane).filter(fast_lane=True).update(fast_lane=False)
    return cluster, changes


def _apply_mig(host: Host, spec: HostSpec, gpus: list[Gpu], live_gpu_ids: set[int], problems: list[str],
               changes: dict) -> None:
    """Put the host's GPUs in or out of MIG mode as the file says; never under a running job.

    A GPU leaving MIG mode loses its (idle) instances; one entering it starts
    with none: the scheduler lays it out for the demand it sees.
    """
    for gpu in gpus:
        wanted = gpu.index in spec.mig_gpus
        if gpu.index >= spec.gpu_count or gpu.mig_enabled == wanted:
            continue
        if gpu.pk in live_gpu_ids:
            problems.append(f"host {host.name} GPU {gpu.index} runs a job; its MIG mode cannot change until it is "
                            "drained")
            continue
        gpu.mig_enabled = wanted
        gpu.save(update_fields=["mig_enabled"])
        if not wanted:
            MigInstance.objects.filter(gpu=gpu, destroyed_at__isnull=True).update(destroyed_at=timezone.now())
        changes["updated"] += 1


def _policy_model_fields():
    return {field_name: Cluster._meta.get_field(field_name) for field_name, _ in POLICY_FIELDS.values()}


def _retire_gpus(gpus: list[Gpu]) -> None:
    with_history = set(Gpu.objects.filter(pk__in=[gpu.pk for gpu in gpus], assignments__isnull=False)
                       .values_list("pk", flat=True))
    for gpu in gpus:
        if gpu.pk in with_history:
            gpu.health = GpuHealth.FAILED
            gpu.save(update_fields=["health"])
        else:
            gpu.delete()


def _apply_health(host: Host, unhealthy: bool, actor: str, changes: dict) -> None:
    if unhealthy and (host.state == HostState.UP or host.state_reason == AWAITING_AGENT_REASON):
        host.set_state(HostState.DOWN, actor=actor, reason=UNHEALTHY_REASON)
        changes["updated"] += 1
    elif not unhealthy and host.state == HostState.DOWN and host.state_reason == UNHEALTHY_REASON:
        if host.domain.cluster.executor == Executor.AGENT and host.last_heartbeat_at is None:
            host.set_state(HostState.DOWN, actor=actor, reason=AWAITING_AGENT_REASON)
        else:
            host.set_state(HostState.UP, actor=actor, reason="no longer listed in unhealthy_hosts")
        changes["updated"] += 1


def load_cluster_file(path, *, actor: str = LOADER_ACTOR) -> tuple[Cluster, dict]:
    return apply_cluster(parse_cluster(read_yaml(path)), actor=actor)

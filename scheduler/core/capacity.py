"""The tick's working copy of free capacity: an in-memory statement.

`Capacity` is built once from the snapshot; the engine allocates on it as it
decides, so later jobs see earlier decisions, and a trial (defragmentation)
can take a checkpoint and roll back. Nothing here is written back anywhere.

Free capacity is indexed so that "does anything fit" is a lookup:

- hosts are grouped into *pools* (GPU type × fast lane) because a gang never
  mixes GPU types and the fast lane is a separate partition (rule 6);
- inside a pool, the schedulable hosts of one NVLink domain form a `Group`;
- each pool keeps its groups in sorted lists by free GPUs (partly used and
  entirely free ones apart, so best fit never breaks an empty domain while a
  used one fits) and by the free count of their hosts (for host best fit),
  plus its GPUs shared by fractions sorted by free milli-GPU.

Only hosts in state `up` are schedulable: capacity, entitlement and placement
all count them alone (cordoned, draining, drained and down hosts take nothing).

GPUs in MIG mode are kept apart (`MigState`, one per GPU): they are never
free whole GPUs nor shared by fractions, only MIG jobs use them, and their
layouts change only as `take_mig` is told.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from typing import NamedTuple

from . import mig as mig_geometry
from .model import DRAINING, UP, WHOLE_GPU_MILLI, PendingJob, RunningJob, Topology, in_seq_order


def per_host_share(total: int, gpus_here: int, gpus: int) -> int:
    """CPUs or memory a job needs on a host holding `gpus_here` of its `gpus`.

    A job's CPUs and memory are split across its hosts in proportion to the
    GPUs on each (evenly for regular shapes), rounded up.
    """
    if total <= 0:
        return 0
    if gpus <= 0:
        return total
    return -(-total * gpus_here // gpus)


def resources_on(job: RunningJob, host: str, gpu_host: dict[str, str]) -> tuple[int, int]:
    """(CPUs, GiB of memory) a running job holds on one host."""
    if not job.gpu_ids:
        return (job.cpus, job.memory_gib) if job.host == host else (0, 0)
    here = sum(1 for gpu in job.gpu_ids if (gpu_host.get(gpu) or gpu.rsplit(":", 1)[0]) == host)
    if not here:
        return 0, 0
    return per_host_share(job.cpus, here, len(job.gpu_ids)), per_host_share(job.memory_gib, here, len(job.gpu_ids))


def _holds_as(job: RunningJob) -> tuple[bool, bool]:
    """(on a MIG instance, on a share of one GPU): how a running job holds what it holds."""
    on_mig = bool(job.mig_profile)
    return on_mig, not on_mig and len(job.gpu_ids) == 1 and job.gpu_milli < WHOLE_GPU_MILLI


def running_job_hosts(job: RunningJob, gpu_host: dict[str, str]) -> dict[str, list[str]]:
    """The job's GPUs by host name, hosts in name order (CPU-only jobs: its host)."""
    by_host: dict[str, list[str]] = {}
    for gpu in job.gpu_ids:
        host = gpu_host.get(gpu) or gpu.rsplit(":", 1)[0]
        gpu_ids = by_host.get(host)
        if gpu_ids is None:
            by_host[host] = [gpu]
        else:
            gpu_ids.append(gpu)
    if not job.gpu_ids and job.host:
        by_host[job.host] = []
    return by_host if len(by_host) < 2 else dict(sorted(by_host.items()))


class Release(NamedTuple):
    """Capacity a job would give back on one host."""

    gpus: int = 0
    cpus: int = 0
    memory_gib: int = 0

    def __add__(self, other: Release) -> Release:  # type: ignore[override]
        return Release(self.gpus + other.gpus, self.cpus + other.cpus, self.memory_gib + other.memory_gib)

    def __sub__(self, other: Release) -> Release:
        return Release(self.gpus - other.gpus, self.cpus - other.cpus, self.memory_gib - other.memory_gib)


NOTHING = Release()


@dataclass(eq=False, slots=True)
class HostState:
    """One host's remaining capacity, as the tick has allocated it so far."""

    name: str
    domain: str
    gpu_type: str
    fast_lane: bool
    state: str
    gpu_count: int
    # Whole GPUs that are free and not earmarked, in the topology's order.
    free: list[str]
    # None: not constrained.
    cpus_free: int | None
    memory_free: int | None
    # GPUs shared by fractions -> milli-GPU in use (1..1000).
    milli_used: dict[str, int] = field(default_factory=dict)
    # Pending job id -> its free earmarked GPUs here (rule 4).
    earmarked: dict[str, list[str]] = field(default_factory=dict)
    # Pending fraction job id -> (GPU, milli-GPU) held for it on a GPU shared with others (rule 4), counted
    # in `milli_used` until it starts.
    milli_held: dict[str, tuple[str, int]] = field(default_factory=dict)
    # Pending job id -> (CPUs, GiB of memory) held for its claim here beyond what its victims here give back
    # (rule 4), out of `cpus_free` and `memory_free` until it starts: nobody takes what its plan counted on.
    resources_held: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Running jobs holding GPUs (or, CPU-only, CPUs) here, any state; and pending
    # jobs holding earmarked GPUs here, as if started at the tick.
    jobs: list[RunningJob] = field(default_factory=list)
    # None when the host takes no new jobs.
    group: Group | None = None
    # Rule 5: allocated jobs protected beyond this time may not start here.
    reserved_until: float | None = None
    reserved_for: str | None = None

    @property
    def schedulable(self) -> bool:
        return self.group is not None

    def milli_used_for(self, job_id: str, gpu: str) -> int | None:
        """Milli-GPU of a shared GPU in use as a pending job sees it: what is held there for its own claim is its
        (`milli_held`). None: no fraction shares the GPU."""
        used = self.milli_used.get(gpu)
        held = self.milli_held.get(job_id)
        if used is not None and held is not None and held[0] == gpu:
            used -= held[1]
        return used


@dataclass(eq=False, slots=True)
class Group:
    """The schedulable hosts of one NVLink domain inside one pool."""

    domain: str
    pool: Pool
    hosts: list[HostState]
    capacity: int
    free: int = 0
    # Free whole GPUs on a host (> 0) -> those hosts, by name.
    hosts_by_free: dict[int, list[HostState]] = field(default_factory=dict)
    # The entries this group has in its pool's indexes (to remove them).
    indexed_as: tuple[bool, int, tuple[int, ...]] | None = None

    @property
    def empty(self) -> bool:
        return self.free == self.capacity


@dataclass(eq=False, slots=True)
class MigState:
    """One GPU in MIG mode: its layout and which job holds each instance."""

    gpu: str
    host: HostState
    # Its place in the topology's GPU order (stable tie-break).
    position: int
    layout: tuple[tuple[str, int], ...]
    # (profile, start) -> id of the job holding that instance.
    held: dict[tuple[str, int], str] = field(default_factory=dict)
    # A job that is not a MIG job holds the GPU (MIG mode was switched under it): it takes nothing.
    blocked: bool = False

    @property
    def busy_compute(self) -> int:
        return sum(mig_geometry.PROFILES[name].compute_slices for name, _ in self.held)

    @property
    def idle(self) -> tuple[tuple[str, int], ...]:
        """Instances created and held by no job."""
        return tuple(instance for instance in self.layout if instance not in self.held)

    @property
    def open(self) -> bool:
        """Could a MIG job start here at all (some compute slice not held)?"""
        return not self.blocked and self.host.state == UP and self.busy_compute < mig_geometry.COMPUTE_SLICES


def _remove(entries: list, entry) -> None:
    del entries[bisect_left(entries, entry)]


@dataclass(eq=False)
class Pool:
    """The schedulable hosts of one GPU type on one side of the fast lane."""

    gpu_type: str
    fast_lane: bool
    groups: dict[str, Group] = field(default_factory=dict)
    largest_host: int = 0
    largest_group: int = 0
    free: int = 0
    # (free, domain) of groups with free GPUs, partly used or entirely free.
    used: list[tuple[int, str]] = field(default_factory=list)
    empty: list[tuple[int, str]] = field(default_factory=list)
    # Host free count -> (group free, domain) of groups having such a host.
    used_by_host_free: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    empty_by_host_free: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    # (free milli, host, gpu) of GPUs shared by fractions that have room.
    shared: list[tuple[int, str, str]] = field(default_factory=list)

    def index(self, group: Group) -> None:
        key = (group.free, group.domain)
        counts = tuple(sorted(group.hosts_by_free))
        empty = group.empty
        if group.free > 0:
            insort(self.empty if empty else self.used, key)
            by_host_free = self.empty_by_host_free if empty else self.used_by_host_free
            for count in counts:
                insort(by_host_free.setdefault(count, []), key)
        group.indexed_as = (empty, group.free, counts)

    def unindex(self, group: Group) -> None:
        empty, free, counts = group.indexed_as
        key = (free, group.domain)
        if free > 0:
            _remove(self.empty if empty else self.used, key)
            by_host_free = self.empty_by_host_free if empty else self.used_by_host_free
            for count in counts:
                _remove(by_host_free[count], key)
        group.indexed_as = None

    @property
    def largest_free_group(self) -> int:
        return max(self.used[-1][0] if self.used else 0, self.empty[-1][0] if self.empty else 0)

    @property
    def largest_free_host(self) -> int:
        counts = [c for c, e in self.used_by_host_free.items() if e]
        counts += [c for c, e in self.empty_by_host_free.items() if e]
        return max(counts, default=0)


class Capacity:
    """Free capacity of the cluster, updated as the tick decides."""

    def __init__(self, topology: Topology, running: tuple[RunningJob, ...], pending: tuple[PendingJob, ...],
                 now: float):
        self.hosts: dict[str, HostState] = {}
        self.gpu_host: dict[str, str] = {}
        self.pools: dict[tuple[str, bool], Pool] = {}
        # (fast-lane sides, GPU types) -> the pools a job asking that may use (placement.pools_in).
        self.pool_choices: dict[tuple, list[list[Pool]]] = {}
        self.domain_of: dict[str, str] = {}
        self._undo: list[tuple] | None = None
        # Running job id -> (host, its GPUs there) for every known host it holds.
        self.held: dict[str, list[tuple[HostState, int]]] = {}
        # Running job id -> (its `held` entry, what it would give back): `releases`, kept per run.
        self._releases: dict[str, tuple[list, dict[str, Release]]] = {}
        # Running job id -> (its `held` entry, facts about the run others derive from it once; see `memo`).
        self.run_memo: dict[str, tuple[list, object]] = {}
        # GPUs in MIG mode (healthy ones), by GPU id.
        self.mig: dict[str, MigState] = {}
        # What a tick derives from pending jobs, the policy and this capacity's shape alone (not from what is
        # free), handed on to the next tick on the same capacity (search.BoundedSearch `_start_search`).
        self.carried: dict | None = None
        # The names of the draining hosts (`draining_hosts`): hosts keep their state for a capacity's life.
        self._draining: frozenset[str] | None = None
        mig_layouts: dict[str, tuple[tuple[str, int], ...]] = {}
        for host in sorted(topology.hosts, key=attrgetter("name")):
            in_mig = {m.gpu: m.instances for m in host.mig if m.gpu in host.gpus} if host.mig else {}
            whole = [gpu for gpu in host.gpus if gpu not in in_mig] if in_mig else list(host.gpus)
            self.hosts[host.name] = HostState(
                host.name, host.domain, host.gpu_type, host.fast_lane, host.state, len(whole), whole,
                host.cpus or None, host.memory_gib or None,
            )
            mig_layouts.update(in_mig)
            for gpu in host.gpus:
                self.gpu_host[gpu] = host.name
        self.gpu_position = {gpu: i for i, gpu in enumerate(self.gpu_host)}
        # Is any host not up (down, draining, drained, cordoned)? Host states change only with a new Capacity.
        self.any_host_not_up = any(host.state != UP for host in self.hosts.values())
        for gpu, instances in mig_layouts.items():
            self.mig[gpu] = MigState(gpu, self.hosts[self.gpu_host[gpu]], self.gpu_position[gpu],
                                     mig_geometry.validate_layout(instances))
        # Pending MIG jobs not yet started this tick, by (profile, GPU types): the demand new layouts are
        # chosen for, and whether MIG room matters to `has_room`.
        self.mig_demand: Counter[tuple[str, frozenset[str]]] = Counter(
            (job.mig_profile, job.gpu_types) for job in pending if job.mig_profile
        ) if self.mig else Counter()
        self._layouts: dict[tuple, tuple[tuple[str, int], ...]] = {}
        # What fractions are scored against (placement.share_cost), built when first needed.
        self.running, self.pending = running, pending
        self.share_cost = None
        for domain in topology.domains:
            for name in domain.hosts:
                self.domain_of[name] = domain.name
        # Pending job id -> the GPUs of its claim it holds here, and its stand-in among the hosts' jobs.
        self._claim_jobs: list[tuple[HostState, RunningJob]] = []
        self._hold_running(running)
        self._build_pools()
        self.apply_claims(pending, running, now)

    # ------------------------------------------------------------ building

    def _hold_running(self, running: tuple[RunningJob, ...]) -> None:
        held_whole: set[str] = set()
        for job in in_seq_order(running):
            on_mig, shared = _holds_as(job)
            for host, gpu_ids in self._hold_hosts(job):
                if on_mig:
                    self._hold_instance(job, gpu_ids)
                elif shared:
                    gpu = gpu_ids[0]
                    host.milli_used[gpu] = host.milli_used.get(gpu, 0) + job.gpu_milli
                else:
                    held_whole.update(gpu_ids)
                    for gpu in gpu_ids:
                        if gpu in self.mig:
                            self.mig[gpu].blocked = True
        for host in self.hosts.values():
            if host.jobs:
                host.free = [g for g in host.free if g not in held_whole and g not in host.milli_used]

    def _gpus_by_host(self, job: RunningJob) -> Iterator[tuple[HostState, list[str]]]:
        """The hosts of this capacity a running job has GPUs on, with those GPUs."""
        for name, gpu_ids in running_job_hosts(job, self.gpu_host).items():
            host = self.hosts.get(name)
            if host is not None:
                yield host, gpu_ids

    def _hold_hosts(self, job: RunningJob) -> Iterator[tuple[HostState, list[str]]]:
        """`_gpus_by_host`, each host listing the job and charged its share of the job's CPUs and memory as it is
        reached (`held` records them); the caller takes the GPUs."""
        held = self.held[job.id] = []
        for host, gpu_ids in self._gpus_by_host(job):
            held.append((host, len(gpu_ids)))
            host.jobs.append(job)
            self._charge_host(host, job, len(gpu_ids), +1)
            yield host, gpu_ids

    @staticmethod
    def _charge_host(host: HostState, job: RunningJob, gpus_here: int, sign: int) -> None:
        """Take (+1) or give back (-1) the job's share of CPUs and memory on a host it has `gpus_here` GPUs on."""
        gpus = len(job.gpu_ids)
        if job.cpus and host.cpus_free is not None:
            host.cpus_free -= sign * per_host_share(job.cpus, gpus_here, gpus)
        if job.memory_gib and host.memory_free is not None:
            host.memory_free -= sign * per_host_share(job.memory_gib, gpus_here, gpus)

    def _hold_instance(self, job: RunningJob, gpu_ids: list[str]) -> None:
        """A running MIG job holds its instance (added to the layout if the snapshot's lacks it)."""
        state = self.mig.get(gpu_ids[0]) if gpu_ids else None
        if state is None or job.mig_start is None:
            return
        instance = (job.mig_profile, job.mig_start)
        if instance not in state.layout:
            if mig_geometry.is_valid_layout(state.layout + (instance,)):
                state.layout = mig_geometry.validate_layout(state.layout + (instance,))
            else:
                state.blocked = True  # an instance the snapshot's layout contradicts: touch nothing
        state.held[instance] = job.id

    def apply_claims(self, pending, running, now: float) -> None:
        """GPUs claimed by a pending job are its own (rule 4, `earmarks.py`).

        Free claimed GPUs leave the free list. A fraction's claim on a GPU
        others share holds the milli-GPU its victims will not give back. A GPU
        claimed twice goes to the job first in submission order. On hosts that
        take jobs, the owner counts as running there from now, so that
        reservations see when those GPUs could come back. `clear_claims` undoes
        all of it (a kept state re-applies the claims at every tick).
        """
        owners = [job for job in pending if job.earmarked_gpus]
        if not owners:
            return
        leaving: dict[tuple[str, str], int] = {}  # (claimant, GPU) -> milli its victims hold there
        victims: dict[str, list[RunningJob]] = {}  # claimant -> the jobs leaving for it
        for job in running:
            if job.preempted_for is not None:
                victims.setdefault(job.preempted_for, []).append(job)
                if len(job.gpu_ids) == 1:
                    key = (job.preempted_for, job.gpu_ids[0])
                    leaving[key] = leaving.get(key, 0) + job.gpu_milli
        for job in sorted(owners, key=lambda j: (j.submit_time, j.seq, j.id)):
            shared = job.gpus == 1 and job.gpu_milli < WHOLE_GPU_MILLI and not job.mig_profile
            held: list[str] = []
            for gpu in job.earmarked_gpus:
                host = self.hosts.get(self.gpu_host.get(gpu, ""))
                if host is None:
                    continue
                if gpu in host.free:
                    self._earmark_gpu(job.id, host, gpu)
                    if host.state == UP:
                        held.append(gpu)
                elif shared and gpu in host.milli_used and job.id not in host.milli_held:
                    hold = job.gpu_milli - leaving.get((job.id, gpu), 0)
                    self.hold_milli(job.id, host, gpu, hold)
                    host.earmarked.setdefault(job.id, [gpu])
            if job.cpus or job.memory_gib:
                by_host: dict[str, int] = {}
                for gpu in job.earmarked_gpus:
                    name = self.gpu_host.get(gpu)
                    if name is not None:
                        by_host[name] = by_host.get(name, 0) + 1
                for name, count in sorted(by_host.items()):
                    self.hold_resources(job, self.hosts[name], count, victims.get(job.id, ()))
            if held:
                as_running = RunningJob(job.id, job.project, tuple(held), now, job.min_runtime, job.resumable,
                                        job.submit_time, job.seq, max_runtime=job.max_runtime)
                for host, _ in self._hosts_of(as_running):
                    host.jobs.append(as_running)
                    self._claim_jobs.append((host, as_running))

    def _earmark_gpu(self, job_id: str, host: HostState, gpu: str) -> None:
        group = host.group
        if group is None:
            host.free.remove(gpu)
        else:
            group.pool.unindex(group)
            before = len(host.free)
            host.free.remove(gpu)
            self._refile(host, before)
            group.pool.index(group)
        host.earmarked.setdefault(job_id, []).append(gpu)

    def clear_claims(self) -> None:
        """Every claim's hold on free GPUs and milli-GPU let go, and the claimants' stand-ins removed."""
        for host, stand_in in self._claim_jobs:
            host.jobs.remove(stand_in)
        self._claim_jobs = []
        for host in self.hosts.values():
            if host.resources_held:
                for job_id in sorted(host.resources_held):
                    self._return_resources(job_id, host)
            if host.earmarked or host.milli_held:
                for job_id in sorted(set(host.earmarked) | set(host.milli_held)):
                    self.release_earmarks(job_id, host.earmarked.get(job_id, ()) or
                                          [host.milli_held[job_id][0]])

    def _build_pools(self) -> None:
        members: dict[tuple[str, bool, str], list[HostState]] = {}
        for host in self.hosts.values():
            if host.state == UP and host.gpu_count > 0:
                domain = self.domain_of.get(host.name, host.domain)
                members.setdefault((host.gpu_type, host.fast_lane, domain), []).append(host)
        for (gpu_type, fast_lane, domain), hosts in sorted(members.items()):
            pool = self.pools.get((gpu_type, fast_lane))
            if pool is None:
                pool = self.pools[(gpu_type, fast_lane)] = Pool(gpu_type, fast_lane)
            group = Group(domain=domain, pool=pool, hosts=hosts, capacity=sum(h.gpu_count for h in hosts))
            for host in hosts:
                host.group = group
                group.free += len(host.free)
                if host.free:
                    group.hosts_by_free.setdefault(len(host.free), []).append(host)
                pool.largest_host = max(pool.largest_host, host.gpu_count)
                for gpu, used in host.milli_used.items():
                    if used < WHOLE_GPU_MILLI:
                        insort(pool.shared, (WHOLE_GPU_MILLI - used, host.name, gpu))
            pool.groups[domain] = group
            pool.free += group.free
            pool.largest_group = max(pool.largest_group, group.capacity)
            pool.index(group)

    def prepare_tick(self, running, pending, mig_demand: Counter) -> None:
        """What a tick reads besides the holdings: the jobs (fractions are scored against them) and the MIG
        demand (new layouts are chosen for it)."""
        self.running, self.pending = running, pending
        self.share_cost = None
        self.mig_demand = mig_demand if self.mig else Counter()
        self._layouts = {}

    def signature(self) -> tuple:
        """Everything a decision can read here, in a canonical form (a kept state is compared with a fresh one)."""
        hosts = tuple(
            (h.name, h.state, h.gpu_count, tuple(h.free), h.cpus_free, h.memory_free,
             tuple(sorted(h.milli_used.items())), tuple(sorted((k, tuple(v)) for k, v in h.earmarked.items())),
             tuple(sorted(h.milli_held.items())), tuple(sorted(h.resources_held.items())),
             tuple(sorted(j.id for j in h.jobs)), h.group.domain if h.group is not None else None,
             h.reserved_until, h.reserved_for)
            for h in self.hosts.values()
        )
        pools = tuple(
            (key, pool.largest_host, pool.largest_group, pool.free, tuple(pool.used), tuple(pool.empty),
             tuple(sorted((c, tuple(e)) for c, e in pool.used_by_host_free.items() if e)),
             tuple(sorted((c, tuple(e)) for c, e in pool.empty_by_host_free.items() if e)), tuple(pool.shared),
             tuple((g.domain, g.capacity, g.free, tuple(sorted((c, tuple(h.name for h in hs))
                                                                for c, hs in g.hosts_by_free.items())))
                   for g in pool.groups.values()))
            for key, pool in sorted(self.pools.items())
        )
        held = tuple(sorted((job_id, tuple((h.name, c) for h, c in parts)) for job_id, parts in self.held.items()))
        mig = tuple((gpu, m.layout, tuple(sorted(m.held.items())), m.blocked) for gpu, m in sorted(self.mig.items()))
        return hosts, pools, held, mig

    # ------------------------------------------------------------ a kept state's events (state.py)

    def add_running(self, job: RunningJob) -> None:
        """A job holds its GPUs, CPUs and memory from now on (as `_hold_running` does at build time)."""
        on_mig, shared = _holds_as(job)
        for host, gpu_ids in self._hold_hosts(job):
            if on_mig:
                self._hold_instance(job, gpu_ids)
                continue
            group = host.group
            if group is not None:
                group.pool.unindex(group)
            before = len(host.free)
            if shared:
                gpu = gpu_ids[0]
                used = host.milli_used.get(gpu)
                if used is None:
                    if gpu in host.free:
                        host.free.remove(gpu)
                    used = 0
                elif group is not None and used < WHOLE_GPU_MILLI:
                    _remove(group.pool.shared, (WHOLE_GPU_MILLI - used, host.name, gpu))
                used += job.gpu_milli
                host.milli_used[gpu] = used
                if group is not None and used < WHOLE_GPU_MILLI:
                    insort(group.pool.shared, (WHOLE_GPU_MILLI - used, host.name, gpu))
            else:
                for gpu in gpu_ids:
                    if gpu in self.mig:
                        self.mig[gpu].blocked = True
                taken = set(gpu_ids)
                host.free = [g for g in host.free if g not in taken]
            if group is not None:
                self._refile(host, before)
                group.pool.index(group)

    def remove_running(self, job: RunningJob) -> None:
        """A job's run has ended: what it held is free again."""
        on_mig, shared = _holds_as(job)
        self.held.pop(job.id, None)
        self._releases.pop(job.id, None)
        self.run_memo.pop(job.id, None)
        for host, gpu_ids in self._gpus_by_host(job):
            host.jobs = [j for j in host.jobs if j.id != job.id]
            self._charge_host(host, job, len(gpu_ids), -1)
            if on_mig:
                state = self.mig.get(gpu_ids[0]) if gpu_ids else None
                if state is not None and state.held.get((job.mig_profile, job.mig_start)) == job.id:
                    del state.held[(job.mig_profile, job.mig_start)]
                continue
            group = host.group
            if group is not None:
                group.pool.unindex(group)
            before = len(host.free)
            if shared:
                gpu = gpu_ids[0]
                used = host.milli_used.get(gpu)
                if used is not None:
                    if group is not None and used < WHOLE_GPU_MILLI:
                        _remove(group.pool.shared, (WHOLE_GPU_MILLI - used, host.name, gpu))
                    used -= job.gpu_milli
                    if used > 0:
                        host.milli_used[gpu] = used
                        if group is not None:
                            insort(group.pool.shared, (WHOLE_GPU_MILLI - used, host.name, gpu))
                    else:
                        del host.milli_used[gpu]
                        if self.gpu_host.get(gpu) == host.name:
                            self._free_gpu(host, gpu)
            else:
                for gpu in gpu_ids:
                    if gpu in self.mig:
                        self.mig[gpu].blocked = False
                    elif self.gpu_host.get(gpu) == host.name:
                        self._free_gpu(host, gpu)
            if group is not None:
                self._refile(host, before)
                group.pool.index(group)

    def replace_running(self, job: RunningJob) -> None:
        """The same run with other facts (preempting, a checkpoint): what it holds does not change."""
        for host, _ in self.held.get(job.id, ()):
            host.jobs = [job if j.id == job.id else j for j in host.jobs]

    # ------------------------------------------------------------ queries

    @property
    def healthy_gpus(self) -> int:
        mig = sum(1 for state in self.mig.values() if state.host.state == UP)
        return sum(group.capacity for pool in self.pools.values() for group in pool.groups.values()) + mig

    @property
    def free_gpus(self) -> int:
        return sum(pool.free for pool in self.pools.values())

    def releases(self, job: RunningJob) -> dict[str, Release]:
        """What a running job would give back, per schedulable host (whole GPUs only).

        Kept per running job while it holds what it holds (a run's GPUs, CPUs and memory never change, and
        which hosts are schedulable changes only with a new `Capacity`); the caller must not change it.
        """
        held = self.held.get(job.id)
        if held:
            known = self._releases.get(job.id)
            if known is not None and known[0] is held:
                return known[1]
            releases = self._releases_on(job, held)
            self._releases[job.id] = (held, releases)
            return releases
        return self._releases_on(job, self._hosts_of(job))

    def holds_whole_hosts(self, job: RunningJob) -> bool:
        """Does the running job hold every GPU of each schedulable host it is on?"""
        releases = self.releases(job)
        return bool(releases) and all(release.gpus >= self.hosts[name].gpu_count
                                      for name, release in releases.items())

    def memo(self, job: RunningJob, derive):
        """`derive(job, self)` for a running job, computed once while it holds what it holds (as `releases`);
        for other jobs (started this tick, claimants' stand-ins) every time. One value per run: rule 4's
        `preemption.run_facts` is its only user."""
        held = self.held.get(job.id)
        if not held:
            return derive(job, self)
        known = self.run_memo.get(job.id)
        if known is not None and known[0] is held:
            return known[1]
        value = derive(job, self)
        self.run_memo[job.id] = (held, value)
        return value

    def _releases_on(self, job: RunningJob, held: list[tuple[HostState, int]]) -> dict[str, Release]:
        gpus = len(job.gpu_ids)
        shared = job.mig_profile or (gpus == 1 and job.gpu_milli < WHOLE_GPU_MILLI)
        return {
            host.name: Release(
                0 if shared else count,
                per_host_share(job.cpus, count, gpus),
                per_host_share(job.memory_gib, count, gpus),
            )
            for host, count in held
            if host.group is not None
        }

    def _hosts_of(self, job: RunningJob) -> list[tuple[HostState, int]]:
        """(host, its GPUs there) of a job not in the snapshot's running ones (started or earmarked)."""
        return [(host, len(gpu_ids)) for host, gpu_ids in self._gpus_by_host(job)]

    def draining_hosts(self) -> frozenset[str]:
        """The names of the hosts being drained (a host's state changes only with a new capacity)."""
        if self._draining is None:
            self._draining = frozenset(h.name for h in self.hosts.values() if h.state == DRAINING)
        return self._draining

    def has_room(self) -> bool:
        if any(pool.free or pool.shared for pool in self.pools.values()):
            return True
        return self.mig_demand.total() > 0 and any(state.open for state in self.mig.values())

    def mig_layout_for(self, gpu_type: str, profile: str) -> tuple[tuple[str, int], ...]:
        """The layout for an empty MIG GPU of `gpu_type`, from the waiting demand that may use it, `profile` in it."""
        demand: Counter[str] = Counter()
        for (wanted, types), count in self.mig_demand.items():
            if count > 0 and (not types or gpu_type in types):
                demand[wanted] += count
        key = (tuple(sorted(demand.items())), profile)
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = mig_geometry.choose_layout(demand, required=profile)
        return layout

    # ------------------------------------------------------------ the statement

    def take(self, job_id: str, gpus: int, parts: tuple[tuple[HostState, int], ...], *, cpus: int,
             memory_gib: int, milli: int = WHOLE_GPU_MILLI, shared_gpu: str | None = None) -> tuple[str, ...]:
        """Allocate a placement; returns the GPU ids, the job's earmarked ones first."""
        taken: list[str] = []
        for host, count in parts:
            # What was held for its claim here is its own (owners are never trial jobs).
            self._return_resources(job_id, host)
            cpus_here = per_host_share(cpus, count, gpus)
            memory_here = per_host_share(memory_gib, count, gpus)
            if host.cpus_free is not None:
                host.cpus_free -= cpus_here
            if host.memory_free is not None:
                host.memory_free -= memory_here
            gpu_ids: list[str] = []
            if count:
                group = host.group
                group.pool.unindex(group)
                before = len(host.free)
                own = host.earmarked.pop(job_id, [])
                if shared_gpu is not None:
                    gpu_ids = [shared_gpu]
                    self._share(host, shared_gpu, milli, own, job_id)
                else:
                    gpu_ids = own[:count] + host.free[: max(0, count - len(own))]
                    del host.free[: max(0, count - len(own))]
                    own = own[count:]
                if own:
                    host.earmarked[job_id] = own
                self._refile(host, before)
                group.pool.index(group)
            taken += gpu_ids
            if self._undo is not None:
                self._undo.append((host, gpu_ids, cpus_here, memory_here, milli, shared_gpu))
        return tuple(taken)

    def take_mig(self, job_id: str, state: MigState, instance: tuple[str, int],
                 layout: tuple[tuple[str, int], ...], *, cpus: int, memory_gib: int,
                 gpu_types: frozenset[str] = frozenset()) -> None:
        """Give a MIG job its instance, the GPU taking `layout` first (never while a trial runs).

        Only instances no job holds may leave the layout; the caller chose it so.
        """
        if self._undo is not None:
            raise RuntimeError("MIG placements are not trial moves")
        missing = [held for held in state.held if held not in layout]
        if missing or instance not in layout or instance in state.held:
            raise ValueError(f"{state.gpu}: layout {layout} would drop held instances or double-book {instance}")
        state.layout = layout
        state.held[instance] = job_id
        host = state.host
        if host.cpus_free is not None:
            host.cpus_free -= cpus
        if host.memory_free is not None:
            host.memory_free -= memory_gib
        key = (instance[0], gpu_types)
        if self.mig_demand[key] > 0:
            self.mig_demand[key] -= 1

    def _share(self, host: HostState, gpu: str, milli: int, own: list[str], job_id: str) -> None:
        pool = host.group.pool
        used = host.milli_used.get(gpu)
        if used is None:
            if gpu in own:
                own.remove(gpu)
            else:
                host.free.remove(gpu)
            used = 0
        else:
            if used < WHOLE_GPU_MILLI:
                _remove(pool.shared, (WHOLE_GPU_MILLI - used, host.name, gpu))
            held = host.milli_held.get(job_id)
            if held is not None and held[0] == gpu:
                del host.milli_held[job_id]
                used -= held[1]
            if gpu in own:
                own.remove(gpu)
        used += milli
        host.milli_used[gpu] = used
        if used < WHOLE_GPU_MILLI:
            insort(pool.shared, (WHOLE_GPU_MILLI - used, host.name, gpu))

    def _refile(self, host: HostState, before: int) -> None:
        """Move a host to its new place in its group's free-count index."""
        group = host.group
        after = len(host.free)
        if before == after:
            return
        if before:
            group.hosts_by_free[before].remove(host)
            if not group.hosts_by_free[before]:
                del group.hosts_by_free[before]
        if after:
            insort(group.hosts_by_free.setdefault(after, []), host, key=lambda h: h.name)
        group.free += after - before
        group.pool.free += after - before

    def earmark(self, job_id: str, host: HostState, count: int) -> list[str]:
        """Hold `count` free GPUs of a host for a job (rule 4); returns their ids."""
        count = min(count, len(host.free))
        if count <= 0:
            return []
        group = host.group
        group.pool.unindex(group)
        before = len(host.free)
        taken = host.free[:count]
        host.earmarked.setdefault(job_id, []).extend(taken)
        del host.free[:count]
        self._refile(host, before)
        group.pool.index(group)
        return taken

    def hold_milli(self, job_id: str, host: HostState, gpu: str, milli: int) -> None:
        """Hold milli-GPU of a shared GPU for a fraction that preempted others there (rule 4).

        A GPU a whole-GPU victim still holds needs no hold: nobody else can take it before it is free, and
        then the claim earmarks it whole.
        """
        used = host.milli_used.get(gpu)
        if used is None:
            return
        host.earmarked.setdefault(job_id, [gpu])
        milli = max(0, min(milli, WHOLE_GPU_MILLI - used))
        if milli == 0:
            host.milli_held[job_id] = (gpu, 0)
            return
        pool = host.group.pool if host.group is not None else None
        if pool is not None and used < WHOLE_GPU_MILLI:
            _remove(pool.shared, (WHOLE_GPU_MILLI - used, host.name, gpu))
        used += milli
        host.milli_used[gpu] = used
        host.milli_held[job_id] = (gpu, milli)
        if pool is not None and used < WHOLE_GPU_MILLI:
            insort(pool.shared, (WHOLE_GPU_MILLI - used, host.name, gpu))

    def hold_resources(self, job, host: HostState, count: int, leaving) -> None:
        """Hold the CPUs and memory a claimant needs for `count` of its GPUs on `host`, beyond what the jobs
        `leaving` for it there give back when they go (rule 4); as much as is free, never below zero."""
        cpus, memory = per_host_share(job.cpus, count, job.gpus), per_host_share(job.memory_gib, count, job.gpus)
        for victim in leaving:
            back_cpus, back_memory = resources_on(victim, host.name, self.gpu_host)
            cpus, memory = cpus - back_cpus, memory - back_memory
        cpus = 0 if host.cpus_free is None else max(0, min(cpus, host.cpus_free))
        memory = 0 if host.memory_free is None else max(0, min(memory, host.memory_free))
        if not cpus and not memory:
            return
        before = host.resources_held.get(job.id, (0, 0))
        host.resources_held[job.id] = (before[0] + cpus, before[1] + memory)
        if cpus:
            host.cpus_free -= cpus
        if memory:
            host.memory_free -= memory

    def _return_resources(self, job_id: str, host: HostState) -> None:
        held = host.resources_held.pop(job_id, None)
        if held is None:
            return
        if held[0]:
            host.cpus_free += held[0]
        if held[1]:
            host.memory_free += held[1]

    def release_earmarks(self, job_id: str, gpu_ids) -> None:
        """A claim dropped or no longer needed: its free GPUs (and held milli-GPU) are anyone's again."""
        names = sorted({self.gpu_host[gpu] for gpu in gpu_ids if gpu in self.gpu_host})
        for host in (self.hosts[name] for name in names):
            self._return_resources(job_id, host)
            gpus = host.earmarked.pop(job_id, None)
            held = host.milli_held.pop(job_id, None)
            if held is not None and held[1] > 0:
                gpu, milli = held
                group = host.group
                used = host.milli_used[gpu]
                if group is not None and used < WHOLE_GPU_MILLI:
                    _remove(group.pool.shared, (WHOLE_GPU_MILLI - used, host.name, gpu))
                host.milli_used[gpu] = used - milli
                if group is not None:
                    insort(group.pool.shared, (WHOLE_GPU_MILLI - used + milli, host.name, gpu))
            # A GPU shared with others is not free: only whole GPUs held for the claim go back to the free list.
            gpus = [g for g in gpus or () if g not in host.milli_used]
            if not gpus:
                continue
            group = host.group
            if group is None:
                host.free.extend(gpus)
                host.free.sort(key=self.gpu_position.__getitem__)
                continue
            group.pool.unindex(group)
            before = len(host.free)
            for gpu in gpus:
                self._free_gpu(host, gpu)
            self._refile(host, before)
            group.pool.index(group)

    def checkpoint(self) -> int:
        """Start recording allocations; `rollback(mark)` undoes those after `mark`."""
        if self._undo is None:
            self._undo = []
        return len(self._undo)

    def rollback(self, mark: int) -> None:
        while len(self._undo) > mark:
            host, gpu_ids, cpus_here, memory_here, milli, shared_gpu = self._undo.pop()
            if host.cpus_free is not None:
                host.cpus_free += cpus_here
            if host.memory_free is not None:
                host.memory_free += memory_here
            if not gpu_ids:
                continue
            group = host.group
            group.pool.unindex(group)
            before = len(host.free)
            if shared_gpu is not None:
                pool = group.pool
                used = host.milli_used[shared_gpu]
                if used < WHOLE_GPU_MILLI:
                    _remove(pool.shared, (WHOLE_GPU_MILLI - used, host.name, shared_gpu))
                used -= milli
                if used:
                    host.milli_used[shared_gpu] = used
                    insort(pool.shared, (WHOLE_GPU_MILLI - used, host.name, shared_gpu))
                else:
                    del host.milli_used[shared_gpu]
                    self._free_gpu(host, shared_gpu)
            else:
                for gpu in gpu_ids:
                    self._free_gpu(host, gpu)
            self._refile(host, before)
            group.pool.index(group)
        if mark == 0:
            self._undo = None

    def _free_gpu(self, host: HostState, gpu: str) -> None:
        # Trials never take earmarked GPUs (only their owner does, and owners
        # are not trial jobs), so an undone GPU is simply free again, in order.
        insort(host.free, gpu, key=self.gpu_position.__getitem__)

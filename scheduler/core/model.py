"""The scheduler's input and output: frozen dataclasses, nothing else.

A `Snapshot` is everything `schedule()` may look at; `Decisions` is everything
it may say. The live tick builds the snapshot from the ORM and applies the
decisions back; the simulator builds it from its own state. Times are seconds
(epoch seconds live, seconds from the start in the simulator); `now` is always
passed in, never read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter

from .lifecycle import StopCause, end_of_stop
from .mig import profile_milli

# Host states, as in topology.Host.
UP = "up"
CORDONED = "cordoned"
DRAINING = "draining"
DRAINED = "drained"
DOWN = "down"
# Hosts that take new jobs. Their healthy GPUs are the cluster's capacity (DESIGN §2: "the sum of its healthy,
# schedulable hosts") and what every share is a share of (rule 2): a draining host still runs work, but its
# GPUs are on their way out of service and entitle no one.
SCHEDULABLE_STATES = frozenset({UP})

# Job topology requests.
ANY = "any"
DOMAIN = "domain"
PREFERRED = "preferred"

# Job priorities order jobs only inside their project.
PRIORITY_LOW = 0
PRIORITY_NORMAL = 1
PRIORITY_HIGH = 2

# Running job states.
RUNNING = "running"
PREEMPTING = "preempting"

WHOLE_GPU_MILLI = 1000


def gpu_host(gpu_id: str) -> str:
    """The host of a GPU id. Ids are `<host>:<index>` (`Host.gpus`), as pages and the API also write them
    with a suffix (`@<milli>` for a fraction, `/<profile>@<slot>` for a MIG instance); host names are slugs,
    so the first colon ends the host."""
    return gpu_id.partition(":")[0]


def hosts_of(gpu_ids: Iterable[str]) -> list[str]:
    """The hosts of some GPU ids, each once, in name order: the order a run's ranks are numbered in, one per host."""
    return sorted({gpu_host(gpu_id) for gpu_id in gpu_ids})

# The longest restart overhead a job may give (seconds; one day): the API's and the workload file's limit.
MAX_RESTART_OVERHEAD = 86400


@dataclass(frozen=True)
class Policy:
    """A cluster's scheduling policy (FORMATS.md cluster spec), in seconds."""

    tick: float = 5
    window: float = 7 * 86400
    max_min_runtime: float = 8 * 3600
    grace_period: float = 60
    unallocated_grace: float = 10
    fast_lane_gpus: int = 0
    fast_lane_max_min_runtime: float = 15 * 60
    heartbeat_timeout: float = 90
    # Defragmentation: at most this many migrations in any rolling hour.
    defrag_max_migrations_per_hour: int = 4
    # How many pending jobs may hold a reservation at once (rule 5).
    max_reservations: int = 1
    # Seconds a job holds its GPUs after each restart before it makes progress again (loading a checkpoint,
    # warming up), for jobs that do not give their own (`restart_overhead` of the job). Part of what a
    # preemption costs (rule 4 weighs it with the work since the last checkpoint).
    restart_overhead: float = 300
    # Rule 8's reasons, queue positions and estimated starts for waiting jobs. The live tick keeps them;
    # the simulator, which reads none of them, turns them off (`Decisions.pending` is then empty). The
    # decisions themselves (starts, preemptions, reservations, host changes) are the same either way.
    explain: bool = True
    # The bound on churn for unallocated jobs (which have no protection): after its n-th preemption a job
    # waits `unallocated_backoff` × 2^(n-1) seconds, at most `max_unallocated_backoff`, before it may start
    # again (`backed_off_until`).
    unallocated_backoff: float = 300
    max_unallocated_backoff: float = 3600
    # The bound on churn for allocated jobs: each earlier preemption doubles a run's protection from
    # fair-share preemption, up to this many seconds (None: 2 × `max_min_runtime`). Past the cap on minimum
    # runtime only jobs that need a whole NVLink domain may take it (`shielded_until`), so rule 5's bound holds.
    max_preempted_protection: float | None = None
    # The longest a waiting job waits for a victim's declared checkpoint before rule 4 takes it anyway
    # (`checkpoint_window`). The job's owner declares the interval: without a bound, a long one would shield it
    # from fair share for hours at a time. 0: nobody waits for checkpoints.
    max_checkpoint_wait: float = 30 * 60


@dataclass(frozen=True)
class Host:
    name: str
    domain: str
    gpu_type: str
    # Ids ("<host>:<index>") of the GPUs that are healthy and schedulable.
    gpus: tuple[str, ...]
    state: str = UP
    # 0 means "not constrained".
    cpus: int = 0
    memory_gib: int = 0
    # Part of the cluster's fast lane (rule 6).
    fast_lane: bool = False
    # Its GPUs in MIG mode, with their layouts. Those that are healthy are also
    # in `gpus`, but take only jobs asking for a MIG profile (never whole-GPU
    # jobs or fractions) and do not count towards whole-GPU room.
    mig: tuple[MigGpu, ...] = ()


def schedulable_gpus(hosts: Iterable[Host]) -> int:
    """Rule 2's "healthy GPUs": the healthy GPUs of hosts that take new jobs (`SCHEDULABLE_STATES`), MIG ones
    included. Entitlements are shares of this number, live and in the simulator, on the scheduler's queue
    and on the budget pages alike."""
    return sum(len(host.gpus) for host in hosts if host.state in SCHEDULABLE_STATES)


@dataclass(frozen=True)
class MigGpu:
    """A GPU in MIG mode and the instances created on it: (profile, start slot), see `mig.py`.

    Instances stay created when their job ends (idle); the scheduler adds
    instances in free slices, and chooses a new layout only for a GPU no
    job holds an instance of.
    """

    gpu: str
    instances: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Domain:
    """An NVLink domain: a GB200 NVL72 rack, or one HGX server."""

    name: str
    hosts: tuple[str, ...]
    block: str | None = None
    kind: str = ""


@dataclass(frozen=True)
class Topology:
    domains: tuple[Domain, ...]
    hosts: tuple[Host, ...]


@dataclass(frozen=True)
class Unit:
    """A node of the org tree as seen from one cluster.

    `share` is the percent of the parent's share on this cluster (None: no
    allocation here). Usage counts only intervals that have *ended* inside the
    window; the core adds running jobs up to `now` itself.
    """

    name: str
    parent: str | None
    share: float | None
    allocated_usage: float = 0.0  # GPU-seconds, charged
    unallocated_usage: float = 0.0  # GPU-seconds, free


@dataclass(frozen=True)
class PendingJob:
    id: str
    project: str
    gpus: int
    min_runtime: float
    resumable: bool
    submit_time: float
    # Stable tie-breaker after priority and submit time (database id, trace row).
    seq: int
    user: str = ""
    gpus_per_host: int | None = None
    gpu_milli: int = WHOLE_GPU_MILLI
    # Allowed GPU types; empty = any.
    gpu_types: frozenset[str] = frozenset()
    topology: str = ANY
    max_runtime: float | None = None
    priority: int = PRIORITY_NORMAL
    cpus: int = 0
    memory_gib: int = 0
    # GPUs held for this job since it preempted (or moved) jobs to make room
    # (rule 4): free ones, and those its victims still hold. The claim lasts
    # across ticks until the job starts, is cancelled, or the core drops it
    # with a recorded reason (`Decisions.earmark_drops`).
    earmarked_gpus: tuple[str, ...] = ()
    # A MIG instance of this profile (`mig.PROFILES`) instead of a whole GPU or
    # a fraction: a 1-GPU job; `gpu_milli` then becomes the profile's share.
    mig_profile: str = ""
    # Times it was preempted (requeued) so far: its next run is protected longer (`protection`).
    preemptions: int = 0
    # When it was last requeued by a preemption (None: never): an unallocated job backs off from then.
    requeued_at: float | None = None
    # Seconds it holds its GPUs after a restart before it makes progress (None: the policy's
    # `restart_overhead`).
    restart_overhead: float | None = None
    # Seconds of progress between its checkpoints, as declared (None: not declared); its runs carry it.
    checkpoint_every: float | None = None

    def __post_init__(self) -> None:
        if self.mig_profile:
            object.__setattr__(self, "gpu_milli", profile_milli(self.mig_profile))

    @property
    def allocated(self) -> bool:
        return self.min_runtime > 0


def whole_gpus_asked(job: PendingJob) -> int:
    """Whole GPUs the job needs free to start; 0 for a fraction, a MIG instance or no GPU (such a job may find room
    however few GPUs are free)."""
    if job.mig_profile or not job.gpus or (job.gpus == 1 and job.gpu_milli < WHOLE_GPU_MILLI):
        return 0
    return job.gpus


# What a tick's decision reads of a pending job but who it is and what it carries from earlier ticks that the tick
# looks at job by job (a claim, a back-off). Jobs alike in all of it wait alike once one is known to wait (a tick's
# verdicts are kept per such class, `search.BoundedSearch._known_to_wait`). The preemptions so far and the restart
# overhead are in it: they lengthen the next run's protection (`run_shield`), which decides the reservations a job
# may start under (rule 5), so a job preempted before may be kept off held hosts that a job otherwise alike may use.
alike = attrgetter("project", "gpus", "gpus_per_host", "gpu_milli", "gpu_types", "topology", "min_runtime",
                   "max_runtime", "cpus", "memory_gib", "mig_profile", "preemptions", "restart_overhead")


@dataclass(frozen=True)
class RunningJob:
    id: str
    project: str
    gpu_ids: tuple[str, ...]
    start_time: float
    min_runtime: float
    resumable: bool
    submit_time: float
    seq: int
    user: str = ""
    gpu_milli: int = WHOLE_GPU_MILLI
    topology: str = ANY
    max_runtime: float | None = None
    priority: int = PRIORITY_NORMAL
    cpus: int = 0
    memory_gib: int = 0
    # Time of the last checkpoint the job reported (None: none, work since
    # start would be lost).
    last_checkpoint: float | None = None
    state: str = RUNNING
    # Set while PREEMPTING: who it makes room for, and when SIGKILL falls.
    preempted_for: str | None = None
    grace_ends: float | None = None
    # CPU-only jobs (no GPUs): the host holding their CPUs and memory.
    host: str = ""
    # A job on a MIG instance: its profile and start slot on its one GPU;
    # `gpu_milli` then becomes the profile's share.
    mig_profile: str = ""
    mig_start: int | None = None
    # Times it was preempted before this run started: this run is protected longer (`protection`).
    preemptions: int = 0
    # Seconds it holds its GPUs after a restart before it makes progress (None: the policy's
    # `restart_overhead`).
    restart_overhead: float | None = None
    # Seconds of progress between the checkpoints it declared it saves (None: none declared); rule 4 times
    # a fair-share preemption so that one falls within the grace period (`checkpoint_window`).
    checkpoint_every: float | None = None

    def __post_init__(self) -> None:
        if self.mig_profile:
            object.__setattr__(self, "gpu_milli", profile_milli(self.mig_profile))

    @property
    def allocated(self) -> bool:
        return self.min_runtime > 0


class InSeqOrder(tuple):
    """Running jobs already in (seq, id) order, the order every walk over them takes (a kept state keeps it)."""

    __slots__ = ()


def in_seq_order(jobs) -> InSeqOrder:
    """The jobs in (seq, id) order; jobs kept in that order already are returned as they are."""
    if isinstance(jobs, InSeqOrder):
        return jobs
    return InSeqOrder(sorted(jobs, key=lambda j: (j.seq, j.id)))


def protection(min_runtime: float, preemptions: int, policy: Policy) -> float:
    """How long a run can't be preempted for fairness: the contract, with the bound on churn.

    A job's minimum runtime, doubled for every time it was preempted before
    this run, but never beyond the cluster's cap on minimum runtime — so a job
    preempted again and again is soon protected for the cap, and rule 5's
    bound (cap + grace + tick) holds. Unallocated jobs get none.
    """
    if min_runtime <= 0:
        return 0.0
    grown = min_runtime * (1 << min(preemptions, 32))
    return max(min_runtime, min(grown, policy.max_min_runtime))


def preempted_protection_cap(policy: Policy) -> float:
    """How long at most a run is shielded from fair-share preemption by its earlier preemptions."""
    cap = policy.max_preempted_protection
    return 2 * policy.max_min_runtime if cap is None else max(cap, policy.max_min_runtime)


def shield(min_runtime: float, preemptions: int, policy: Policy) -> float:
    """How long a run can't be preempted for fairness by a job that does not need a whole NVLink domain.

    Its protection (`protection`) while it has never been preempted; after
    that the doubling goes on past the cap on minimum runtime, up to
    `preempted_protection_cap` (twice the cap unless the cluster says): a
    job preempted again and again is soon left to run 16 h at a time, so one
    job is preempted a handful of times, not once per cap. A job that needs a whole domain (rule 5's large jobs) may
    still take it once `protection` ends, so the large jobs' bound holds.
    """
    if min_runtime <= 0:
        return 0.0
    if preemptions <= 0:
        return protection(min_runtime, preemptions, policy)
    grown = min_runtime * (1 << min(preemptions, 32))
    return max(min_runtime, min(grown, preempted_protection_cap(policy)))


def run_shield(job: RunningJob | PendingJob, policy: Policy) -> float:
    """How long a run of this job is shielded (`shield`), counted from its start.

    A restart (a run after a preemption) holds its GPUs for the job's restart
    overhead before it makes progress again, so its shield counts from then:
    each run gets its shield of work, and a job that checkpoints every k
    seconds of progress, with a shield a multiple of k, is preempted just
    after a checkpoint rather than `restart_overhead` seconds before one (all
    the work since the checkpoint lost). The protection (`protected_until`)
    still counts from the start, so whole-domain jobs keep rule 5's bound.
    """
    shielded = shield(job.min_runtime, job.preemptions, policy)
    if shielded <= 0 or job.preemptions <= 0:
        return shielded
    return shielded + restart_overhead(job, policy)


def shielded_until(job: RunningJob, policy: Policy) -> float:
    """When a running allocated job's shield (`run_shield`) ends; its start for an unallocated one."""
    return job.start_time + run_shield(job, policy)


def backoff(preemptions: int, policy: Policy) -> float:
    """How long an unallocated job waits after its `preemptions`-th preemption before it may start again.

    Unallocated jobs have no protection (minimum runtime 0): without this, one
    evicted for an allocated job restarts on the next GPUs that come free and
    is evicted again the moment allocated work wants them. Doubling the wait
    per preemption bounds how often one job can be preempted: at most once
    per `unallocated_backoff` at first, and once per `max_unallocated_backoff`
    after a few.
    """
    if preemptions <= 0:
        return 0.0
    return min(policy.unallocated_backoff * (1 << min(preemptions - 1, 32)), policy.max_unallocated_backoff)


def backed_off_until(job: PendingJob, policy: Policy) -> float:
    """Until when a pending unallocated job may not start (-inf: it may now)."""
    if job.min_runtime > 0 or job.requeued_at is None or job.preemptions <= 0:
        return -math.inf
    return job.requeued_at + backoff(job.preemptions, policy)


def restart_overhead(job: RunningJob | PendingJob, policy: Policy) -> float:
    """Seconds the job holds its GPUs after a restart before it makes progress again: its own, else the policy's."""
    return policy.restart_overhead if job.restart_overhead is None else job.restart_overhead


def checkpoint_due(job: RunningJob, at: float, policy: Policy) -> float | None:
    """The run's first checkpoint at or after `at`, by the interval the job declared (None: it declared none, or
    it is not resumable and keeps nothing). A restart makes progress from start + restart overhead, as
    `run_shield` counts it, and checkpoints every `checkpoint_every` seconds of progress from then; a
    checkpoint the job reported in this run (`last_checkpoint`) sets the count anew from itself."""
    every = job.checkpoint_every
    if not every or not job.resumable:
        return None
    since = job.start_time + (restart_overhead(job, policy) if job.preemptions > 0 else 0.0)
    if job.last_checkpoint is not None and job.last_checkpoint > since:
        since = job.last_checkpoint
        if at <= since:
            return since
    elif at <= since:
        return since + every
    return since + math.ceil((at - since) / every) * every


def checkpoint_window(job: RunningJob, at: float, grace: float, policy: Policy) -> float:
    """The first moment from `at` at which rule 4 may take the job for fair share, by its declared checkpoints.

    A preempted job runs on through its grace period, so a checkpoint that
    falls inside it is kept. Taking a job at an arbitrary moment between two
    checkpoints loses half an interval on average; so a job that declared its
    interval is taken only while the work it would lose is no more than the
    wait for its next checkpoint's grace period: in the first half of an
    interval, or in the grace period before a checkpoint (where it loses
    nothing), or while that grace period is more than the policy's
    `max_checkpoint_wait` away. The job waiting for its GPUs waits at most
    half an interval and at most that. Jobs that declared none: `at`.
    """
    due = checkpoint_due(job, at, policy)
    if due is None or _may_take(job, at, due, grace, policy):
        return at
    return due - grace


def waits_for_checkpoints(gainer_on_one_host: bool, gainer_needs_whole_domain: bool,
                          victim_holds_whole_hosts: bool) -> bool:
    """Does rule 4 take a victim only when `checkpoint_window` lets it, for this preemptor?

    A job on one host waits for its victims' checkpoints. A job that needs
    several hosts waits only for victims that hold whole hosts: a host that
    small jobs share frees only when all of them go, and waiting for each
    one's checkpoint would keep the GPUs the others free idle. A job that needs
    a whole NVLink domain waits for none (rule 5's bound on its wait holds).
    """
    if gainer_needs_whole_domain:
        return False
    return gainer_on_one_host or victim_holds_whole_hosts


def checkpoint_window_closes(job: RunningJob, at: float, grace: float, policy: Policy) -> tuple[float, float]:
    """For a job rule 4 may take at `at` (`checkpoint_window`): when that stops, and when it may again
    (inf, inf: it always may)."""
    due = checkpoint_due(job, at, policy)
    every = job.checkpoint_every
    if due is None or every <= grace or policy.max_checkpoint_wait <= 0:
        return math.inf, math.inf
    if due - at <= grace:
        # In the grace period before a checkpoint: it stays takeable through the first half of the next interval.
        previous, due = due, due + every
    else:
        previous = _previous_checkpoint(job, due, policy)
    return max((previous + due - grace) / 2, due - grace - policy.max_checkpoint_wait), due - grace


def _previous_checkpoint(job: RunningJob, due: float, policy: Policy) -> float:
    """The checkpoint before `due` (`checkpoint_due`), or the moment the run began to make progress."""
    since = job.start_time + (restart_overhead(job, policy) if job.preemptions > 0 else 0.0)
    if job.last_checkpoint is not None and job.last_checkpoint > since:
        since = job.last_checkpoint
    return max(since, due - job.checkpoint_every)


def _may_take(job: RunningJob, at: float, due: float, grace: float, policy: Policy) -> bool:
    """Would preempting the job at `at` lose no more work than waiting for its checkpoint at `due`, or would the
    wait be longer than the policy's `max_checkpoint_wait`?"""
    opens = due - grace
    wait = opens - at
    return wait <= 0 or wait >= policy.max_checkpoint_wait or at - _previous_checkpoint(job, due, policy) <= wait


def protected_until(job: RunningJob, policy: Policy) -> float:
    """When a running job's protection ends (for an allocated job; its start for an unallocated one)."""
    return job.start_time + protection(job.min_runtime, job.preemptions, policy)


@dataclass(frozen=True)
class Snapshot:
    topology: Topology
    units: tuple[Unit, ...]
    running: tuple[RunningJob, ...]
    pending: tuple[PendingJob, ...]
    # Start times of defrag migrations in the last hour (for the hourly cap).
    recent_defrag_migrations: tuple[float, ...] = ()


# ---------------------------------------------------------------- decisions


@dataclass(frozen=True)
class Start:
    job_id: str
    gpu_ids: tuple[str, ...]
    gpu_milli: int = WHOLE_GPU_MILLI
    reason: str = ""
    # CPU-only jobs (no GPUs): the host to run on.
    host: str = ""
    # A MIG job: the instance it starts on (profile, start slot) on its one GPU.
    mig_profile: str = ""
    mig_start: int | None = None
    # Seconds this run can't be preempted for fairness (`protection`): what the live tick stores with the run.
    protection: float = 0.0


@dataclass(frozen=True)
class MigLayout:
    """The layout a MIG GPU must have before this tick's starts on it.

    Only instances no job holds are ever removed: either new instances in
    free slices, or a new layout for a GPU with no job on it.
    """

    gpu: str
    instances: tuple[tuple[str, int], ...]
    reason: str = ""


@dataclass(frozen=True)
class Preemption:
    """Stop a running job.

    `cause` is machine-readable, as in events.csv: `job:<id>`, `drain:<host>`,
    `down:<host>`, `defrag`, `max_runtime`. `grace` is the seconds between
    SIGTERM and SIGKILL (0 for a host that is down). `requeue` says whether
    the job goes back to pending (resumable and not stopped for its own
    limit) or ends: made with `of`, it says what the end-of-run table
    (`lifecycle.end_of_run`) makes of the run, so no caller restates it.
    """

    job_id: str
    cause: str
    reason: str
    grace: float
    requeue: bool
    preemptor: str | None = None

    @classmethod
    def of(cls, job: RunningJob, cause: StopCause, reason: str, *, grace: float,
           preemptor: str | None = None) -> Preemption:
        """Stop `job` for `cause`; it requeues if its run, stopped (or lost, for `down`), would."""
        requeue = end_of_stop(cause, job.resumable).requeue
        return cls(job.id, str(cause), reason, grace=grace, requeue=requeue, preemptor=preemptor)


@dataclass(frozen=True)
class Reservation:
    job_id: str
    domain: str
    hosts: tuple[str, ...]
    expected_start: float
    reason: str = ""


@dataclass(frozen=True)
class PendingStatus:
    """Why a pending job waits, where it stands, when it may start."""

    job_id: str
    reason: str
    # 1-based position in the cluster's fair-share order this tick.
    position: int
    estimated_start: float | None = None


# Why a project's waiting jobs stand where they do in the queue, after the previous project's (rule 2's
# order, as the queue page explains it): `QueueStep.kind`.
QUEUE_FIRST = "first"  # the first project: its units are the least served with allocated jobs waiting
QUEUE_FIRST_UNALLOCATED = "first_unallocated"  # only unallocated jobs wait at all
QUEUE_AFTER_ALLOCATED = "after_allocated"  # only unallocated jobs: after all allocated work
QUEUE_BOTH_UNALLOCATED = "both_unallocated"  # both unallocated: less free GPU time used goes first
# The first tree level where the two projects' units differ (`ahead`, `here`), by their usage ratios:
QUEUE_NEITHER_ALLOCATED = "neither_allocated"  # neither has an allocation here: by name
QUEUE_NO_ALLOCATION = "no_allocation"  # `here` has none: after allocated units
QUEUE_AHEAD_NO_ALLOCATION = "ahead_no_allocation"  # `ahead` has none, yet went first
QUEUE_LESS_SERVED = "less_served"  # `ahead` has used less of its budget
QUEUE_EQUAL_RATIOS = "equal_ratios"  # the same ratio: larger share, then name
QUEUE_CHARGED = "charged"  # `here` was less served at the start of the tick, but its starts charged it
QUEUE_SAME_UNITS = "same_units"  # no level differs: project priority, then submit time
# Not the core's: a project whose jobs all came after the tick that stored the order (the queue page says so).
QUEUE_NEW = "new"


@dataclass(frozen=True)
class QueueStep:
    """Why `project`'s first waiting job stands at `position`, after the previous project's (rule 2).

    `ahead` and `here` are the previous project's unit and this one's at the
    first level of the org tree where they differ, with their usage ratios at
    the start of the tick (None: no allocation on this cluster). `path` is
    the project's units from the top of the org tree down to it, as the tick
    walked them: the levels of its sort metric.
    """

    project: str
    position: int
    kind: str
    ahead: str = ""
    here: str = ""
    ahead_ratio: float | None = None
    here_ratio: float | None = None
    path: tuple[str, ...] = ()


@dataclass(frozen=True)
class EarmarkDrop:
    """A claim on GPUs (rule 4) that no longer holds, and why: its GPUs are free for others again."""

    job_id: str
    reason: str


@dataclass(frozen=True)
class JobLeave:
    """When a job on a draining host is expected to be gone (rule 7), and why then."""

    job_id: str
    at: float
    why: str


@dataclass(frozen=True)
class HostChange:
    host: str
    state: str
    reason: str
    # A host still draining: when each of its jobs leaves, the last to leave first (rule 7). The live tick
    # keeps them on the host for its page, the API and the CLI.
    leaves: tuple[JobLeave, ...] = ()

    @property
    def empty_at(self) -> float | None:
        """When the last job leaves (None: none is left)."""
        return self.leaves[0].at if self.leaves else None


@dataclass(frozen=True)
class Decisions:
    starts: tuple[Start, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    # One entry for every pending job that is not started this tick.
    pending: dict[str, PendingStatus] = field(default_factory=dict)
    host_changes: tuple[HostChange, ...] = ()
    # Per-unit usage ratios the order was computed from (for queue pages).
    unit_ratios: dict[str, float] = field(default_factory=dict)
    # MIG GPUs whose layout changes this tick (applied before the starts).
    mig_layouts: tuple[MigLayout, ...] = ()
    # Every pending job's claim on GPUs after this tick (rule 4): job id -> GPU ids, sorted. The caller
    # keeps them and passes them back as `PendingJob.earmarked_gpus`; a job not here holds none.
    earmarks: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Claims given up this tick, with the reason (a host went down, a victim would not stop, ...).
    earmark_drops: tuple[EarmarkDrop, ...] = ()
    # Every project with a job still waiting, in queue order: why it stands after the previous one (empty
    # when `Policy.explain` is off, as `pending` is).
    queue_order: tuple[QueueStep, ...] = ()

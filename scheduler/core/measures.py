"""DESIGN §5 measures of a cluster at one moment: the one definition the dashboards and the simulator share.

Pure: a core `Topology` and what jobs hold in, numbers out. The live
dashboard feeds it from the database (`scheduler.selectors.cluster_measures`),
the tick's history sample from its snapshot and the decisions it applied
(`sample_after`), the simulator from its own state; time averages are the
caller's (weight each moment by how long it lasted).

What a GPU is doing, at any moment, is exactly one of four things, so the
four add up to every GPU of the inventory:

- **allocated** / **unallocated**: held by jobs with minimum runtime > 0 / = 0,
  counted in milli-GPU (a GPU shared 600 + 400 is 0.6 allocated and 0.4
  unallocated), whatever the state of its host;
- **idle**: the rest of a healthy GPU on a host that is `up` (it could take a
  job now);
- **unavailable**: everything else — failed GPUs, and GPUs nobody holds on
  hosts that are cordoned, draining, drained or down.

Hence **healthy** = allocated + unallocated + idle (GPU time that is being
delivered or could be), **availability** = healthy / all and **occupancy** =
(allocated + unallocated) / healthy.

**Fragmentation** counts *free* GPUs only: whole healthy GPUs of `up` hosts
that no job holds, even in part. A `domain` job never mixes GPU types nor
straddles the fast lane, so free GPUs are grouped by (NVLink domain, GPU type,
fast lane). A k-GPU domain job can use the GPUs of any group with at least k
free; the GPUs of smaller groups are **stranded** for k (SkyPilot's example:
12 free in one rack and 8 in another strand all 20 for a 16-GPU job).
stranded(k) = stranded GPUs / free GPUs (0 when nothing is free). The
**largest placeable job** is the largest group: the biggest `domain` job that
could start now without preempting anyone.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from .lifecycle import Cause, StopCause
from .model import UP, WHOLE_GPU_MILLI, Decisions, PendingJob, Preemption, RunningJob, Snapshot, Topology

# Job sizes (GPUs in one NVLink domain) the dashboards and the simulator report stranded(k) for.
FRAGMENTATION_SIZES = (8, 16, 32, 72)

# A domain job's GPUs come from one (domain, GPU type, fast lane) group.
GroupKey = tuple[str, str, bool]


@dataclass(frozen=True)
class Held:
    """Milli-GPU one job holds on one GPU."""

    gpu_id: str
    milli: int
    allocated: bool


def held_by(running: Iterable[RunningJob]) -> list[Held]:
    """What running jobs hold (any state: a job in its grace period still holds its GPUs)."""
    return [Held(gpu_id, job.gpu_milli, job.allocated) for job in running for gpu_id in job.gpu_ids]


@dataclass(frozen=True)
class GpuStates:
    """GPUs by what they do now (fractions in milli precision); the four add up to `total`."""

    total: int
    allocated: float
    unallocated: float
    idle: float

    @property
    def unavailable(self) -> float:
        return max(0.0, self.total - self.allocated - self.unallocated - self.idle)

    @property
    def held(self) -> float:
        return self.allocated + self.unallocated

    @property
    def healthy(self) -> float:
        return self.allocated + self.unallocated + self.idle

    @property
    def availability(self) -> float:
        return ratio(self.healthy, self.total)

    @property
    def occupancy(self) -> float:
        return ratio(self.held, self.healthy)

    @property
    def allocated_occupancy(self) -> float:
        return ratio(self.allocated, self.healthy)

    @property
    def unallocated_occupancy(self) -> float:
        return ratio(self.unallocated, self.healthy)


@dataclass(frozen=True)
class Fragmentation:
    free_gpus: int
    # Job size k -> fraction of free GPUs stranded for a k-GPU domain job.
    stranded: dict[int, float] = field(default_factory=dict)
    largest_placeable: int = 0


@dataclass(frozen=True)
class Measures:
    states: GpuStates
    fragmentation: Fragmentation


def ratio(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def gpu_states(topology: Topology, held: Iterable[Held], *, total_gpus: int) -> GpuStates:
    """GPUs by state. `total_gpus` counts every GPU of the inventory, failed ones included.

    `topology` lists, per host, its healthy GPUs (core `Host.gpus`) and state.
    """
    allocated = unallocated = 0
    used: dict[str, int] = {}
    for item in held:
        milli = min(item.milli, WHOLE_GPU_MILLI)
        if item.allocated:
            allocated += milli
        else:
            unallocated += milli
        used[item.gpu_id] = used.get(item.gpu_id, 0) + milli
    idle = 0
    for host in topology.hosts:
        if host.state != UP:
            continue
        for gpu_id in host.gpus:
            idle += max(0, WHOLE_GPU_MILLI - used.get(gpu_id, 0))
    return GpuStates(
        total=total_gpus, allocated=allocated / WHOLE_GPU_MILLI, unallocated=unallocated / WHOLE_GPU_MILLI,
        idle=idle / WHOLE_GPU_MILLI,
    )


def free_gpus_by_host(topology: Topology, busy: Collection[str]) -> dict[str, int]:
    """Host name -> whole GPUs free: healthy GPUs of an `up` host that no job holds, even in part."""
    busy = busy if isinstance(busy, set | frozenset | dict) else set(busy)
    return {
        host.name: sum(1 for gpu_id in host.gpus if gpu_id not in busy)
        for host in topology.hosts if host.state == UP
    }


def free_groups(topology: Topology, free: Mapping[str, int]) -> dict[GroupKey, int]:
    """(domain, GPU type, fast lane) -> free GPUs, from free GPUs per host (hosts not `up` count none)."""
    domain_of = {name: domain.name for domain in topology.domains for name in domain.hosts}
    groups: dict[GroupKey, int] = {}
    for host in topology.hosts:
        count = min(free.get(host.name, 0), len(host.gpus)) if host.state == UP else 0
        if count > 0:
            key = (domain_of.get(host.name, host.domain), host.gpu_type, host.fast_lane)
            groups[key] = groups.get(key, 0) + count
    return groups


def stranded_gpus(groups: Mapping[GroupKey, int], k: int) -> int:
    """Free GPUs that no k-GPU domain job could use: those of groups with fewer than k free."""
    return sum(count for count in groups.values() if count < k)


def stranded(groups: Mapping[GroupKey, int], k: int) -> float:
    """stranded(k) = stranded GPUs / free GPUs; 0 when nothing is free."""
    return ratio(stranded_gpus(groups, k), sum(groups.values()))


def largest_placeable(groups: Mapping[GroupKey, int]) -> int:
    """GPUs of the largest `domain` job that could start now without preempting: the largest free group."""
    return max(groups.values(), default=0)


def fragmentation(topology: Topology, free: Mapping[str, int],
                  sizes: Iterable[int] = FRAGMENTATION_SIZES) -> Fragmentation:
    groups = free_groups(topology, free)
    return Fragmentation(
        free_gpus=sum(groups.values()),
        stranded={k: stranded(groups, k) for k in sizes},
        largest_placeable=largest_placeable(groups),
    )


def measure(topology: Topology, held: Iterable[Held], *, total_gpus: int,
            sizes: Iterable[int] = FRAGMENTATION_SIZES) -> Measures:
    """Every measure of one moment, from the topology and what jobs hold."""
    held = list(held)
    busy = {item.gpu_id for item in held}
    return Measures(
        states=gpu_states(topology, held, total_gpus=total_gpus),
        fragmentation=fragmentation(topology, free_gpus_by_host(topology, busy), sizes),
    )


@dataclass(frozen=True)
class Demand:
    """Pending jobs and the GPUs they ask for; allocated: minimum runtime > 0."""

    jobs: int = 0
    gpus: int = 0
    allocated_gpus: int = 0

    @property
    def unallocated_gpus(self) -> int:
        return self.gpus - self.allocated_gpus


def pending_demand(jobs: Iterable[PendingJob]) -> Demand:
    return demand((job.gpus, job.min_runtime > 0) for job in jobs)


def demand(asks: Iterable[tuple[int, bool]]) -> Demand:
    """The demand of jobs asking (GPUs, allocated?)."""
    jobs = gpus = allocated = 0
    for count, is_allocated in asks:
        jobs += 1
        gpus += count
        allocated += count if is_allocated else 0
    return Demand(jobs, gpus, allocated)


@dataclass(frozen=True)
class Sample:
    """A cluster at one moment as the dashboard's history keeps it: its measures, the queue, the live jobs."""

    measures: Measures
    pending: Demand
    running_jobs: int


def sample_after(snapshot: Snapshot, applied: Decisions, *, total_gpus: int) -> Sample:
    """The cluster of `snapshot` once `applied` (the decisions the caller made stick) took effect.

    `applied` holds decisions of a tick on this snapshot (starts of its
    pending jobs, preemptions of its running ones). A started job holds the
    GPUs it started on; a job whose host is down is gone (back in the queue
    if it requeues); other preempted jobs still hold their GPUs through their
    grace period. A drain that is done and a MIG layout change no measure (a
    draining host takes no job, nor does a drained one). `total_gpus` counts
    every GPU of the inventory, failed ones included (the snapshot has only
    healthy ones). Costs GPUs + jobs.
    """
    pending = {job.id: job for job in snapshot.pending}
    running = {job.id: job for job in snapshot.running}
    requeued = []
    for preemption in applied.preemptions:
        if _lost(preemption):
            job = running.pop(preemption.job_id)
            if preemption.requeue:
                requeued.append((len(job.gpu_ids), job.min_runtime > 0))
    held = held_by(running.values())
    for start in applied.starts:
        job = pending.pop(start.job_id)
        held.extend(Held(gpu_id, start.gpu_milli, job.min_runtime > 0) for gpu_id in start.gpu_ids)
    asks = [(job.gpus, job.min_runtime > 0) for job in pending.values()] + requeued
    return Sample(measure(snapshot.topology, held, total_gpus=total_gpus), demand(asks),
                  running_after(snapshot, applied))


def running_after(snapshot: Snapshot, applied: Decisions) -> int:
    """Live jobs once `applied` took effect: the snapshot's and those started, less those lost with their host."""
    return len(snapshot.running) + len(applied.starts) - sum(1 for preemption in applied.preemptions
                                                             if _lost(preemption))


def _lost(preemption: Preemption) -> bool:
    """Its host is down: the run ends now (the others stop after their grace period, holding their GPUs)."""
    return StopCause.parse(preemption.cause).kind is Cause.DOWN


class TimeAverage:
    """Time-weighted mean of a measure observed at moments, each value holding until the next.

    The simulator's `stranded` and occupancy summaries are averages of this
    kind: `observe(t, value)` at every change, `mean(end)` at the end.
    """

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None
        self._weighted = 0.0
        self._seconds = 0.0

    def observe(self, at: float, value: float) -> None:
        if self._last is not None:
            since, previous = self._last
            if at < since:
                raise ValueError(f"observations go forward in time: {at} < {since}")
            self._weighted += previous * (at - since)
            self._seconds += at - since
        self._last = (at, value)

    def mean(self, until: float) -> float:
        weighted, seconds = self._weighted, self._seconds
        if self._last is not None and until > self._last[0]:
            weighted += self._last[1] * (until - self._last[0])
            seconds += until - self._last[0]
        if seconds > 0:
            return weighted / seconds
        return self._last[1] if self._last is not None else 0.0


# ---------------------------------------------------------------- preemptions that paid (issue 18)


@dataclass(frozen=True)
class WastedPreemptions:
    """Preemptions on behalf of a job, judged: `wasted` of `judged`; `undecided` ones are not judged yet."""

    wasted: int = 0
    judged: int = 0
    undecided: int = 0

    @property
    def share(self) -> float:
        return self.wasted / self.judged if self.judged else 0.0


def wasted_preemptions(preemptions: Iterable[tuple[float, str, float]], starts: Mapping[str, list[float]], *,
                       tick: float, end: float) -> WastedPreemptions:
    """Preemptions after which the job they were for did not start within the plan's grace + two ticks.

    `preemptions` are (when, the job preempted for, the victim's grace period), one per victim; `starts` each
    such job's start times, sorted. A plan's grace is the longest of the victims it preempted for the same job
    at the same moment (the job starts when the last of them has left). A preemption whose job did not start
    by its deadline is wasted once the deadline has passed (`end`: the end of the run, or now), else undecided.
    The simulator's summary and the cluster dashboard both measure it here.
    """
    preemptions = list(preemptions)
    plan_grace: dict[tuple[float, str], float] = {}
    for when, preemptor, grace in preemptions:
        plan_grace[(when, preemptor)] = max(grace, plan_grace.get((when, preemptor), 0.0))
    wasted = judged = undecided = 0
    for when, preemptor, _grace in preemptions:
        deadline = when + plan_grace[(when, preemptor)] + 2 * tick
        times = starts.get(preemptor, ())
        i = bisect_left(times, when)
        if i < len(times) and times[i] <= deadline + 1e-9:
            judged += 1
        elif deadline > end:
            undecided += 1
        else:
            judged += 1
            wasted += 1
    return WastedPreemptions(wasted, judged, undecided)

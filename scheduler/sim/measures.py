"""DESIGN §5 measures over a simulated run, kept up to date event by event.

The definitions are `scheduler.core.measures` (the one the dashboards use);
this module integrates them over time without recomputing a whole cluster
at every event:

- **availability, occupancy** (allocated / unallocated): the four GPU states
  of `core.measures.gpu_states` are levels that change only when a job
  starts or leaves or a host changes state; their time integrals give the
  run's figures (GPU-seconds held / healthy GPU-seconds).
- **stranded(k)**: free whole GPUs per (domain, GPU type, fast lane) group,
  as `core.measures.free_groups`; the stranded count for each k is updated
  when one group's free count changes (a group with fewer than k free
  strands them all), and the ratio is averaged over time as
  `core.measures.TimeAverage` does. Tests check both against the core
  functions on the same states.
- **owed and delivered** (Ai2's measure): per project with an allocation and
  per hour, `owed = min(entitled GPUs, allocated GPU demand)` where both are
  that hour's time averages (entitled = share of the cluster × healthy GPUs
  of hosts that are up, the core's entitlement; demand = GPUs of the
  project's allocated jobs pending or running); `used` = allocated
  GPU-seconds held. Per project `delivered = min(1, Σ used / Σ owed)` over
  the run; overall = Σ min(used, owed) / Σ owed (the owed-weighted mean of
  the per-project figures); worst = the lowest project's.
- **waits** by class: *debug* (allocated, minimum runtime ≤ 15 min, ≤ 8
  GPUs), *large* (≥ 72 GPUs, one NVL72 domain), *other*; nearest-rank
  percentiles. Jobs still waiting at the end count with their wait so far
  (a lower bound), so a policy cannot look good by never starting a job.
- **preemptions** (`preempt` events other than a job's own maximum runtime)
  and **lost work** (GPU-hours since the last checkpoint; since the start
  for jobs that keep nothing: non-resumable ones).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from scheduler.core.fairshare import share_of_cluster
from scheduler.core.measures import FRAGMENTATION_SIZES
from scheduler.core.model import UP, WHOLE_GPU_MILLI, Topology

HOUR = 3600.0
DEBUG_MAX_MIN_RUNTIME = 15 * 60
DEBUG_MAX_GPUS = 8
LARGE_GPUS = 72
CLASSES = ("debug", "large", "other")


def job_class(gpus: int, min_runtime: float) -> str:
    """debug, large or other (DESIGN §5); unallocated jobs are never debug (they wait for idle GPUs)."""
    if gpus >= LARGE_GPUS:
        return "large"
    if 0 < min_runtime <= DEBUG_MAX_MIN_RUNTIME and gpus <= DEBUG_MAX_GPUS:
        return "debug"
    return "other"


def percentile(values: list[float], p: float) -> float | None:
    """Nearest rank: the smallest value with at least p % of the values at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def wait_summary(values: list[float]) -> dict:
    return {f"p{p}": percentile(values, p) for p in (50, 90, 99)} | {"count": len(values)}


class Hourly:
    """Time integrals of piecewise-constant levels, per hour bucket and in total."""

    __slots__ = ("levels", "since", "buckets", "totals")

    def __init__(self, levels: int, start: float = 0.0):
        self.levels = [0.0] * levels
        self.since = start
        # hour index -> integrals of each level over that hour
        self.buckets: dict[int, list[float]] = {}
        self.totals = [0.0] * levels

    def advance(self, now: float) -> None:
        since = self.since
        if now <= since:
            return
        levels = self.levels
        if any(levels):
            for i, level in enumerate(levels):
                self.totals[i] += level * (now - since)
            t = since
            while t < now:
                hour = int(t // HOUR)
                end = min(now, (hour + 1) * HOUR)
                bucket = self.buckets.get(hour)
                if bucket is None:
                    bucket = self.buckets[hour] = [0.0] * len(levels)
                for i, level in enumerate(levels):
                    if level:
                        bucket[i] += level * (end - t)
                t = end
        self.since = now


class Tracker:
    """The levels of one simulated cluster and their integrals."""

    def __init__(self, topology: Topology, *, total_gpus: int, shares: dict[str, float], start: float = 0.0,
                 sizes: Iterable[int] = FRAGMENTATION_SIZES):
        self.start = start
        self.now = start
        self.total_gpus = total_gpus
        self.sizes = tuple(sizes)
        self.shares = dict(shares)  # project -> share of the cluster (0..1), allocated projects only
        self.host_state: dict[str, str] = {}
        self.host_gpus: dict[str, int] = {}
        self.host_group: dict[str, tuple] = {}
        # GPU id -> milli held on it (only GPUs held at all).
        self.gpu_used: dict[str, int] = {}
        self.host_busy: dict[str, int] = {}  # GPUs with anything held, per host
        self.host_held_milli: dict[str, int] = {}
        self.group_free: dict[tuple, int] = {}
        self.stranded_gpus = {k: 0 for k in self.sizes}
        self.free_gpus = 0
        # Free whole GPUs outside / inside the fast lane; GPUs shared by fractions with room left.
        self.free_by_lane = {False: 0, True: 0}
        self.partial_gpus = 0
        # Levels: 0 allocated, 1 unallocated, 2 idle (GPUs, milli precision), 3 healthy of up hosts (the
        # entitlement basis), 4 demand (GPUs asked by pending + running jobs), 5.. stranded(k) ratios.
        self.cluster = Hourly(5 + len(self.sizes), start)
        self.allocated_milli = 0
        self.unallocated_milli = 0
        self.up_capacity = 0  # GPUs of up hosts
        self.held_on_up_milli = 0
        self.demand = 0.0
        # Per project: 0 used (allocated GPUs held), 1 allocated demand (pending + running).
        self.projects: dict[str, Hourly] = {}
        for host in topology.hosts:
            self.host_state[host.name] = host.state
            self.host_gpus[host.name] = len(host.gpus)
            self.host_group[host.name] = (host.domain, host.gpu_type, host.fast_lane)
            self.host_busy[host.name] = 0
            self.host_held_milli[host.name] = 0
            if host.state == UP:
                self.up_capacity += len(host.gpus)
                self._set_free(host.name, 0, len(host.gpus))
        self._update_cluster_levels()

    # ------------------------------------------------------------ levels

    def _project(self, name: str) -> Hourly:
        hourly = self.projects.get(name)
        if hourly is None:
            hourly = self.projects[name] = Hourly(2, self.start)
        return hourly

    def _set_free(self, host: str, before: int, after: int) -> None:
        if before == after:
            return
        key = self.host_group[host]
        old = self.group_free.get(key, 0)
        new = old + after - before
        self.group_free[key] = new
        self.free_gpus += after - before
        self.free_by_lane[key[2]] += after - before
        for k in self.sizes:
            if old < k:
                self.stranded_gpus[k] -= old
            if new < k:
                self.stranded_gpus[k] += new

    def _free_of(self, host: str) -> int:
        return self.host_gpus[host] - self.host_busy[host] if self.host_state[host] == UP else 0

    def _update_cluster_levels(self) -> None:
        levels = self.cluster.levels
        levels[0] = self.allocated_milli / WHOLE_GPU_MILLI
        levels[1] = self.unallocated_milli / WHOLE_GPU_MILLI
        levels[2] = self.up_capacity - self.held_on_up_milli / WHOLE_GPU_MILLI
        levels[3] = self.up_capacity
        levels[4] = self.demand
        free = self.free_gpus
        for i, k in enumerate(self.sizes):
            levels[5 + i] = self.stranded_gpus[k] / free if free > 0 else 0.0

    def advance(self, now: float) -> None:
        """Integrate the levels up to `now` (call before changing them)."""
        if now > self.now:
            self.cluster.advance(now)
            self.now = now

    # ------------------------------------------------------------ changes

    def hold(self, gpu_ids: tuple[str, ...], milli: int, allocated: bool, gpu_host: dict[str, str],
             sign: int = 1) -> None:
        """A job takes (sign 1) or gives back (sign -1) its GPUs."""
        for gpu in gpu_ids:
            host = gpu_host[gpu]
            used = self.gpu_used.get(gpu, 0)
            after = used + sign * milli
            if after:
                self.gpu_used[gpu] = after
            else:
                del self.gpu_used[gpu]
            if (0 < used < WHOLE_GPU_MILLI) != (0 < after < WHOLE_GPU_MILLI):
                self.partial_gpus += 1 if 0 < after < WHOLE_GPU_MILLI else -1
            if (used == 0) != (after == 0):
                before_free = self._free_of(host)
                self.host_busy[host] += 1 if after else -1
                self._set_free(host, before_free, self._free_of(host))
            self.host_held_milli[host] += sign * milli
            if self.host_state[host] == UP:
                self.held_on_up_milli += sign * milli
        if allocated:
            self.allocated_milli += sign * milli * len(gpu_ids)
        else:
            self.unallocated_milli += sign * milli * len(gpu_ids)
        self._update_cluster_levels()

    def project_level(self, project: str, *, used: float = 0.0, demand: float = 0.0) -> None:
        """Change a project's allocated GPUs held (`used`) or asked (`demand`) by a delta."""
        hourly = self._project(project)
        hourly.advance(self.now)
        hourly.levels[0] += used
        hourly.levels[1] += demand

    def total_demand(self, delta: float) -> None:
        self.demand += delta
        self._update_cluster_levels()

    def host_changed(self, host: str, state: str) -> None:
        before = self.host_state[host]
        if before == state:
            return
        before_free = self._free_of(host)
        if before == UP:
            self.up_capacity -= self.host_gpus[host]
            self.held_on_up_milli -= self.host_held_milli[host]
        self.host_state[host] = state
        if state == UP:
            self.up_capacity += self.host_gpus[host]
            self.held_on_up_milli += self.host_held_milli[host]
        self._set_free(host, before_free, self._free_of(host))
        self._update_cluster_levels()

    # ------------------------------------------------------------ results

    def finish(self, end: float) -> None:
        self.advance(end)
        for hourly in self.projects.values():
            hourly.advance(end)

    def gpu_seconds(self) -> dict[str, float]:
        totals = self.cluster.totals
        return {"allocated": totals[0], "unallocated": totals[1], "idle": totals[2], "up": totals[3],
                "demand": totals[4]}

    def stranded(self, elapsed: float) -> dict[str, float]:
        totals = self.cluster.totals
        return {str(k): (totals[5 + i] / elapsed if elapsed > 0 else 0.0) for i, k in enumerate(self.sizes)}

    def owed_delivered(self) -> dict:
        """Ai2's measure per project with an allocation, overall and worst (see the module docstring)."""
        cluster_hours = self.cluster.buckets
        per_project: dict[str, float | None] = {}
        owed_total = 0.0
        delivered_total = 0.0
        detail: dict[str, dict] = {}
        for project in sorted(self.shares):
            share = self.shares[project]
            hourly = self.projects.get(project)
            owed = used = 0.0
            if hourly is not None:
                for hour, (used_seconds, demand_seconds) in hourly.buckets.items():
                    up_seconds = cluster_hours.get(hour, (0, 0, 0, 0))[3]
                    owed += min(share * up_seconds, demand_seconds)
                    used += used_seconds
            detail[project] = {"owed_gpu_hours": owed / HOUR, "used_gpu_hours": used / HOUR}
            if owed <= 0:
                per_project[project] = None
                continue
            per_project[project] = min(1.0, used / owed)
            owed_total += owed
            delivered_total += min(used, owed)
        measured = [value for value in per_project.values() if value is not None]
        return {
            "overall": delivered_total / owed_total if owed_total > 0 else None,
            "worst": min(measured) if measured else None,
            "worst_project": min((v, p) for p, v in per_project.items() if v is not None)[1] if measured else None,
            "per_project": per_project,
            "gpu_hours": detail,
        }

    def used_by_project(self) -> dict[str, float]:
        """Allocated GPU-seconds each project held over the run (after `finish`)."""
        return {name: hourly.totals[0] for name, hourly in sorted(self.projects.items())}

    def hourly_series(self) -> dict[str, list]:
        """Per-hour averages for the report: GPUs by state, stranded(k), per-project use and entitlement."""
        hours = sorted(self.cluster.buckets)
        if not hours:
            return {"hours": []}
        span = range(hours[0], hours[-1] + 1)
        empty = [0.0] * len(self.cluster.levels)
        rows = [self.cluster.buckets.get(h, empty) for h in span]
        lengths = [max(1e-9, min(self.now, (h + 1) * HOUR) - max(self.start, h * HOUR)) for h in span]
        series = {
            "hours": [h for h in span],
            "allocated": [r[0] / n for r, n in zip(rows, lengths, strict=True)],
            "unallocated": [r[1] / n for r, n in zip(rows, lengths, strict=True)],
            "idle": [r[2] / n for r, n in zip(rows, lengths, strict=True)],
            "up": [r[3] / n for r, n in zip(rows, lengths, strict=True)],
            "demand": [r[4] / n for r, n in zip(rows, lengths, strict=True)],
            "stranded": {str(k): [r[5 + i] / n for r, n in zip(rows, lengths, strict=True)]
                         for i, k in enumerate(self.sizes)},
            "projects": {},
        }
        for project in sorted(self.projects):
            hourly = self.projects[project]
            share = self.shares.get(project, 0.0)
            series["projects"][project] = {
                "used": [hourly.buckets.get(h, (0.0, 0.0))[0] / n for h, n in zip(span, lengths, strict=True)],
                "entitled": [share * r[3] / n for r, n in zip(rows, lengths, strict=True)],
                "demand": [hourly.buckets.get(h, (0.0, 0.0))[1] / n for h, n in zip(span, lengths, strict=True)],
            }
        return series


def unit_measures(units: Iterable, *, used: dict[str, float], waits: dict[str, list[float]],
                  healthy_gpu_seconds: float) -> dict[str, dict]:
    """Per unit of the org tree over a run (the budget what-if): its projects' figures pooled up the tree.

    `units` are core `Unit`s (name, parent, share in % of the parent); `used` is allocated GPU-seconds per
    project (`Tracker.used_by_project`); `waits` the waits of each project's jobs; `healthy_gpu_seconds`
    the run's healthy GPU-seconds (`Tracker.gpu_seconds()["up"]`). A unit is entitled to its share of the
    cluster (the product of the shares down its path, as the core computes it) × those GPU-seconds, and its
    usage ratio is what its projects used / that (None when entitled to nothing). Waits: nearest-rank p50
    and p90 over its projects' jobs (None without jobs).
    """
    units = tuple(units)
    parent = {unit.name: unit.parent for unit in units}
    fractions = share_of_cluster(units)
    totals = {unit.name: 0.0 for unit in units}
    pooled: dict[str, list[float]] = {unit.name: [] for unit in units}
    for project in sorted(set(used) | set(waits)):
        node = project
        while node is not None and node in totals:
            totals[node] += used.get(project, 0.0)
            pooled[node].extend(waits.get(project, ()))
            node = parent[node]
    measures = {}
    for unit in units:
        entitled = fractions[unit.name] * healthy_gpu_seconds
        measures[unit.name] = {
            "share_of_cluster": fractions[unit.name],
            "entitled_gpu_hours": entitled / HOUR,
            "used_gpu_hours": totals[unit.name] / HOUR,
            "usage_ratio": totals[unit.name] / entitled if entitled > 0 else None,
            "jobs": len(pooled[unit.name]),
            "wait_p50": percentile(pooled[unit.name], 50),
            "wait_p90": percentile(pooled[unit.name], 90),
        }
    return measures

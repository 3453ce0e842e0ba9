"""Rule 5: where and when a job that can't start now could start earliest.

A running job gives its GPUs back to the waiting job when it could be made to
leave: unallocated jobs now, allocated jobs of units rule 4 lets it take from
when their protection ends, any job at its maximum runtime; plus the grace
period. Jobs of units less served than the waiting one's (or of its own
project) with no maximum runtime never give them back: they are entitled to
keep them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from .capacity import NOTHING, Capacity, HostState, Release
from .fairshare import UnitNode, UnitTree, may_take_from, may_take_on_own_path
from .model import (
    DOMAIN,
    PREEMPTING,
    Policy,
    RunningJob,
    checkpoint_window,
    protected_until,
    shielded_until,
    waits_for_checkpoints,
)
from .placement import HostFilter, JobRequest, plan_across_groups, plan_in_group, pools_for, room


def grace_for(job: RunningJob, policy: Policy) -> float:
    """SIGTERM to SIGKILL for this job: unallocated jobs were promised nothing and get the shorter one."""
    return grace_period_for(job.allocated, policy)


def grace_period_for(allocated: bool, policy: Policy) -> float:
    """`grace_for` of a job by whether it is allocated (minimum runtime > 0)."""
    return policy.grace_period if allocated else policy.unallocated_grace


# Leaving job id -> host name -> how many of its GPUs there are claimed by other jobs (rule 4's earmarks).
Claimed = dict[str, dict[str, int]]


@dataclass(frozen=True)
class Outlook:
    """The earliest start a job could have, and on which hosts."""

    start: float
    domain: str  # empty when the hosts span several domains
    hosts: tuple[str, ...]


class GainerLeaves(NamedTuple):
    """When running jobs would give their GPUs to one waiting job (`LeaveTimes.for_gainer`)."""

    # Job -> when it would give them (inf: never).
    time: Callable[[RunningJob], float]
    # Job -> does it never give them? Told without working out when (where it does, `time` is inf).
    never: Callable[[RunningJob], bool]


class LeaveTimes:
    """When each running job would give its GPUs to a given waiting job."""

    def __init__(self, tree: UnitTree, leaving: dict[str, float], now: float, policy: Policy, capacity: Capacity,
                 ends: dict | None = None):
        # `ends`: job id -> (job, protected until, shielded until) as a kept state has them (`run_ends`).
        self.tree = tree
        self.leaving = leaving
        self.now = now
        self.policy = policy
        self.ends = ends or {}
        self.capacity = capacity
        # Did a leave time wait for a job's checkpoint (`model.checkpoint_window`)? (`quiet.py`)
        self.windowed = False
        # The jobs whose leave time read their checkpoints (`quiet.py`: only their windows move a sweep).
        self.read_windows: set[str] = set()

    def for_gainer(self, gainer: UnitNode, charge: float, whole_domain: bool = False,
                   one_host: bool = False) -> GainerLeaves:
        """Leave times for a job of `gainer` charged `charge`; one that needs a whole NVLink domain may take jobs
        once their protection ends, any other job once their shield does (`model.shield`) and, where
        `model.waits_for_checkpoints` says so (`one_host`: the job fits on one host), when its declared checkpoints
        let it (`model.checkpoint_window`). For one search: the times are kept, so nothing they depend on may
        change while it is used."""
        may: dict[str, bool] = {}
        until = protected_until if whole_domain else shielded_until
        # Which of the kept ends applies: protection for a whole-domain job, the shield for any other.
        end = 1 if whole_domain else 2
        # Each job's, once per search (the sweeps of one `earliest_start` meet a job on each of its hosts).
        known: dict[str, float] = {}
        leaving, ends, now, policy = self.leaving, self.ends, self.now, self.policy
        # An allocated and an unallocated job's grace periods (`grace_period_for`), once per search.
        graces = {allocated: grace_period_for(allocated, policy) for allocated in (True, False)}

        def may_take(project: str) -> bool:
            taking = may.get(project)
            if taking is None:
                loser = self.tree.nodes[project]
                taking = may[project] = (may_take_from(gainer, loser, charge) is not None
                                         or whole_domain and may_take_on_own_path(gainer, loser, charge) is not None)
            return taking

        def never(job: RunningJob) -> bool:
            # An allocated job of a unit it may not take from, with no maximum runtime, neither leaving nor stopping.
            return (job.min_runtime > 0 and job.max_runtime is None and job.state != PREEMPTING
                    and job.id not in leaving and not may_take(job.project))

        def leave_time(job: RunningJob) -> float:
            when = known.get(job.id)
            if when is None:
                when = known[job.id] = _leave_time(job)
            return when

        def _leave_time(job: RunningJob) -> float:
            if never(job):
                return math.inf
            if job.id in leaving:
                return leaving[job.id]
            if job.state == PREEMPTING:
                return now if job.grace_ends is None else job.grace_ends
            allocated = job.min_runtime > 0
            if not allocated:
                could_go = now
            else:
                if may_take(job.project):
                    kept = ends.get(job.id)
                    could_go = max(now, kept[end] if kept is not None and kept[0] is job else until(job, policy))
                    if not whole_domain:
                        self.read_windows.add(job.id)
                        opens = checkpoint_window(job, could_go, graces[True], policy)
                        if opens > could_go and waits_for_checkpoints(one_host, whole_domain,
                                                                      self.capacity.holds_whole_hosts(job)):
                            could_go = opens
                            self.windowed = True
                else:
                    could_go = math.inf
            if job.max_runtime is not None:
                could_go = min(could_go, max(now, job.start_time + job.max_runtime))
            return could_go + graces[allocated]

        return GainerLeaves(leave_time, never)


def _sweep(hosts: list[HostState], req: JobRequest, capacity: Capacity, leaves: GainerLeaves,
           fits: Callable[[dict[str, Release]], bool], until: float, free: int | None = None,
           claimed: Claimed | None = None) -> float:
    """Earliest time, up to `until`, at which `fits(extra)` holds as the hosts' jobs leave (inf: none).

    `free`: the hosts' free GPUs, when the caller knows them (its groups' counts); a job with no claim has no
    earmarked GPU to add. `claimed`: what leaving jobs give to other jobs' claims, which this job never gets.
    """
    if free is None or req.earmarked:
        available = sum(len(h.free) + len(h.earmarked.get(req.job_id, ())) for h in hosts)
    else:
        available = free
    extra: dict[str, Release] = {}
    if available >= req.gpus and fits(extra):
        return -math.inf
    # The jobs here, each once; first, what all of them but those that never leave (`leaves.never`) could give
    # back at most (a job gives back at most the GPUs it holds). Where even that is not enough, no leave time is
    # worked out.
    met: dict[str, RunningJob] = {}
    reach = available
    never = leaves.never
    for host in hosts:
        for job in host.jobs:
            if job.id not in met:
                met[job.id] = job
                if not never(job):
                    reach += len(job.gpu_ids)
    if reach < req.gpus:
        return math.inf
    # Jobs leaving after `until` are never reached: they are not sorted either. Nor are jobs that never leave
    # (inf): reaching one could only give inf, what the sweep returns when it reaches none.
    leave_time = leaves.time
    events: list[tuple[float, RunningJob]] = []
    reach = available
    for job in met.values():
        when = leave_time(job)
        if when <= until and when < math.inf:
            events.append((when, job))
            reach += len(job.gpu_ids)
    if reach < req.gpus:
        # Not enough even with every job leaving by `until`: nothing below could reach `fits`.
        return math.inf
    names = {h.name for h in hosts}
    # What the jobs met so far give back is added to `extra` only once enough GPUs are free for `fits` to be
    # asked (until then it could not hold): the sums are the same whenever it is asked, with less adding.
    unadded: list[dict[str, Release]] = []
    for when, job in sorted(events, key=lambda e: (e[0], e[1].seq, e[1].id)):
        releases = capacity.releases(job)
        held = claimed.get(job.id) if claimed else None
        if held:
            # What goes to another job's claim never comes to this one (a new dict: `releases` is kept). A shared
            # GPU a fraction gives back counts no whole GPU to begin with.
            releases = {name: release._replace(gpus=release.gpus - min(held[name], release.gpus))
                        if name in held else release for name, release in releases.items()}
        unadded.append(releases)
        for name, release in releases.items():
            if name in names:
                available += release.gpus
        if available >= req.gpus:
            for given in unadded:
                for name, release in given.items():
                    if name in names:
                        extra[name] = extra.get(name, NOTHING) + release
            unadded.clear()
            if fits(extra):
                return when
    return math.inf


def earliest_start(req: JobRequest, capacity: Capacity, leaves: GainerLeaves, host_ok: HostFilter,
                   now: float, claimed: Claimed | None = None) -> Outlook | None:
    """Where the job could start earliest, counting only GPUs it could be given: not those a leaving job
    gives to another job's claim (`claimed`, rule 4's earmarks).

    Scopes with the most free GPUs are tried first, so that the best time
    found early cuts the sweeps of the others short.
    """
    best: tuple[float, str, str, tuple[str, ...]] | None = None

    def until() -> float:
        return math.inf if best is None else best[0]

    def consider(when: float, order: str, domain: str, hosts: Iterable[str]) -> None:
        nonlocal best
        when = max(when, now)
        if when < math.inf and (best is None or (when, order) < best[:2]):
            best = (when, order, domain, tuple(sorted(hosts)))

    for pools in pools_for(req, capacity):
        for pool in pools:
            groups = sorted(pool.groups.values(), key=lambda g: (-g.free, g.domain))
            if req.shared or req.single_host(pool):
                hosts = [h for g in groups for h in g.hosts if host_ok(h) and h.gpu_count >= req.gpus]
                for host in sorted(hosts, key=lambda h: (-len(h.free), h.name)):
                    when = _sweep([host], req, capacity, leaves,
                                  lambda extra, h=host: room(h, req, extra.get(h.name, NOTHING)) >= req.gpus, until(),
                                  claimed=claimed)
                    consider(when, host.name, host.domain, [host.name])
                continue
            if req.per_host is not None and req.gpus % req.per_host:
                continue
            fitting = [g for g in groups if g.capacity >= req.gpus]
            for group in fitting:
                plan: list = []

                def fits(extra, g=group, plan=plan):
                    found = plan_in_group(g, req, req.gpus, host_ok, extra)
                    if found is not None:
                        plan[:] = found
                    return found is not None

                when = _sweep(group.hosts, req, capacity, leaves, fits, until(), group.free, claimed)
                consider(when, group.domain, group.domain, [h.name for h, _ in plan])
            if not fitting and req.topology != DOMAIN:
                plan = []

                def fits_across(extra, plan=plan, groups=groups):
                    found = plan_across_groups(groups, req, host_ok, extra)
                    if found is not None:
                        plan[:] = found
                    return found is not None

                hosts = [h for g in groups for h in g.hosts]
                when = _sweep(hosts, req, capacity, leaves, fits_across, until(), sum(g.free for g in groups),
                              claimed)
                domains = {capacity.hosts[h.name].domain for h, _ in plan}
                consider(when, pool.gpu_type, domains.pop() if len(domains) == 1 else "", [h.name for h, _ in plan])
    if best is None:
        return None
    return Outlook(start=best[0], domain=best[2], hosts=best[3])

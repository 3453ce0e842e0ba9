"""`schedule()`: one tick of the scheduler, in numbered phases (DESIGN §3).

The phases share a `Cycle`: the tick's working capacity (the statement later
jobs see earlier decisions on), the org tree with this tick's charges, the
victims still available, and what happened to every pending job so far.

Searching is bounded (DESIGN §6b). Capacity and victims only shrink while a
tick decides, so a failure stands for the rest of it: a class of job that
did not fit, or found nothing to preempt, is not searched again for a job
of that class as big or bigger; jobs asking the same thing then wait by a
lookup; and once nothing is free, nothing can be preempted and no job is owed
GPUs, the rest of the order only gets its reasons. Jobs that wait alike share
one `Wait`, so a reason is written once per kind of waiting job.
"""

from __future__ import annotations

import gc
import math
from bisect import bisect_left, insort
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from itertools import accumulate
from operator import attrgetter

from . import mig as mig_geometry
from . import reasons
from .capacity import Capacity, HostState
from .defrag import DefragPlan, migrations_left, plan_defrag
from .drains import drain_progress, jobs_leaving
from .earmarks import check_claims
from .fairshare import FairShareWalk, UnitNode, UnitTree, explain_order, gpu_amount, sides_at_common_ancestor
from .lifecycle import Cause, StopCause
from .model import (
    ANY,
    DOMAIN,
    PREEMPTING,
    RUNNING,
    UP,
    WHOLE_GPU_MILLI,
    Decisions,
    EarmarkDrop,
    MigLayout,
    PendingJob,
    PendingStatus,
    Policy,
    Preemption,
    QueueStep,
    Reservation,
    RunningJob,
    Snapshot,
    Start,
    backed_off_until,
    in_seq_order,
    protected_until,
    shield,
)
from .placement import (
    NEW_INSTANCE,
    NEW_LAYOUT,
    HostFilter,
    JobRequest,
    Placement,
    find_placement,
    lanes,
    pools_for,
    pools_in,
    protected_for,
)
from .preemption import VictimPlan, Victims
from .reservation import LeaveTimes, earliest_start, grace_for
from .state import ClusterState, running_from

# Rule 6: an unallocated start is charged this many seconds of its GPUs to its
# units' unallocated usage for the rest of the tick, so one tick interleaves
# projects' unallocated jobs as rule 2 does allocated ones.
UNALLOCATED_CHARGE_SECONDS = 3600.0


def schedule(snapshot: Snapshot, *, now: float, policy: Policy) -> Decisions:
    """Decide one tick for `snapshot` at time `now`. Pure: same input, same output."""
    return decide(ClusterState.from_snapshot(snapshot), now=now, policy=policy, commit=False)


def decide(state: ClusterState, *, now: float, policy: Policy, commit: bool = True) -> Decisions:
    """Decide one tick on a kept state; with `commit`, its starts, preemptions and claims become the state."""
    with collector_paused():
        return _decide(state, now, policy, commit)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a tick, as `timeit` does.

    A tick makes many short-lived objects, none in cycles; the collector's
    passes over a large snapshot would cost a third of the tick and free
    nothing. It is resumed on the way out if it was running.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _decide(state: ClusterState, now: float, policy: Policy, commit: bool) -> Decisions:
    capacity = state.capacity
    # 0. Claims on GPUs from earlier preemptions that no longer hold are dropped, with the reason (rule 4).
    earmark_drops = check_claims(state.claimants.values(), capacity, now=now, policy=policy)
    for drop in earmark_drops:
        state.update_pending(replace(state.pending[drop.job_id], earmarked_gpus=()))
    running = tuple(state.running.values())
    # The same jobs in (seq, id) order, as the walks over them take them (kept by the state, not sorted again).
    ordered = state.running_in_order()

    # 1. Working capacity (the claims held as of now), the org tree and usage over the window (rule 1).
    capacity.apply_claims(tuple(state.claimants.values()), tuple(state.stopping.values()), now)
    capacity.prepare_tick(running, state.pending.values(), state.mig_demand())
    tree = state.usage_tree(now, policy.window)
    unit_ratios = tree.ratios()

    # 2. Jobs that leave whatever waits: down hosts, maximum runtimes, drains (rule 7).
    forced, leave_at = jobs_leaving(ordered, capacity, now=now, policy=policy)
    cycle = Cycle(ordered, state.claimants, state.recent_defrag_migrations(now), capacity, tree, leave_at, now,
                  policy, earmark_drops)
    try:
        # 3. Allocated jobs in fair-share order: start, preempt, reserve, defragment (rules 2-5).
        cycle.allocated_jobs(state.queues[True])

        # 4. Unallocated jobs fill what is left, in fair-share order of free time (rule 6).
        cycle.unallocated_jobs(state.queues[False])

        # 5. Every job still pending: its reason, position and estimated start (rule 8), and why each project
        #    stands where it does in the order, unless not asked for.
        pending = cycle.statuses(unit_ratios) if policy.explain else {}

        # 6. Drains that are done, and the progress of the others.
        host_changes = drain_progress(capacity, cycle.leave_at, now=now, policy=policy)
    finally:
        # The tick's working marks go; what it decided stays (a kept state commits it below).
        cycle.release_reservations()
        capacity.clear_claims()
        cycle.carry()

    decisions = Decisions(
        starts=tuple(cycle.starts),
        preemptions=tuple(forced + cycle.preemptions),
        reservations=tuple(cycle.reservations),
        pending=pending,
        host_changes=tuple(host_changes),
        unit_ratios=unit_ratios,
        mig_layouts=tuple(cycle.mig_layouts.values()),
        earmarks=cycle.earmarks(),
        earmark_drops=tuple(cycle.earmark_drops),
        queue_order=cycle.queue_order,
    )
    if commit:
        state.commit(decisions, cycle.started_runs, now)
        state.held_back = bool(cycle.held_back())
        state.scoped = bool(cycle.scoped())
    return decisions


# What happened to a job that did not start.
NEVER = "never"  # no healthy capacity could ever hold it
NO_ROOM = "no_room"  # nothing fits now, nothing it may preempt
RESERVED = "reserved"
BACKING_OFF = "backing_off"  # an unallocated job preempted lately: may not start again yet (`backoff`)
ENTITLED = "entitled"  # every domain that could hold it is kept by less-served units
PREEMPTING_FOR = "preempting"
VICTIMS_LEAVING = "victims_leaving"
DEFRAGMENTING = "defragmenting"


@dataclass(frozen=True, eq=False)
class Wait:
    """What happened to a job that did not start.

    Jobs that wait alike (same project, kind, GPU count and reservations they
    may start under) share one `Wait`, so their reason is written once.
    """

    kind: str
    detail: str = ""
    ready_at: float | None = None


class Cycle:
    """The state one tick decides on; see the module docstring."""

    def __init__(self, running: tuple[RunningJob, ...], claimants: dict[str, PendingJob],
                 recent_defrag_migrations: tuple[float, ...], capacity: Capacity, tree: UnitTree,
                 leave_at: dict[str, float], now: float, policy: Policy, earmark_drops: list[EarmarkDrop] = ()):
        self.running = running
        self.capacity = capacity
        self.tree = tree
        self.leave_at = leave_at
        self.now = now
        self.policy = policy
        self.victims = Victims(running, tree, capacity, set(leave_at), now, policy)
        self.leave_times = LeaveTimes(tree, leave_at, now, policy)
        self.starts: list[Start] = []
        self.preemptions: list[Preemption] = []
        self.reservations: list[Reservation] = []
        # MIG GPUs given new instances or a new layout this tick, by GPU.
        self.mig_layouts: dict[str, MigLayout] = {}
        self.order: list[PendingJob] = []
        self.started: set[str] = set()
        self.started_jobs: list[RunningJob] = []
        # Started job id -> its run and (host, GPUs there): what a kept state commits.
        self.started_runs: dict[str, tuple[RunningJob, list]] = {}
        self.waits: dict[str, Wait] = {}
        self.in_flight: dict[str, list] = {}
        # A job whose claim was just dropped is decided anew: its old victims no longer count for it.
        dropped = {drop.job_id for drop in earmark_drops}
        for job in in_seq_order(running):
            if (job.state == PREEMPTING and job.preempted_for is not None and job.id in leave_at
                    and job.preempted_for not in dropped):
                self.in_flight.setdefault(job.preempted_for, []).append(job)
        # Jobs that may start although nothing else can: on earmarks, or waiting for victims.
        self.owed = set(claimants) | set(self.in_flight)
        # Rule 4's claims, carried from earlier ticks and made in this one: job id -> GPU ids.
        self.claims: dict[str, set[str]] = {job_id: set(job.earmarked_gpus) for job_id, job in claimants.items()}
        # Rule 2 for jobs holding a claim: their GPUs are held for them, so their units are charged for them
        # from the start of the tick, as if they had started (once: not again when they do).
        self.precharged: set[str] = set()
        for job_id, job in sorted(claimants.items()):
            if job.allocated:
                self.precharged.add(job_id)
                for node in tree.nodes[job.project].path:
                    node.usage += self._charge(job)
        self.earmark_drops: list[EarmarkDrop] = list(earmark_drops)
        # Rule 5 is tried for the first jobs that can't start, at most max_reservations of them.
        self.reservation_attempts = 0
        self.defrag_budget = migrations_left(recent_defrag_migrations, now, policy)
        # What depends only on a job, the policy and the capacity's shape, from the last tick on this capacity
        # (a kept state's): a job's request and whether it needs a whole domain (kept while the job is the same
        # object), the classes of jobs by what they ask, and which of them no healthy capacity could hold.
        carried = capacity.carried if capacity.carried is not None and capacity.carried["policy"] is policy \
            else {"policy": policy, "jobs": {}, "classes": {}, "key_objects": {}, "never": {}}
        capacity.carried = carried
        self._carried_jobs: dict[str, tuple[PendingJob, JobRequest, bool | None]] = carried["jobs"]
        # This tick's: job id -> (job, its request, whole domain or None), handed on at the end (`carry`).
        self._jobs_seen: dict[str, list] = {}
        self._requests: dict[str, JobRequest] = {}
        self._whole: dict[str, bool] = {}
        self._keys: dict[str, tuple[tuple, tuple, tuple]] = {}
        self._key_objects: dict[tuple, tuple] = carried["key_objects"]
        self._classes_by_fields: dict[tuple, tuple[tuple, tuple, tuple]] = carried["classes"]
        # (GPUs, kind) -> why no healthy capacity could ever hold such a job ("" if some could).
        self._never_facts: dict[tuple, str] = carried["never"]
        self._waiting_alike: dict[tuple, Wait] = {}
        # What jobs alike are known to wait for (see `_known_to_wait`); cleared by a new reservation.
        self._verdicts: dict[tuple, Wait] = {}
        # (GPUs, kind) -> the Wait of jobs no healthy capacity could hold, or None if some could.
        self._never_waits: dict[tuple, Wait | None] = {}
        self._resting: dict[tuple, Wait] = {}
        self._no_fit: dict[tuple, int] = {}
        # (project, class, reservations) -> (GPUs, charge) of a job that found nothing to preempt.
        self._no_victims: dict[tuple, tuple[int, float]] = {}
        self._reserved: list[HostState] = []
        # Until when each reservation holds (see `_hold`), sorted.
        self._reserved_until: list[float] = []
        # (placement class, reservations) of jobs only a reservation kept from starting.
        self._kept_out: set[tuple] = set()
        self._victims_kept_out = False
        self._needs: dict[tuple, str] = {}
        self._entitled_elsewhere: set[str] = set()
        # Projects with an allocated job that could neither start nor preempt this tick (see `_preemption_scope`),
        # and projects whose search that kept to one unit: project -> (that unit, the waiting sibling's project).
        self._blocked: dict[str, UnitNode] = {}
        self._scoped: dict[str, tuple[str, str]] = {}
        # Why each project with a job still waiting stands where it does (`statuses`).
        self.queue_order: tuple[QueueStep, ...] = ()

    # ------------------------------------------------------------ phases

    def allocated_jobs(self, queues: dict[str, list[PendingJob]]) -> None:
        walk = FairShareWalk(self.tree, queues, allocated=True)
        known_to_wait = self._known_to_wait
        while True:
            # Only a decision can leave nothing to do, so this is checked after each.
            if self._stuck():
                if self.policy.explain:
                    for job in walk.rest():
                        self.order.append(job)
                        self._wait_without_search(job)
                return
            while True:
                job = walk.next()
                if job is None:
                    return
                self.order.append(job)
                if not known_to_wait(job):
                    break
            self.owed.discard(job.id)
            charge = self._charge(job)
            if self._allocated_job(job, charge) and job.id not in self.precharged:
                walk.charge(charge)
                self.victims.ratios_changed()

    def unallocated_jobs(self, queues: dict[str, list[PendingJob]]) -> None:
        walk = FairShareWalk(self.tree, queues, allocated=False)
        known_to_wait = self._known_to_wait
        while True:
            if not self.capacity.has_room():
                if self.policy.explain:
                    for job in walk.rest():
                        self.order.append(job)
                        if not self._backing_off(job):
                            self._wait_without_search(job)
                return
            while True:
                job = walk.next()
                if job is None:
                    return
                self.order.append(job)
                if not self._backing_off(job) and not known_to_wait(job):
                    break
            if self._never_fits(job):
                continue
            placement = self._placement(job)
            if placement is None:
                self.waits[job.id] = self._waiting(job)
                continue
            self._start(job, placement)
            walk.charge(gpu_amount(job.gpus, job.gpu_milli) * UNALLOCATED_CHARGE_SECONDS)

    def _backing_off(self, job: PendingJob) -> bool:
        """Is this unallocated job still backing off from its last preemption? Records until when."""
        until = backed_off_until(job, self.policy)
        if until <= self.now:
            return False
        self.waits[job.id] = Wait(BACKING_OFF, f"{job.preemptions}", until)
        return True

    # ------------------------------------------------------------ one allocated job

    def _allocated_job(self, job: PendingJob, charge: float) -> bool:
        """Decide for one allocated job; True if its units are to be charged."""
        if self._never_fits(job):
            return False
        placement = self._placement(job)
        if placement is not None:
            self._start(job, placement)
            return True
        if job.mig_profile:
            # A MIG instance waits for one to free up: it neither preempts nor reserves.
            self.waits[job.id] = self._waiting(job)
            return False
        leaving = self.in_flight.get(job.id)
        if leaving:
            plan = self.victims.after(self._request(job), leaving, _any_host)
            if plan is not None:
                self._claim(job, plan)
                ready = max(self.leave_at[v.id] for v in leaving)
                self.waits[job.id] = Wait(VICTIMS_LEAVING, reasons.job_list([v.id for v in leaving]), ready)
                return True
        if job.id in self.claims:
            # Its victims are gone (or would not make room) and the GPUs held for it do not take it: the plan
            # failed. It gives them up and is decided anew.
            self._drop_claim(job, "they no longer fit it (the CPUs or memory it needs there were taken)")
        gainer = self.tree.nodes[job.project]
        kind, placing, preempting = self._classes(job)
        access = self._access(job)
        if not self._no_victims_for(job, preempting, access):
            scope, waiting = self._preemption_scope(gainer)
            plan = self.victims.find(self._request(job), gainer, charge, self._host_filter(self._request(job)),
                                     within=scope, whole_domain=self._whole_domain(job))
            if plan is not None:
                self._preempt(job, plan)
                return True
            self._no_victims[(job.project, preempting, access, self._whole_domain(job))] = (job.gpus, charge)
            if scope is not None:
                self._scoped.setdefault(job.project, (scope.name, waiting))
            if self._reserved and self._request(job).protected_for > 0:
                # A reservation may have kept it from victims on the hosts it holds (rule 5).
                self._victims_kept_out = True
        self._blocked.setdefault(job.project, gainer)
        if self.reservation_attempts < self.policy.max_reservations:
            self.reservation_attempts += 1
            return self._reserve(job, charge)
        self.waits[job.id] = self._waiting(job)
        return False

    def _preemption_scope(self, gainer: UnitNode) -> tuple[UnitNode | None, str]:
        """Rule 4: the unit whose jobs alone a job of `gainer` may preempt (None: any unit rule 4b allows).

        A unit that comes first in the fair-share order is owed its subtree's turn: while a job of a less-served
        sibling (at any ancestor) could neither start nor preempt this tick, a job of `gainer` may take GPUs
        from jobs under that ancestor only (and from unallocated jobs), so a sibling whose jobs are easier to
        place does not win back from other branches the time its ancestor is owed on the waiting sibling's
        behalf. Returns that ancestor and the waiting sibling's project.
        """
        scope, waiting = None, ""
        for blocked in self._blocked.values():
            sides = sides_at_common_ancestor(blocked, gainer) if blocked is not gainer else None
            ancestor = sides[0].parent if sides is not None else None
            if ancestor is not None and (scope is None or len(ancestor.path) > len(scope.path)):
                scope, waiting = ancestor, blocked.name
        return scope, waiting

    def _reserve(self, job: PendingJob, charge: float) -> bool:
        """Rule 5 (and defragmentation): hold where the job can start earliest."""
        req = self._request(job)
        gainer = self.tree.nodes[job.project]
        leave_time = self.leave_times.for_gainer(gainer, charge, self._whole_domain(job))
        outlook = earliest_start(req, self.capacity, leave_time, self._host_filter(req), self.now)
        if req.topology == DOMAIN and req.gpus > 1:
            moves = plan_defrag(
                job, req, self.capacity, earliest=outlook.start if outlook else math.inf,
                budget=self.defrag_budget, unavailable=set(self.leave_at), host_filter=self._host_filter,
                now=self.now, policy=self.policy,
            )
            if moves is not None:
                self._defragment(job, moves)
                return True
        if outlook is None:
            self.waits[job.id] = Wait(ENTITLED)
            self._entitled_elsewhere.add(job.project)
            return False
        where = self._reserved_label(outlook.domain, outlook.hosts)
        starts_by = reasons.format_time(outlook.start, self.now)
        reason = f"held for job {job.id} ({reasons.need(job)}); it can start {starts_by}"
        reservation = Reservation(job.id, outlook.domain, outlook.hosts, outlook.start, reason)
        self._hold(job, outlook.hosts, outlook.start, reservation)
        self.waits[job.id] = Wait(RESERVED, where, outlook.start)
        return False

    def _reserved_label(self, domain: str, hosts: tuple[str, ...]) -> str:
        """"nvl72-07 is reserved for it and frees", or "host h is …", or "3 hosts of nvl72-07 are … free"."""
        whole = [h for h in self.capacity.hosts.values() if h.domain == domain and h.schedulable]
        if len(hosts) == 1 and len(whole) > 1:
            return f"host {hosts[0]} is reserved for it and frees"
        if domain and len(hosts) == len(whole):
            return f"{domain} is reserved for it and frees"
        where = f"{len(hosts)} hosts of {domain}" if domain else f"hosts {reasons.job_list(list(hosts))}"
        return f"{where} are reserved for it and free"

    def _hold(self, job: PendingJob, hosts: tuple[str, ...], start: float, reservation: Reservation) -> None:
        # Jobs that can be made to leave by then (plus the grace period) may still start there.
        until = max(self.now, start - self.policy.grace_period)
        insort(self._reserved_until, until)
        self._verdicts.clear()
        for name in hosts:
            host = self.capacity.hosts[name]
            host.reserved_until = until
            host.reserved_for = job.id
            self._reserved.append(host)
        self.reservations.append(reservation)

    # ------------------------------------------------------------ decisions

    def _start(self, job: PendingJob, placement: Placement) -> None:
        req = self._request(job)
        if placement.mig is not None:
            self._start_mig(job, placement)
            return
        gpu_ids = self.capacity.take(job.id, req.gpus, placement.parts, cpus=job.cpus, memory_gib=job.memory_gib,
                                     milli=req.milli, shared_gpu=placement.shared_gpu)
        host = placement.parts[0][0].name if job.gpus == 0 else ""
        start = Start(job.id, gpu_ids, req.milli, self._start_reason(job, placement, gpu_ids), host,
                      protection=shield(job.min_runtime, job.preemptions, self.policy))
        self.starts.append(start)
        claim = self.claims.pop(job.id, None)
        if claim:
            # Started (on its claim or elsewhere): what it did not use is free for others at once.
            self.capacity.release_earmarks(job.id, claim)
        self._started(job, placement, running_from(job, start, self.now))

    def _start_mig(self, job: PendingJob, placement: Placement) -> None:
        choice = placement.mig
        state = choice.state
        gpu = state.gpu
        profile, start = choice.instance
        before = mig_geometry.layout_summary(state.layout)
        self.capacity.take_mig(job.id, state, choice.instance, choice.layout, cpus=job.cpus,
                               memory_gib=job.memory_gib, gpu_types=job.gpu_types)
        where = f"{profile} instance at slice {start} of GPU {gpu}"
        if choice.how == NEW_LAYOUT:
            change = (f"GPU {gpu} had no job on it: partitioned as {mig_geometry.layout_summary(choice.layout)} "
                      f"for the MIG demand waiting (was {before})")
            reason = f"MIG: {where}; {change}"
        elif choice.how == NEW_INSTANCE:
            change = f"new {profile} instance in free slices of GPU {gpu} at slice {start}"
            reason = f"MIG: {where}, created in free slices"
        else:
            change = ""
            reason = f"MIG: idle {where}"
        if change:
            first = self.mig_layouts.get(gpu)
            note = change if first is None else f"{first.reason}; {change}"
            self.mig_layouts[gpu] = MigLayout(gpu, choice.layout, note)
        decided = Start(job.id, (gpu,), job.gpu_milli, reason, mig_profile=profile, mig_start=start,
                        protection=shield(job.min_runtime, job.preemptions, self.policy))
        self.starts.append(decided)
        self._started(job, placement, running_from(job, decided, self.now))

    def _started(self, job: PendingJob, placement: Placement, started: RunningJob) -> None:
        self.started.add(job.id)
        self.victims.capacity_changed()
        # Later reservations and drains count it as running from now.
        for placed, _ in placement.parts:
            placed.jobs.append(started)
        self.started_jobs.append(started)
        self.started_runs[job.id] = (started, [(host, count) for host, count in placement.parts])

    def scoped(self) -> bool:
        """Did a less-served sibling's wait keep a job from preempting outside their ancestor (rule 4)?

        That lasts while the sibling comes first, so the order of siblings moving with time alone matters
        (`quiet.py`)."""
        return bool(self._scoped)

    def held_back(self) -> bool:
        """Did a reservation keep a job out of GPUs that were free for it, or from victims it might have taken?

        Where rule 5 holds hosts moves with time alone (jobs that may be made to leave at once leave later as
        time passes), so the next tick may decide otherwise (`quiet.py`).
        """
        return (bool(self._kept_out) and self.capacity.has_room()) or self._victims_kept_out

    def release_reservations(self) -> None:
        """Rule 5's holds last one tick: the next one reserves anew."""
        for host in self._reserved:
            host.reserved_until = None
            host.reserved_for = None

    def _start_reason(self, job: PendingJob, placement: Placement, gpu_ids: tuple[str, ...]) -> str:
        if job.earmarked_gpus and set(gpu_ids) & set(job.earmarked_gpus):
            return "on the GPUs preempted for it"
        host = placement.parts[0][0]
        if job.gpus == 0:
            return f"on host {host.name}"
        if placement.shared_gpu is not None:
            left = WHOLE_GPU_MILLI - host.milli_used.get(placement.shared_gpu, WHOLE_GPU_MILLI)
            how = ("the shared GPU where it fragments the least" if placement.key[0] == 0
                   else "no shared GPU had room: a whole GPU by host best fit")
            return f"shares GPU {placement.shared_gpu} ({left} milli-GPU left free on it): {how}"
        if len(placement.parts) == 1:
            left = reasons.plural(len(host.free), "GPU")
            return f"best fit: host {host.name} in {host.domain} ({left} left free there)"
        domains = placement.domains
        if len(domains) == 1:
            free = host.group.free
            return f"best fit: one NVLink domain, {domains[0]} ({reasons.plural(free, 'GPU')} left free there)"
        return f"across {len(domains)} NVLink domains ({', '.join(domains)}), as few as possible"

    def _preempt(self, job: PendingJob, plan: VictimPlan) -> None:
        ready = self.now
        for victim in plan.victims:
            grace = grace_for(victim.job, self.policy)
            reason = reasons.preempted_for_job(job, victim.job, victim.sides, self.policy.window)
            self.preemptions.append(Preemption(victim.job.id, str(StopCause(Cause.JOB, job.id)), reason, grace=grace,
                                               requeue=victim.job.resumable, preemptor=job.id))
            self.leave_at[victim.job.id] = self.now + grace
            ready = max(ready, self.now + grace)
        self.victims.take({victim.job.id for victim in plan.victims})
        self._claim(job, plan)
        ids = [victim.job.id for victim in plan.victims]
        self.waits[job.id] = Wait(PREEMPTING_FOR, reasons.job_list(ids), ready)

    def _claim(self, job: PendingJob, plan: VictimPlan) -> None:
        """The GPUs the job will start on once its victims have left become its claim (rule 4, earmarks.py):
        the victims' GPUs it needs and the free ones the plan counted on, kept across ticks until it starts."""
        claim = self.claims.setdefault(job.id, set())
        capacity = self.capacity
        gpu_host = capacity.gpu_host
        leaving = [victim.job for victim in plan.victims]
        if self._request(job).shared:
            if plan.gpu is not None:
                host = capacity.hosts[gpu_host[plan.gpu]]
                claim.add(plan.gpu)
                if job.id not in host.milli_held:
                    freed = sum(v.job.gpu_milli for v in plan.victims if plan.gpu in v.job.gpu_ids)
                    capacity.hold_milli(job.id, host, plan.gpu, job.gpu_milli - freed)
                if (job.cpus or job.memory_gib) and job.id not in host.resources_held:
                    capacity.hold_resources(job, host, 1, leaving)
            return
        for host, count in plan.parts:
            if (job.cpus or job.memory_gib) and job.id not in host.resources_held:
                capacity.hold_resources(job, host, count, leaving)
            own = host.earmarked.get(job.id, ())
            claim.update(own)
            released = plan.released.get(host.name, 0)
            from_victims = [gpu for victim in plan.victims for gpu in victim.job.gpu_ids
                            if gpu_host.get(gpu) == host.name]
            from_victims.sort(key=lambda gpu: (gpu not in claim, capacity.gpu_position[gpu]))
            claim.update(from_victims[:min(count, released)])
            claim.update(capacity.earmark(job.id, host, count - released - len(own)))

    def _drop_claim(self, job: PendingJob, reason: str) -> None:
        claim = self.claims.pop(job.id, set())
        self.capacity.release_earmarks(job.id, claim)
        self.earmark_drops.append(EarmarkDrop(job.id, f"the GPUs held for it are free for others again: {reason}"))

    def earmarks(self) -> dict[str, tuple[str, ...]]:
        """Every claim still standing after the tick, GPUs in the topology's order."""
        position = self.capacity.gpu_position
        return {job_id: tuple(sorted(claim, key=lambda gpu: position.get(gpu, -1)))
                for job_id, claim in sorted(self.claims.items()) if claim and job_id not in self.started}

    def _defragment(self, job: PendingJob, moves: DefragPlan) -> None:
        ready = self.now
        for moved in moves.moved:
            grace = grace_for(moved, self.policy)
            reason = (f"moved out of {moves.domain} to make one whole NVLink domain for job {job.id} "
                      f"({reasons.need(job)}); resumes elsewhere from its last checkpoint")
            self.preemptions.append(Preemption(moved.id, str(Cause.DEFRAG), reason, grace=grace, requeue=True,
                                               preemptor=job.id))
            self.leave_at[moved.id] = self.now + grace
            ready = max(ready, self.now + grace)
        self.victims.take({moved.id for moved in moves.moved})
        self.defrag_budget -= len(moves.moved)
        # The moved jobs' GPUs and the free ones of the hosts it will take are its claim, as a preemption's.
        claim = self.claims.setdefault(job.id, set())
        need = job.gpus
        for name in moves.hosts:
            host = self.capacity.hosts[name]
            freed = [gpu for moved_job in moves.moved for gpu in moved_job.gpu_ids
                     if self.capacity.gpu_host.get(gpu) == name][:need]
            claim.update(freed)
            need -= len(freed)
            taken = self.capacity.earmark(job.id, host, need)
            claim.update(taken)
            need -= len(taken)
        moved = reasons.plural(len(moves.moved), "job")
        reason = f"held for job {job.id}: defragmenting {moves.domain} ({moved} moved out)"
        self._hold(job, moves.hosts, ready, Reservation(job.id, moves.domain, moves.hosts, ready, reason))
        self.waits[job.id] = Wait(DEFRAGMENTING, moves.domain, ready)

    # ------------------------------------------------------------ searching, bounded

    def _whole_domain(self, job: PendingJob) -> bool:
        """Does the job need at least one whole multi-host NVLink domain (rule 5's large jobs)?

        Such a job may preempt a job once its protection ends, though earlier preemptions still shield it from
        others (`model.shield`), so the large jobs' bound (cap + grace + tick) holds.
        """
        known = self._whole.get(job.id)
        if known is None:
            req = self._request(job)
            carried = self._carried_jobs.get(job.id)
            if carried is not None and carried[0] is job and carried[2] is not None:
                known = carried[2]
            else:
                largest = max((pool.largest_group for lane in pools_for(req, self.capacity) for pool in lane),
                              default=0)
                known = _spans_hosts(req, self.capacity) and req.gpus >= largest
            self._whole[job.id] = known
            self._jobs_seen[job.id][2] = known
        return known

    def _request(self, job: PendingJob) -> JobRequest:
        req = self._requests.get(job.id)
        if req is None:
            carried = self._carried_jobs.get(job.id)
            req = carried[1] if carried is not None and carried[0] is job else JobRequest.of(job, self.policy)
            self._requests[job.id] = req
            self._jobs_seen[job.id] = [job, req, None]
        return req

    def carry(self) -> None:
        """Hand the requests of the jobs this tick looked at on to the next tick on this capacity."""
        self.capacity.carried["jobs"] = {job_id: tuple(seen) for job_id, seen in self._jobs_seen.items()}

    def _host_filter(self, req: JobRequest) -> HostFilter:
        """Rule 5: allocated jobs protected beyond a reservation may not start on its hosts."""
        if not self._reserved or req.protected_for == 0:
            return _any_host
        ends = self.now + req.protected_for

        def allowed(host: HostState) -> bool:
            return host.reserved_until is None or host.reserved_for == req.job_id or ends <= host.reserved_until

        return allowed

    def _kind(self, job: PendingJob) -> tuple:
        """What placement and the reasons depend on but the GPU count (one shared object per kind)."""
        return self._classes(job)[0]

    def _classes(self, job: PendingJob) -> tuple[tuple, tuple, tuple]:
        """(kind, placement class, preemption class); see `_classify`."""
        return self._keys.get(job.id) or self._classify(job)

    def _classify(self, job: PendingJob) -> tuple[tuple, tuple, tuple]:
        """A job's kind, and the classes whose failures this tick stand for it (once per kind of job).

        Failures are remembered per class with the smallest GPU count that
        failed: capacity and victims only shrink while a tick decides, so a
        larger job of the same class fails too. A job that fits on one host
        in every pool it may use is placed and preempts for the same way
        whatever its topology and shape; a multi-host job that one domain
        could hold preempts within one domain whatever its topology.
        """
        short = job.min_runtime <= self.policy.fast_lane_max_min_runtime
        fields = (job.gpus, job.gpus_per_host, job.gpu_milli, job.gpu_types, job.topology, job.min_runtime > 0, short,
                  job.cpus, job.memory_gib, job.mig_profile)
        keys = self._classes_by_fields.get(fields)
        if keys is None:
            keys = self._classes_by_fields[fields] = self._classes_of(job, lanes(job, self.policy))
        self._keys[job.id] = keys
        return keys

    def _classes_of(self, job: PendingJob, sides: tuple[bool, ...]) -> tuple[tuple, tuple, tuple]:
        # More GPUs need fewer CPUs per GPU: with CPU or memory asked, the count is part of it.
        exact = job.gpus if job.cpus or job.memory_gib else None
        milli = job.gpu_milli if job.gpus == 1 else WHOLE_GPU_MILLI
        mig = job.mig_profile
        kind = (job.gpus_per_host, milli, job.gpu_types, job.topology, sides, exact, mig)
        pools = [pool for side in pools_in(self.capacity, sides, job.gpu_types) for pool in side]
        smallest_host = min((pool.largest_host for pool in pools), default=0)
        largest_group = max((pool.largest_group for pool in pools), default=0)
        per_host = job.gpus_per_host
        if (per_host is None and job.gpus <= smallest_host) or (per_host is not None and per_host >= job.gpus):
            placing = preempting = (None, milli, job.gpu_types, ANY, sides, exact, mig)
        elif job.gpus <= largest_group:
            placing, preempting = kind, (per_host, milli, job.gpu_types, DOMAIN, sides, exact, mig)
        else:
            placing = preempting = kind
        return tuple(self._key_objects.setdefault(k, k) for k in (kind, placing, preempting))

    def _access(self, job: PendingJob) -> int:
        """Which reservations the job may start under: those lasting at least its protection."""
        if not self._reserved_until or not job.allocated:
            return 0
        return bisect_left(self._reserved_until, self.now + protected_for(job, self.policy))

    def _known_to_wait(self, job: PendingJob) -> bool:
        """This tick already showed the job can't start, preempt or reserve: record that it waits.

        The common case, made cheap: the order's tail is long. The verdict
        is kept per kind of job (what it asks, not who it is), since the
        failures it rests on stay failures for the rest of the tick.
        """
        if job.id in self.owed:
            return False
        alike = _alike(job)
        wait = self._verdicts.get(alike)
        if wait is None:
            wait = self._verdict(job)
            if wait is None:
                return False
            self._verdicts[alike] = wait
        self.waits[job.id] = wait
        return True

    def _verdict(self, job: PendingJob) -> Wait | None:
        allocated = job.min_runtime > 0
        if allocated and self.reservation_attempts < self.policy.max_reservations:
            return None
        kind, placing, preempting = self._classes(job)
        gpus = job.gpus
        if self._never_waits.get((gpus, kind), False) is not None:
            return None
        access = self._access(job)
        if gpus < self._no_fit.get((placing, access), math.inf):
            return None
        if allocated and not self._no_victims_for(job, preempting, access):
            return None
        return self._waiting(job, kind, access)

    def _no_victims_for(self, job: PendingJob, preempting: tuple, access: int) -> bool:
        """Did a job of its project and class, no bigger and charging no more, find nothing to preempt?"""
        failed = self._no_victims.get((job.project, preempting, access, self._whole_domain(job)))
        return failed is not None and job.gpus >= failed[0] and self._charge(job) >= failed[1]

    @staticmethod
    def _charge(job: PendingJob) -> float:
        """Rule 2: what starting (or preempting for) a job adds to its units' usage this tick."""
        return gpu_amount(job.gpus, job.gpu_milli) * job.min_runtime

    def _waiting(self, job: PendingJob, kind: tuple | None = None, access: int | None = None) -> Wait:
        """The shared `Wait` of jobs that wait for room like this one."""
        kind = kind or self._kind(job)
        access = self._access(job) if access is None else access
        key = (job.project, id(kind), job.gpus, access)
        wait = self._waiting_alike.get(key)
        if wait is None:
            wait = self._waiting_alike[key] = Wait(NO_ROOM)
        return wait

    def _placement(self, job: PendingJob) -> Placement | None:
        owed = job.earmarked_gpus or job.id in self.in_flight
        key = (self._classes(job)[1], self._access(job))
        if not owed and job.gpus >= self._no_fit.get(key, math.inf):
            return None
        req = self._request(job)
        placement = find_placement(req, self.capacity, self._host_filter(req))
        if placement is None and not owed:
            self._no_fit[key] = min(job.gpus, self._no_fit.get(key, math.inf))
            if self._reserved and find_placement(req, self.capacity, _any_host) is not None:
                self._kept_out.add(key)
        return placement

    def _stuck(self) -> bool:
        """Nothing free, nothing to preempt or reserve, no job owed GPUs: the rest only waits."""
        return (not self.owed and not self.victims.live and self.reservation_attempts >= self.policy.max_reservations
                and not self.capacity.has_room())

    def _never_fits(self, job: PendingJob) -> bool:
        """Can no healthy capacity ever hold this job? Records why."""
        wait = self._never_wait(job)
        if wait is not None:
            self.waits[job.id] = wait
        return wait is not None

    def _never_wait(self, job: PendingJob) -> Wait | None:
        key = (job.gpus, self._kind(job))
        wait = self._never_waits.get(key, False)
        if wait is False:
            fact = self._never_facts.get(key)
            if fact is None:
                fact = self._never_facts[key] = _never_fits(self._request(job), self.capacity)
            wait = self._never_waits[key] = Wait(NEVER, fact) if fact else None
        return wait

    def _wait_without_search(self, job: PendingJob) -> None:
        """Record that a job waits, once nothing more can start or preempt (per kind of job)."""
        alike = _alike(job)
        wait = self._resting.get(alike)
        if wait is None:
            wait = self._resting[alike] = self._never_wait(job) or self._waiting(job)
        self.waits[job.id] = wait

    # ------------------------------------------------------------ rule 8

    def statuses(self, unit_ratios: dict[str, float]) -> dict[str, PendingStatus]:
        """Reason, position and estimated start of every job that did not start, in order.

        The estimate is cheap (DESIGN §6b: no placement search per job): GPUs
        come back when jobs leave this tick and when protection or maximum
        runtime ends (plus the grace period), and the allocated jobs waiting
        ahead take them first, in fair-share order. Topology is ignored, no
        new arrival is assumed, and every job whose protection ends is assumed
        to go: an optimistic bound. Unallocated jobs and projects rule 5 found
        nothing for get none. Sets `queue_order`: each project where its first
        waiting job stands, explained (`fairshare.explain_order`).
        """
        times, released = self._release_timeline()
        free_now = self.capacity.free_gpus
        demand = 0
        head = next((job for job in self.order if job.allocated), None)
        # Jobs that wait alike share their Wait (compared by identity), so it keys the text.
        texts: dict[Wait, str] = {}
        result: dict[str, PendingStatus] = {}
        started, waits, no_estimate = self.started, self.waits, self._entitled_elsewhere
        coming = released[-1] if released else 0
        position = 0
        # Project -> where its first waiting job stands and whether it is allocated, in queue order.
        firsts: dict[str, tuple[int, bool]] = {}
        project = None
        for job in self.order:
            job_id = job.id
            if job_id in started:
                continue
            position += 1
            if job.project != project:
                project = job.project
                if project not in firsts:
                    firsts[project] = (position, job.min_runtime > 0)
            wait = waits[job_id]
            text = texts.get(wait)
            if text is None:
                text = texts[wait] = self._reason(job, wait, head, unit_ratios)
            estimate = wait.ready_at
            if job.min_runtime > 0 and wait.kind is not NEVER and not job.mig_profile:
                demand += job.gpus
                short = demand - free_now
                if estimate is None and 0 < short <= coming and job.project not in no_estimate:
                    estimate = times[bisect_left(released, short)]
            result[job_id] = PendingStatus(job_id, text, position, estimate)
        self.queue_order = explain_order(firsts, self.tree, unit_ratios)
        return result

    def _reason(self, job: PendingJob, wait: Wait, head: PendingJob | None, unit_ratios: dict[str, float]) -> str:
        now = self.now
        if wait.kind == NEVER:
            return f"{reasons.need(job)}; {wait.detail}"
        if wait.kind == PREEMPTING_FOR:
            return (f"preempting {wait.detail} to make room; starts when they leave, "
                    f"{reasons.format_time(wait.ready_at, now)}")
        if wait.kind == VICTIMS_LEAVING:
            return (f"waiting for the jobs it preempted ({wait.detail}) to leave, "
                    f"{reasons.format_time(wait.ready_at, now)}")
        if wait.kind == BACKING_OFF:
            times = "once" if wait.detail == "1" else f"{wait.detail} times"
            return (f"runs unallocated, preemptible; preempted {times}, it backs off: may start again "
                    f"{reasons.format_time(wait.ready_at, now)} (the wait doubles with each preemption, "
                    f"up to {reasons.format_duration(self.policy.max_unallocated_backoff)})")
        text = self._need_and_free(job)
        if wait.kind == DEFRAGMENTING:
            return (f"{text}; jobs are being moved out of {wait.detail} for it; "
                    f"starts {reasons.format_time(wait.ready_at, now)}")
        if wait.kind == RESERVED:
            return f"{text}; {wait.detail} {reasons.format_time(wait.ready_at, now)}"
        project_ratio = unit_ratios.get(job.project, math.inf)
        if not job.allocated:
            lead = (f"{reasons.no_allocation(job.project)}: runs unallocated, preemptible"
                    if math.isinf(project_ratio) else "runs unallocated (minimum runtime 0), preemptible")
            return f"{lead}; waits for idle GPUs; {text}"
        if math.isinf(project_ratio):
            text = (f"{reasons.no_allocation(job.project)}: its allocated jobs come after every allocated "
                    f"project's; {text}")
        if wait.kind == ENTITLED:
            where = "domain" if job.topology == DOMAIN and _spans_hosts(self._request(job), self.capacity) else "host"
            return (f"{text}; every {where} that could hold it is held by project {job.project} itself or by units "
                    f"less served than it, which are entitled to keep their GPUs: it waits for jobs to end")
        blocked = self._reservation_blocking(job)
        if blocked:
            text = f"{text}; {blocked}"
        elif job.min_runtime > 0 and self._no_victims_for(job, self._classes(job)[2], self._access(job)):
            if job.project in self._scoped:
                unit, waiting = self._scoped[job.project]
                text += (f"; while project {waiting}, less served than it under {unit}, waits to start, it may "
                         f"preempt only unallocated jobs and jobs under {unit}, and none of those would make room")
            else:
                text += (f"; no running job may be preempted for it (each is protected by its minimum runtime, "
                         f"or belongs to project {job.project} or to a unit less served)")
        if head is not None and head.project != job.project and unit_ratios[head.project] < project_ratio:
            ahead, yours = reasons.format_percent(unit_ratios[head.project]), reasons.format_percent(project_ratio)
            text += f"; waiting behind project {head.project} (usage ratio {ahead} vs yours {yours})"
        return text

    def _need_and_free(self, job: PendingJob) -> str:
        """"needs one 64-GPU NVLink domain; largest free is 40", from the capacity left after the tick."""
        key = (self._kind(job), job.gpus, job.cpus, job.memory_gib)
        text = self._needs.get(key)
        if text is None:
            text = self._needs[key] = f"{reasons.need(job)}; {self._free_fact(job)}"
        return text

    def _free_fact(self, job: PendingJob) -> str:
        req = self._request(job)
        pools = [pool for lane in pools_for(req, self.capacity) for pool in lane]
        types = reasons.gpu_types_label(job.gpu_types)
        if job.gpus == 0:
            return "no host has the CPUs and memory free"
        if req.mig_profile:
            return (f"no MIG GPU{types} has an idle {req.mig_profile} instance or free slices for one, and none is "
                    f"free of jobs to be partitioned anew")
        free = sum(pool.free for pool in pools)
        if req.shared:
            most = max((WHOLE_GPU_MILLI if pool.free else pool.shared[-1][0] if pool.shared else 0 for pool in pools),
                       default=0)
            return f"no GPU{types} has {job.gpu_milli} milli-GPU free (most is {most})"
        if free == 0:
            return f"no GPUs{types} free"
        if job.topology == DOMAIN and _spans_hosts(req, self.capacity):
            return f"largest free is {max(pool.largest_free_group for pool in pools)}"
        return f"{free} free"

    def _reservation_blocking(self, job: PendingJob) -> str:
        """If, at its turn, only a reservation kept the job out: whose, and until when."""
        if (self._classes(job)[1], self._access(job)) not in self._kept_out:
            return ""
        first = self.reservations[0]
        return (f"the free GPUs that fit were reserved for job {first.job_id} (it starts "
                f"{reasons.format_time(first.expected_start, self.now)}), and this job's "
                f"minimum runtime would outlast that")

    def _release_timeline(self) -> tuple[list[float], list[int]]:
        """When GPUs come back to the schedulable pool, and how many by then (cumulative)."""
        timeline: list[tuple[float, int]] = []
        for job in self.running + tuple(self.started_jobs):
            held = self.capacity.held.get(job.id)
            if held and held[0][0].group is None or job.mig_profile:
                continue
            when = self._release_time(job)
            if when is not None:
                timeline.append((when, len(job.gpu_ids)))
        timeline.sort()
        return [t for t, _ in timeline], list(accumulate(g for _, g in timeline))

    def _release_time(self, job) -> float | None:
        if job.id in self.leave_at:
            return self.leave_at[job.id]
        if job.state != RUNNING:
            return None
        ends = math.inf
        if job.allocated and protected_until(job, self.policy) > self.now:
            ends = protected_until(job, self.policy)
        if job.max_runtime is not None:
            ends = min(ends, job.start_time + job.max_runtime)
        return None if math.isinf(ends) else ends + grace_for(job, self.policy)


def _any_host(host: HostState) -> bool:
    return True


# Everything about a job that its decision depends on, but who it is.
_alike = attrgetter("project", "gpus", "gpus_per_host", "gpu_milli", "gpu_types", "topology", "min_runtime",
                    "max_runtime", "cpus", "memory_gib", "mig_profile")


def _spans_hosts(req: JobRequest, capacity: Capacity) -> bool:
    """Does the job need more than one host in every pool it may use?"""
    return not any(req.single_host(pool) for lane in pools_for(req, capacity) for pool in lane)


def _never_fits(req: JobRequest, capacity: Capacity) -> str:
    """Why no healthy capacity could ever hold the job ("" if some could)."""
    types = reasons.gpu_types_label(req.gpu_types)
    if req.gpus == 0:
        return ""
    if req.mig_profile:
        if any(state.host.state == UP and state.host.fast_lane in req.lanes
               and (not req.gpu_types or state.host.gpu_type in req.gpu_types) for state in capacity.mig.values()):
            return ""
        return f"no healthy GPU{types} in MIG mode on this cluster"
    pools = [pool for lane in pools_for(req, capacity) for pool in lane]
    if req.per_host is not None and req.gpus % req.per_host:
        return f"{req.gpus} GPUs is not a multiple of {req.per_host} per host"
    if not pools:
        return f"no healthy GPUs{types} on this cluster"
    largest_host = max(pool.largest_host for pool in pools)
    if req.per_host is not None and req.per_host > largest_host:
        return f"the largest healthy host{types} has {reasons.plural(largest_host, 'GPU')}"
    if req.topology == DOMAIN and _spans_hosts(req, capacity):
        largest = max(pool.largest_group for pool in pools)
        if req.gpus > largest:
            return f"largest healthy domain{types} has {largest} GPUs"
    largest_pool = max(sum(g.capacity for g in pool.groups.values()) for pool in pools)
    if req.gpus > largest_pool:
        return f"the cluster has {reasons.plural(largest_pool, 'healthy GPU')}{types}"
    return ""

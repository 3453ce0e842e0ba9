"""`schedule()`: one tick of the scheduler, in numbered phases (DESIGN §3).

The phases share a `Cycle`: the tick's working capacity (the statement later
jobs see earlier decisions on), the org tree with this tick's charges, the
victims still available, and what happened to every pending job so far.

Searching is bounded (DESIGN §6b): once nothing is free, nothing can be
preempted and no job is owed GPUs, the rest of the order only gets its
reasons. The `Cycle` is split by concern: the decisions here, what the tick
learnt about kinds of jobs and the searches it spares in search.py
(`BoundedSearch`), and the reasons, positions and estimates of the jobs left
waiting (rule 8) in explain.py (`Explanation`).
"""

from __future__ import annotations

import gc
import math
from bisect import insort
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from . import mig as mig_geometry
from . import reasons
from .capacity import NOTHING, Capacity, HostState
from .defrag import DefragPlan, defragments_for, migrations_left, plan_defrag
from .drains import drain_progress, jobs_leaving
from .earmarks import check_claims
from .explain import Explanation
from .fairshare import FairShareWalk, UnitNode, UnitTree, charge_of, gpu_amount, sides_at_common_ancestor
from .lifecycle import Cause, StopCause
from .model import (
    PREEMPTING,
    WHOLE_GPU_MILLI,
    Decisions,
    EarmarkDrop,
    MigLayout,
    PendingJob,
    Policy,
    Preemption,
    QueueStep,
    Reservation,
    RunningJob,
    Snapshot,
    Start,
    in_seq_order,
    run_shield,
)
from .placement import (
    NEW_INSTANCE,
    NEW_LAYOUT,
    Placement,
)
from .preemption import VictimPlan, Victims
from .reservation import Claimed, LeaveTimes, earliest_start, grace_for
from .search import (
    DEFRAGMENTING,
    ENTITLED,
    PREEMPTING_FOR,
    RESERVED,
    VICTIMS_LEAVING,
    BoundedSearch,
    FailedSearch,
    Wait,
    any_host,
)
from .state import ClusterState, running_from

# Rule 6: an unallocated start is charged this many seconds of its GPUs to its
# units' unallocated usage for the rest of the tick, so one tick interleaves
# projects' unallocated jobs as rule 2 does allocated ones.
UNALLOCATED_CHARGE_SECONDS = 3600.0


def schedule(snapshot: Snapshot, *, now: float, policy: Policy) -> Decisions:
    """Decide one tick for `snapshot` at time `now`. Pure: same input, same output."""
    with collector_paused():
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
                  policy, state.classes, earmark_drops, state.run_ends(policy))
    try:
        # 3. Allocated jobs in fair-share order: start, preempt, reserve, defragment (rules 2-5).
        cycle.allocated_jobs(state.queues[True])

        # 4. Unallocated jobs fill what is left, in fair-share order of free time (rule 6).
        cycle.unallocated_jobs(state.queues[False], state.smallest_unallocated_ask())

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
        state.passed_over = bool(cycle.victims.passed_over) or cycle.leave_times.windowed
        state.window_jobs = cycle.victims.passed_over_jobs | cycle.leave_times.read_windows
        state.moves_read = cycle.moves_read
        state.walk_charges = (tuple(cycle.charged_jobs), cycle.met)
    return decisions


class Cycle(BoundedSearch, Explanation):
    """The state one tick decides on, and its decisions; see the module docstring.

    Its search memo is `BoundedSearch` (search.py), its reason text `Explanation` (explain.py).
    """

    def __init__(self, running: tuple[RunningJob, ...], claimants: dict[str, PendingJob],
                 recent_defrag_migrations: tuple[float, ...], capacity: Capacity, tree: UnitTree,
                 leave_at: dict[str, float], now: float, policy: Policy, classes: dict[str, int],
                 earmark_drops: list[EarmarkDrop] = (), run_ends: dict | None = None):
        self.running = running
        self.capacity = capacity
        self.tree = tree
        self.leave_at = leave_at
        self.now = now
        self.policy = policy
        # Running job id -> (the job, when its protection ends, when its shield ends), as a kept state has them.
        self._run_ends = run_ends
        self.victims = Victims(running, tree, capacity, set(leave_at), now, policy, run_ends)
        self.leave_times = LeaveTimes(tree, leave_at, now, policy, capacity, run_ends)
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
        # Claimant -> the running jobs leaving for it, from earlier ticks and this one (`_claimed_by_others`).
        self._victims_of = {job_id: list(victims) for job_id, victims in self.in_flight.items()}
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
                    node.usage += charge_of(job)
        self.earmark_drops: list[EarmarkDrop] = list(earmark_drops)
        # The jobs the allocated walk charged their units for (rule 2), in order, and for each project it met, how
        # many of those charges had been made when it met the project's first and last job (`quiet.py`: what a
        # project's jobs were compared on).
        self.charged_jobs: list[str] = []
        self.met: dict[str, tuple[int, int]] = {}
        # Rule 5 is tried for the first jobs that can't start, at most max_reservations of them.
        self.reservation_attempts = 0
        self.defrag_budget = migrations_left(recent_defrag_migrations, now, policy)
        # Domain -> the jobs defragmentation plans took there before the job fitted (`quiet.py`).
        self.moves_read: dict[str, set[str]] = {}
        self._start_search(classes)
        self._reserved: list[HostState] = []
        # Until when each reservation holds (see `_hold`), sorted.
        self._reserved_until: list[float] = []
        self._victims_kept_out = False
        self._start_explaining()
        self._entitled_elsewhere: set[str] = set()
        # Projects with an allocated job that could neither start nor preempt this tick (see `_preemption_scope`),
        # and projects whose search that kept to one unit: project -> (that unit, the waiting sibling's project).
        self._blocked: dict[str, UnitNode] = {}
        # Gainer -> (how many projects were blocked, its scope then): `_blocked` only grows, so a scope stands
        # until another project is blocked.
        self._scopes: dict[str, tuple[int, tuple[UnitNode | None, str]]] = {}
        self._scoped: dict[str, tuple[str, str]] = {}
        # Why each project with a job still waiting stands where it does (`statuses`).
        self.queue_order: tuple[QueueStep, ...] = ()

    # ------------------------------------------------------------ phases

    def allocated_jobs(self, queues: dict[str, list[PendingJob]]) -> None:
        walk = FairShareWalk(self.tree, queues, allocated=True)
        known_to_wait = self._known_to_wait
        charged_jobs, met = self.charged_jobs, self.met
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
                charges = len(charged_jobs)
                first = met.get(job.project)
                met[job.project] = (charges, charges) if first is None else (first[0], charges)
                if not known_to_wait(job):
                    break
                self._pass_known(walk)
            self.owed.discard(job.id)
            charge = charge_of(job)
            if self._allocated_job(job, charge) and job.id not in self.precharged:
                charged_jobs.append(job.id)
                walk.charge(charge)
                self.victims.ratios_changed()
                self._charged()

    def unallocated_jobs(self, queues: dict[str, list[PendingJob]], smallest_ask: float) -> None:
        """`smallest_ask`: the fewest whole GPUs a job of `queues` asks (0: one may fit however few are free,
        `ClusterState.smallest_unallocated_ask`). Once fewer are free, the rest only waits."""
        walk = FairShareWalk(self.tree, queues, allocated=False)
        known_to_wait = self._known_to_wait
        capacity = self.capacity
        while True:
            if not capacity.has_room() or (smallest_ask and capacity.free_gpus < smallest_ask):
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
                self._pass_known(walk)
            if self._never_fits(job):
                continue
            placement = self._placement(job)
            if placement is None:
                self.waits[job.id] = self._waiting(job)
                continue
            self._start(job, placement)
            walk.charge(gpu_amount(job.gpus, job.gpu_milli) * UNALLOCATED_CHARGE_SECONDS)

    def _pass_known(self, walk: FairShareWalk) -> None:
        """The jobs after the one just passed over in its project's queue whose class is known to wait (none owed
        GPUs) wait alike: they are passed over at once, and recorded as `_known_to_wait` (and `_backing_off`)
        would have recorded each. Nothing was charged in between, so they come next in the order."""
        passed = walk.pass_known(self._class_of, self._verdicts, self.owed)
        if passed and self.policy.explain:
            verdicts, class_of = self._verdicts, self._class_of
            for job in passed:
                self.order.append(job)
                if job.allocated or not self._backing_off(job):
                    self.waits[job.id] = verdicts[class_of[job.id]]

    def _backing_off(self, job: PendingJob) -> bool:
        """Is this unallocated job still backing off from its last preemption? Records until when."""
        if job.requeued_at is None:
            return False  # never requeued after a preemption (`backed_off_until` is -inf)
        until, wait = self._backoff(job)
        if until <= self.now:
            return False
        self.waits[job.id] = wait
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
            plan = self.victims.after(self._request(job), leaving, any_host)
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
            passed_over = self.victims.passed_over
            req = self._request(job)
            plan = self.victims.find(req, gainer, charge, self._host_filter(req), within=scope,
                                     whole_domain=self._whole_domain(job), one_host=self._on_one_host(job))
            if plan is not None:
                self._preempt(job, plan)
                return True
            self._found_none(job, preempting, access, FailedSearch(
                job.gpus, charge, self.victims.passed_over > passed_over, self._charges))
            if scope is not None:
                self._scoped.setdefault(job.project, (scope.name, waiting))
            if access:
                # A reservation kept it from victims on the hosts it holds: it may not start under it (rule 5).
                self._victims_kept_out = True
        self._blocked.setdefault(job.project, gainer)
        if self.reservation_attempts < self.policy.max_reservations:
            self.reservation_attempts += 1
            return self._reserve(job, charge)
        self._waits_alike(job, kind, access)
        return False

    def _preemption_scope(self, gainer: UnitNode) -> tuple[UnitNode | None, str]:
        """Rule 4: the unit whose jobs alone a job of `gainer` may preempt (None: any unit rule 4b allows).

        A unit that comes first in the fair-share order is owed its subtree's turn: while a job of a less-served
        sibling (at any ancestor) could neither start nor preempt this tick, a job of `gainer` may take GPUs
        from jobs under that ancestor only (and from unallocated jobs), so a sibling whose jobs are easier to
        place does not win back from other branches the time its ancestor is owed on the waiting sibling's
        behalf. Returns that ancestor and the waiting sibling's project.
        """
        known = self._scopes.get(gainer.name)
        if known is not None and known[0] == len(self._blocked):
            return known[1]
        scope, waiting = None, ""
        for blocked in self._blocked.values():
            sides = sides_at_common_ancestor(blocked, gainer) if blocked is not gainer else None
            ancestor = sides[0].parent if sides is not None else None
            if ancestor is not None and (scope is None or len(ancestor.path) > len(scope.path)):
                scope, waiting = ancestor, blocked.name
        self._scopes[gainer.name] = (len(self._blocked), (scope, waiting))
        return scope, waiting

    def _reserve(self, job: PendingJob, charge: float) -> bool:
        """Rule 5 (and defragmentation): hold where the job can start earliest."""
        req = self._request(job)
        gainer = self.tree.nodes[job.project]
        leaves = self.leave_times.for_gainer(gainer, charge, self._whole_domain(job), self._on_one_host(job))
        outlook = earliest_start(req, self.capacity, leaves, self._host_filter(req), self.now,
                                 self._claimed_by_others(job.id))
        if defragments_for(req):
            moves = plan_defrag(
                job, req, self.capacity, earliest=outlook.start if outlook else math.inf,
                budget=self.defrag_budget, unavailable=set(self.leave_at), host_filter=self._host_filter,
                now=self.now, policy=self.policy, read=self.moves_read,
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

    def _claimed_by_others(self, job_id: str) -> Claimed:
        """Leaving job -> host -> its GPUs there that other jobs' claims hold: they go to the claimant once it
        has left, never to this job (rule 4's earmarks hold until the preemptor starts)."""
        gpu_host = self.capacity.gpu_host
        claimed: Claimed = {}
        for claimant, victims in self._victims_of.items():
            claim = self.claims.get(claimant)
            if claimant == job_id or not claim:
                continue
            for victim in victims:
                for gpu in victim.gpu_ids:
                    if gpu in claim:
                        per_host = claimed.setdefault(victim.id, {})
                        per_host[gpu_host[gpu]] = per_host.get(gpu_host[gpu], 0) + 1
        return claimed

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
                      protection=run_shield(job, self.policy))
        self.starts.append(start)
        claim = self.claims.pop(job.id, None)
        if claim:
            # Started (on its claim or elsewhere): what it did not use is free for others at once.
            self._let_go(job.id, claim, kept=gpu_ids)
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
                        protection=run_shield(job, self.policy))
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
        return ((bool(self._kept_out) or self._claimant_kept_out) and self.capacity.has_room()) \
            or self._victims_kept_out

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
            self.preemptions.append(Preemption.of(victim.job, StopCause(Cause.JOB, job.id), reason, grace=grace,
                                                  preemptor=job.id))
            self.leave_at[victim.job.id] = self.now + grace
            ready = max(ready, self.now + grace)
        self.victims.take({victim.job.id for victim in plan.victims})
        self._victims_of[job.id] = [victim.job for victim in plan.victims]
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
            # Only GPUs a victim gives back whole (`Capacity.releases`): a fraction's GPU stays with whoever
            # else shares it, and the plan counted none from it.
            from_victims = [gpu for victim in plan.victims
                            if capacity.releases(victim.job).get(host.name, NOTHING).gpus
                            for gpu in victim.job.gpu_ids if gpu_host.get(gpu) == host.name]
            from_victims.sort(key=lambda gpu: (gpu not in claim, capacity.gpu_position[gpu]))
            claim.update(from_victims[:min(count, released)])
            claim.update(capacity.earmark(job.id, host, count - released - len(own)))

    def _drop_claim(self, job: PendingJob, reason: str) -> None:
        self._let_go(job.id, self.claims.pop(job.id, set()))
        self.earmark_drops.append(EarmarkDrop(job.id, f"the GPUs held for it are free for others again: {reason}"))

    def _let_go(self, job_id: str, claim: set[str], kept: tuple[str, ...] = ()) -> None:
        """A claim's GPUs but those `kept` (the ones its job started on) are anyone's again, at once."""
        self.capacity.release_earmarks(job_id, claim)
        if not claim.issubset(kept):
            self._room_came_back()

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
            self.preemptions.append(Preemption.of(moved, StopCause(Cause.DEFRAG), reason, grace=grace,
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

"""When a tick could next decide something new if nothing happens in between.

A caller that runs ticks only when something happened — the simulator, the
budget what-if — asks a kept state, after each tick, until when a tick would
decide nothing new as long as no job is submitted, ends or is cancelled and
no host changes. The live loop ticks anyway; this is what lets the simulator
skip the ticks it would waste, with the rules stated here in the core, once.

What can change a decision with time alone, each at a moment known now:

- a running allocated job's protection ends (rule 4 may then take it, and a
  draining host lets it go, rule 7): counted from the first moment a waiting
  job's unit may take from the job's (the protection's end for a job that
  needs a whole NVLink domain, the shield's for any other), or at once while
  a waiting job could defragment (it may move any job past its protection;
  tried only while as many GPUs as it asks are free in total);
- after a tick that passed over a job between its declared checkpoints, or
  counted on one leaving at its next checkpoint, or held a job back for a
  reservation: rule 4 may take it again when the grace period before its
  next checkpoint opens (`model.checkpoint_window`), counted for the jobs
  whose checkpoints that tick read (passed over, or setting their leave time
  in rule 5's sweep: `ClusterState.window_jobs`); no search or sweep met the
  others, and none meets them at the next tick unless something counted here
  happens first;
- while a waiting job could defragment, the next checkpoint of each job a
  move may take (`defrag.plan_defrag` weighs what the moved jobs lose since
  their last checkpoint), and, where the last tick planned moves, the
  moments what a move takes there turns as the jobs' lost work grows (it
  takes them least work lost first: `ClusterState.moves_read`,
  `defrag.next_order_turn`);
- a job reaches its maximum runtime;
- a job preempted for a claim has not left a heartbeat timeout after its
  grace period (the claim then breaks, `earmarks.py`);
- the hourly cap on defragmentation lets another move through;
- an unallocated job's back-off after a preemption ends (`model.backoff`), if the
  GPUs it asks are free now (only an event or a busy tick frees more);
- a unit with allocated work waiting becomes less served, after charging its
  job, than a unit holding jobs past their protection (rule 4b); and while a
  reservation holds a job back, a unit that may take from another stops
  being allowed to (rule 5's sweep then counts the other's jobs as never
  leaving). Usage moves
  linearly between moments also known now: a running job adds its GPUs until
  its start leaves the window, a run that ended loses its GPUs once its start
  has, until its end has too (`window.py`). Between those moments the
  comparison is a line, solved for when it turns; at each of them the lines
  of the units above that project bend, and are followed on (up to
  `MAX_BENDS` of them: past the last, its moment is counted; while a
  reservation holds a job back, only to the first, as where it holds moves
  with more than these comparisons).

An unallocated job submitted while no GPUs it could use are free calls no
tick either (`waits_on_arrival`): it can neither preempt nor reserve, so a
tick would leave it waiting and decide for every other job what the last
tick decided (the moments above still hold); only GPUs coming back, at an
event or at one of those moments, can start it.

An unallocated job a tick started calls no tick by itself: it took GPUs that were
free when the allocated jobs were decided, so an allocated job that could take them
from it could have had them free then, on the same plan or a smaller one.

And right after a tick that stopped a job that is back in the queue at once
(its host went down): the next tick may start it elsewhere.

And right after a tick that preempted for a job while it held hosts for a
reservation: the victim search kept to the hosts the reservation left the
job (`search._host_filter`), but from the next tick on its claim is planned
anew from the jobs leaving for it, on any host (`Victims.after`), and may
take free GPUs there.

And right after a tick that started allocated jobs: it charged their units
for them (rule 2), and those charges are gone at the next tick, where such a
unit may then take from another. (A job holding a claim is charged at the
start of every tick alike, and so in the comparisons here.) Being taken from
is the other way round: a unit charged only for jobs it started is less
served at the next tick than when the walk compared, so no one may take more
from it; a unit charged for a claim is charged from the next tick's start,
before the jobs the walk met ahead of its claimant, who may then take from
it. Only a unit whose jobs the walk compared after such a charge (or before
such a claim's) compares otherwise (`Cycle.met`), and only if one of its jobs
could find victims at all where it may take then (`Victims.could_reach`) does
that call a tick. If a reservation
held a job back in that tick (a job holding a claim too, kept from free GPUs
elsewhere), the next tick is called whatever the comparisons say: where a
reservation can hold rests on who may take from whom, so it may hold nowhere
once the claims are charged up front, and the job held back may then start.

And when a reservation kept a job out of free GPUs or from victims (rule 5),
where it holds hosts moves with time too: with the order of the units (which
job is first), and whenever a job that may be made to leave at once (leaving
at now + its grace period) comes to leave after one that leaves at a set
time (a protection's end, a grace period's end, plus a grace period). Those
moments are counted as well. Otherwise ratios that drift while nothing can
start or preempt only move which job a reservation names until the next
event; that is not counted.

And when a less-served sibling's wait kept a job from preempting outside
their common ancestor (rule 4, `Cycle._preemption_scope`): that holds while
the sibling comes first, so the moments siblings swap places are counted too.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from operator import itemgetter

from .capacity import Capacity
from .defrag import free_for, migrations_left, movable, next_order_turn
from .fairshare import charge_of, gpu_amount, sides_at_common_ancestor
from .model import (
    RUNNING,
    Decisions,
    PendingJob,
    Policy,
    RunningJob,
    checkpoint_due,
    checkpoint_window,
    checkpoint_window_closes,
    whole_gpus_asked,
)
from .placement import JobRequest, find_placement, lanes, needs_whole_domain
from .preemption import Victims
from .reservation import grace_for, grace_period_for
from .search import any_host
from .state import ClusterState

# A moment just after a strict boundary (`now > deadline`), in the caller's seconds.
AFTER = 1e-6
# How many changes of slope to come a ratio line is followed through (`_lines`); past them, the moment the
# last of them comes is counted instead (a tick then looks again).
MAX_BENDS = 16
# How many of `_compared`'s answers a tree keeps (`UnitTree.derived`) before it forgets them all.
_DERIVED_KEPT = 256


# What named the moment `quiet_until` returns (`named`), for `bench/core_calls.py`.
STOPPED_BACK = "a job stopped is back in the queue"
CLAIM_ANEW = "a claim made beside a reservation is planned anew"
CLAIM_BREAKS = "a victim not gone a heartbeat after its grace"
MAX_RUNTIME = "a maximum runtime ends"
PROTECTION_ENDS = "a protection ends (drain or defragmentation)"
SHIELD_ENDS = "a shield ends"
CHECKPOINT_WINDOW = "a checkpoint window turns"
BACKOFF = "a back-off ends"
MOVABLE_CHECKPOINT = "a movable job checkpoints"
MOVE_ORDER = "a move's order turns"
DEFRAG_CAP = "the hourly move cap refills"
CHARGED_HELD = "look again: charged while a reservation held a job"
LEAVE_ORDER = "a reservation's leave order turns"
LOOK_AGAIN = "look again: the tick's charges (or ratios that cross at once)"
RATIOS = "usage ratios cross"
PROTECTION_TAKEN = "a protection ends where a unit may take it"
TERMS = (STOPPED_BACK, CLAIM_ANEW, CLAIM_BREAKS, MAX_RUNTIME, PROTECTION_ENDS, SHIELD_ENDS, CHECKPOINT_WINDOW, BACKOFF,
         MOVABLE_CHECKPOINT, MOVE_ORDER, DEFRAG_CAP, CHARGED_HELD, LEAVE_ORDER, LOOK_AGAIN, RATIOS, PROTECTION_TAKEN)


def quiet_until(state: ClusterState, *, now: float, policy: Policy, last: Decisions | None = None,
                fair_share: bool = True, named: list[str] | None = None) -> float:
    """The first moment after `now` at which a tick could decide otherwise with no event (inf: none).

    `last` is what the tick at `now` decided (None: no tick at `now`). With `named`, which of the moments below
    it is (one of `TERMS`; "" for inf) is appended to it (`bench/core_calls.py`).
    """
    waiting = bool(state.queues[True])
    if last is not None and any(p.job_id in state.pending for p in last.preemptions):
        # A job the tick stopped is back in the queue already (its host went down): the next tick may start it.
        return _named(now + AFTER, STOPPED_BACK, named)
    if last is not None and last.reservations and any(p.preemptor for p in last.preemptions):
        # A job preempted for on the hosts a reservation left it: the next tick plans its claim anew on any host.
        return _named(now + AFTER, CLAIM_ANEW, named)
    # The allocated jobs the tick started or preempted for, and their projects: it charged their units (rule 2).
    # At the next tick the first charges are gone, and the claims' come at the start of the tick, not where the
    # walk met the job; their units may compare otherwise than the tick saw them.
    charged: dict[str, str] = {}
    for job_id in [s.job_id for s in last.starts] + [p.preemptor for p in last.preemptions if p.preemptor] \
            if last is not None else ():
        job = state.running.get(job_id) or state.pending.get(job_id)
        if job is None:
            continue
        if job.allocated:
            charged[job_id] = job.project
    draining = state.capacity.draining_hosts()
    soonest, term = math.inf, ""
    losers: set[str] = set()
    # Projects running allocated jobs, protected or not: rule 5's sweep reads who may take from them.
    holders: set[str] = set()
    run_ends = state.run_ends(policy)
    # (`if x < soonest: soonest = x` is `soonest = min(soonest, x)`, without a call per running job.)
    turns_in_window = waiting and (state.passed_over or state.held_back)
    window_jobs = state.window_jobs
    # Protected jobs whose protection (or shield) ends count only from when a waiting job may take them
    # (`_protection_turns`), unless a waiting job could defragment (asked when the first such job is met).
    narrow: bool | None = None if fair_share and waiting else False
    protected: list[tuple[str, float, float]] = []
    for job in state.running.values():
        if job.state != RUNNING:
            if job.preempted_for in state.claimants and job.grace_ends is not None:
                deadline = job.grace_ends + policy.heartbeat_timeout + AFTER
                if now < deadline < soonest:
                    soonest, term = deadline, CLAIM_BREAKS
            continue
        if job.max_runtime is not None:
            limit = job.start_time + job.max_runtime
            if now < limit < soonest:
                soonest, term = limit, MAX_RUNTIME
        if not job.min_runtime > 0:
            continue
        holders.add(job.project)
        _, ends, shield_ends = run_ends[job.id]
        if ends > now:
            if ends < soonest:
                if draining and any(g.rsplit(":", 1)[0] in draining for g in job.gpu_ids):
                    soonest, term = ends, PROTECTION_ENDS
                    continue
                if narrow is None:
                    narrow = not _may_defragment(state, policy)
                if narrow:
                    protected.append((job.project, ends, shield_ends))
                elif waiting:
                    soonest, term = ends, PROTECTION_ENDS
        else:
            losers.add(job.project)
            if waiting and shield_ends > now:
                if shield_ends < soonest:
                    soonest, term = shield_ends, SHIELD_ENDS
            elif turns_in_window and job.id in window_jobs:
                turn = _window_turn(job, now, policy, state.held_back)
                if turn < soonest:
                    soonest, term = turn, CHECKPOINT_WINDOW
    soonest, term = _sooner(soonest, term, _first_backoff_that_counts(state, now, policy, fair_share, soonest), BACKOFF)
    if narrow is None and migrations_left(state.recent_defrag, now, policy) > 0:
        narrow = not _may_defragment(state, policy)
    if narrow is False and fair_share and waiting:
        soonest, term = _sooner(soonest, term, _next_movable_checkpoint(state, now, policy, soonest),
                                MOVABLE_CHECKPOINT)
        # What a move takes where the last tick planned moves turns with the jobs' lost work.
        read = state.moves_read
        if read:
            groups = [(group, read[group.domain]) for pool in state.capacity.pools.values()
                      for group in pool.groups.values() if group.domain in read]
            soonest, term = _sooner(soonest, term, next_order_turn(groups, now, policy, soonest, now + AFTER),
                                    MOVE_ORDER)
    if waiting and state.recent_defrag:
        refill = min(state.recent_defrag) + 3600.0
        if refill > now:
            soonest, term = _sooner(soonest, term, refill, DEFRAG_CAP)
    if fair_share and waiting and charged and state.held_back:
        # The tick charged units for the jobs it started or that claimed GPUs where the walk met them; the next
        # tick charges claims at its start. A reservation rests on who may take from whom (rule 4b), so where it
        # holds hosts, if anywhere, may differ then: look again.
        return _named(now + AFTER, CHARGED_HELD, named)
    if fair_share and waiting and state.held_back:
        soonest, term = _sooner(soonest, term, _leave_order_turns(state, now, policy), LEAVE_ORDER)
    turns = fair_share and waiting and (losers or state.held_back or state.scoped)
    # Last, and only if one ends before the soonest moment found so far: a protection ending later changes nothing.
    protected = [entry for entry in protected if entry[1] < soonest]
    if protected or turns:
        lines = _lines(state, now, policy, soonest)
        charges = state.pending_charges()
        if turns:
            turn = _turns(state, now, policy, losers, lines, charges, charged, holders)
            soonest, term = _sooner(soonest, term, turn, LOOK_AGAIN if turn == now + AFTER else RATIOS)
        if protected:
            soonest, term = _sooner(soonest, term, _protection_turns(state, now, policy, protected, lines, charges,
                                                                     soonest), PROTECTION_TAKEN)
    return _named(soonest, term, named)


def _sooner(soonest: float, term: str, moment: float, moment_term: str) -> tuple[float, str]:
    """The sooner of two moments, with what named it (the one found first on a tie)."""
    return (moment, moment_term) if moment < soonest else (soonest, term)


def _named(moment: float, term: str, named: list[str] | None) -> float:
    if named is not None:
        named.append(term)
    return moment


def _may_defragment(state: ClusterState, policy: Policy) -> bool:
    """Could a waiting job defragment (`defrag.defragments_for`) with the GPUs free now (`defrag.free_for`)?
    Only an event or a tick that decides something frees more, and either asks this again. The GPUs held for
    claims are free here (a tick lets its holds go), so this errs toward yes."""
    capacity = state.capacity
    free: dict[tuple, int] = {}
    # One job stands for all that ask alike (the state keeps them counted).
    for _, job in state.defrag_asks().values():
        key = (lanes(job, policy), job.gpu_types)
        total = free.get(key)
        if total is None:
            total = free[key] = free_for(key[0], key[1], capacity)
        if total >= job.gpus:
            return True
    return False


def _next_movable_checkpoint(state: ClusterState, now: float, policy: Policy, before: float) -> float:
    """The first checkpoint after now, before `before`, of a job defragmentation may move (`defrag.movable`):
    what a move loses drops to nothing there, so a move not worth its lost work (`defrag.plan_defrag`) may be
    worth it then."""
    soonest = before
    for job in state.running.values():
        if not job.checkpoint_every or not movable(job, now, policy):
            continue
        due = checkpoint_due(job, now + AFTER, policy)
        if due is not None and due < soonest:
            soonest = due
    return soonest


def waits_on_arrival(state: ClusterState, job: PendingJob, *, policy: Policy) -> bool:
    """Would a tick now leave this just-submitted job waiting and decide nothing else anew? Yes for an
    unallocated job asking whole GPUs (no fraction, no MIG instance) that no free GPUs could hold: it may
    not preempt (rule 6) nor hold GPUs by a reservation (rule 5), and a job that waits charges no unit. The
    GPUs held for claims count as free here (a tick lets its holds go), so this errs toward a tick. Ask it
    after `state.submit(job)`, of a kept state under the product's rules (`quiet_until`'s `fair_share`).
    """
    return job.min_runtime == 0 and not _room_now(job, policy, state.capacity)


def _first_backoff_that_counts(state: ClusterState, now: float, policy: Policy, fair_share: bool,
                               before: float) -> float:
    """When the first unallocated job whose back-off ends after now (and before `before`, what already wakes the
    caller) could start then; inf: none could.

    Back-offs are kept sorted by when they end. Under the product's rules (`fair_share`) a job that asks
    whole GPUs and no MIG instance counts only if its place is free now: nothing but an event (a run
    leaving, a job submitted, a host coming back) or a tick that decides something frees GPUs, and either
    asks this again. The GPUs held for claims are free here (the tick let its holds go), so this errs
    toward waking. A fraction or a MIG instance, or another decision function, counts as it ends.
    """
    backoffs = state.backoff_ends(policy)
    # By the state's class (`model.alike`): all `_room_now` reads of a job is in it.
    fits: dict[int, bool] = {}
    for until, job_id in backoffs[bisect_right(backoffs, now, key=itemgetter(0)):]:
        if until >= before:
            break
        job = state.pending.get(job_id)
        if job is None or not fair_share:
            return until
        number = state.classes[job_id]
        fit = fits.get(number)
        if fit is None:
            fit = fits[number] = _room_now(job, policy, state.capacity)
        if fit:
            return until
    return math.inf


def _room_now(job: PendingJob, policy: Policy, capacity: Capacity) -> bool:
    """Could an unallocated job start on the GPUs free now? Always for one asking no whole GPU (`whole_gpus_asked`:
    a fraction, a MIG instance or no GPU may find room however few are free); else if free GPUs could hold it.
    GPUs held for claims count as free (a tick lets its holds go), so this errs toward yes."""
    if not whole_gpus_asked(job):
        return True
    return capacity.has_room() and find_placement(JobRequest.of(job, policy), capacity, any_host) is not None


def _window_turn(job: RunningJob, now: float, policy: Policy, held_back: bool) -> float:
    """When rule 4 may next take a job past its shield that declared its checkpoints (`model.checkpoint_window`);
    with a reservation holding a job back, also when it stops being able to (rule 5's sweep then meets it
    later)."""
    grace = grace_for(job, policy)
    opens = checkpoint_window(job, now, grace, policy)
    if opens > now:
        return opens
    closes, reopens = checkpoint_window_closes(job, now, grace, policy)
    return closes + AFTER if held_back and closes < math.inf else reopens


def _leave_order_turns(state: ClusterState, now: float, policy: Policy) -> float:
    """When a job leaving `now + grace` would first come to leave after one leaving at a set time (rule 5's
    sweep then meets them in another order). One that leaves with it now leaves after it from the next tick on."""
    offsets = sorted({policy.grace_period, policy.unallocated_grace})
    soonest = math.inf
    run_ends = state.run_ends(policy)
    graces = {allocated: grace_period_for(allocated, policy) for allocated in (True, False)}
    for job in state.running.values():
        if job.state != RUNNING:
            fixed = [job.grace_ends] if job.grace_ends is not None else []
        else:
            fixed = []
            allocated = job.min_runtime > 0
            grace = graces[allocated]
            if allocated:
                _, protected, shielded = run_ends[job.id]
                if protected > now:
                    fixed.append(protected + grace)
                if shielded > now:
                    fixed.append(shielded + grace)
                else:
                    opens = checkpoint_window(job, now, grace, policy)
                    if opens > now:
                        fixed.append(opens + grace)
            if job.max_runtime is not None and job.start_time + job.max_runtime > now:
                fixed.append(job.start_time + job.max_runtime + grace)
        for at in fixed:
            for offset in offsets:
                turn = at - offset
                if now <= turn < soonest:
                    soonest = turn if turn > now else now + AFTER
    return soonest


def _turns(state: ClusterState, now: float, policy: Policy, losers: set[str], lines: tuple,
           charges_of: dict[str, list[float]], charged: dict[str, str], holders: set[str]) -> float:
    """When the fair-share comparisons the next tick makes could first come out otherwise.

    Rule 4b (`may_take_from`): a waiting unit may take from a unit holding jobs past their protection once,
    after charging its job, it is less served than that unit. While a reservation holds a job back, where it
    holds hosts rests on those comparisons the other way too: a unit that may take from another now stops once
    the other is no more served than it (rule 5's sweep then counts the other's jobs, protected or not
    (`holders`), as never leaving for it, and may hold hosts elsewhere, or nowhere).
    """
    tree, claimed, crossing = lines
    seen = _charges_unseen(state, tree, charged)
    reach = _reach(state, now, policy, tree, claimed)
    soonest = math.inf
    large: dict[str, list[float]] | None = None  # walked over the queue only once a pair is compared
    for gainer, charges, gainer_side, loser_side in _compared(tree, charges_of, losers):
        soonest = min(soonest, _first_turn(gainer_side, loser_side, charges, claimed, seen, reach, gainer, now,
                                           crossing))
        if large is None:
            large = _large_charges(state, policy)
        # Rule 4b's second clause (`may_take_on_own_path`): a job that needs a whole NVLink domain may take
        # from the loser once a unit on its own path below its side is less served than the loser's side.
        for node in _own_path(tree, gainer, gainer_side) if gainer in large else ():
            soonest = min(soonest, _first_turn(node, loser_side, large[gainer], claimed, seen, reach, gainer, now,
                                               crossing))
        if soonest <= now + AFTER:
            return soonest
    if state.held_back:
        for gainer, charges, gainer_side, holder_side in _compared(tree, charges_of, holders):
            # The largest charge stops taking first (the lines move alike whatever the charge).
            soonest = min(soonest, _last_take(gainer_side, holder_side, charges[-1], claimed, crossing))
            if large is None:
                large = _large_charges(state, policy)
            for node in _own_path(tree, gainer, gainer_side) if gainer in large else ():
                soonest = min(soonest, _last_take(node, holder_side, large[gainer][-1], claimed, crossing))
    if state.held_back or state.scoped:
        # Siblings with waiting allocated work swap places when their ratios cross: another job is first (and
        # another sibling's wait keeps the rest from preempting outside their ancestor, rule 4).
        levels = [tree.roots] + [node.children for node in tree.nodes.values() if node.children]
        for siblings in levels:
            waiting = [unit for unit in siblings if unit.entitled > 0 and _waits(unit, state)]
            for a in waiting:
                for b in waiting:
                    if a is not b and a.ratio_with(claimed[a.name]) > b.ratio_with(claimed[b.name]):
                        soonest = min(soonest, crossing(a, claimed[a.name], b, claimed[b.name], strict=False))
    return soonest


def _charges_unseen(state: ClusterState, tree, charged: dict[str, str]) -> Callable[[str], tuple[set, set]]:
    """For a waiting project, how the next tick's comparisons may differ from those the tick made for its jobs:
    (the units charged for a start or a claim when the tick compared any of them, which the next tick charges
    no more, or only at its start; the units charged for a claim only after the tick compared one of them, which
    the next tick charges from its start). `charged`: the allocated jobs the tick started or preempted for, and
    their projects (none: no tick, nothing charged).

    The walk met each project's jobs between two of its charges (`Cycle.met`); a job holding a claim when the
    tick began was charged from its start (`precharged`), and if it started, the next tick charges it no more.
    """
    if not charged:
        return lambda gainer: (set(), set())
    log, met = state.walk_charges
    nodes = tree.nodes
    known: dict[str, tuple[set, set]] = {}

    def path(job_id: str) -> tuple:
        """The units charged for a job of the log (none once it is gone)."""
        job = state.running.get(job_id) or state.pending.get(job_id)
        return nodes[job.project].path if job is not None and job.project in nodes else ()

    def seen(gainer: str) -> tuple[set, set]:
        found = known.get(gainer)
        if found is None:
            first, last = met.get(gainer, (0, len(log)))
            then = {node for job_id, project in charged.items() if job_id not in log for node in nodes[project].path}
            then.update(node for job_id in log[:last] for node in path(job_id))
            since = {node for job_id in log[first:] if job_id in state.claimants for node in path(job_id)}
            found = known[gainer] = (then, since)
        return found

    return seen


def _reach(state: ClusterState, now: float, policy: Policy, tree, claimed: dict[str, float]
           ) -> Callable[[str, float], bool]:
    """Could a waiting job of a project, charging a given amount, find victims at the next tick at all, were it
    allowed to take from every unit it may take from then? (`Victims.could_reach`: an upper bound.) The next
    tick's comparisons charge the jobs holding claims up front (`claimed`), as `Cycle` does; its free GPUs and
    candidates are at most these (the GPUs held for claims count as free here, no job is leaving yet)."""
    victims: Victims | None = None
    known: dict[tuple[str, float], bool] = {}

    def could(project: str, charge: float) -> bool:
        nonlocal victims
        found = known.get((project, charge))
        if found is None:
            if victims is None:
                victims = Victims(state.running_in_order(), tree, state.capacity, set(), now, policy,
                                  state.run_ends(policy))
            # One job per class stands for all alike (`model.alike`: what it asks, its project, its charge).
            requests = {state.classes[job.id]: job for job in state.queues[True].get(project, ())
                        if job.id not in state.claimants and charge_of(job) == charge}
            with _charged_up_front(tree, claimed):
                found = any(victims.could_reach(JobRequest.of(job, policy), tree.nodes[project], charge)
                            for job in requests.values())
            known[(project, charge)] = found
        return found

    return could


@contextmanager
def _charged_up_front(tree, claimed: dict[str, float]) -> Iterator[None]:
    """The tree's units charged for the jobs holding claims, as a tick charges them at its start (`Cycle`), and
    their usage as it was afterwards, bit for bit."""
    usage = {name: node.usage for name, node in tree.nodes.items()}
    for name, extra in claimed.items():
        if extra:
            tree.nodes[name].usage += extra
    try:
        yield
    finally:
        for name, node in tree.nodes.items():
            node.usage = usage[name]


def _compared(tree, charges_of: dict[str, list[float]], others: set[str]) -> Iterator[tuple]:
    """(Gainer project, its charges, its side, the other's side) for each waiting project and each of `others`
    that rule 4b compares at their common ancestor (both sides entitled), in a stable order; each pair of sides
    once per gainer (what the callers count depends on nothing else: projects under the same side compare alike)."""
    key = ("compared", tuple(sorted(charges_of)), tuple(sorted(others)))
    pairs = tree.derived.get(key)
    if pairs is None:
        # The pairs follow from the tree's shape and the two sets alone; the sets recur from call to call.
        pairs = []
        for gainer in key[1]:
            node = tree.nodes[gainer]
            compared = set()
            for other in key[2]:
                sides = sides_at_common_ancestor(node, tree.nodes[other])
                if (sides is not None and sides[1] not in compared and sides[0].entitled > 0
                        and sides[1].entitled > 0):
                    compared.add(sides[1])
                    pairs.append((gainer, sides[0], sides[1]))
        if len(tree.derived) >= _DERIVED_KEPT:
            tree.derived.clear()
        tree.derived[key] = pairs
    for gainer, gainer_side, other_side in pairs:
        yield gainer, charges_of[gainer], gainer_side, other_side


def _lines(state: ClusterState, now: float, policy: Policy, before: float) -> tuple:
    """(The org tree at `now`, what waiting for victims charges each unit at every tick, and `crossing`: when
    one unit's ratio line first falls below another's, `lines_cross`). The lines are followed only up to
    `before` (a moment counted already): a crossing named at or after it only says "not before it"."""
    # The tick at `now` summed the same usage: it is reused, not summed again (`ClusterState.usage_tree`).
    tree = state.usage_tree(now, policy.window)
    running = state.running_in_order()
    # How fast each unit's usage grows now: its running allocated jobs' GPUs, less what slides out; and when
    # that changes: a running job's usage stops growing once its start leaves the window.
    rate = dict.fromkeys(tree.nodes, 0.0)
    edge = now - policy.window
    running_bends = []
    for job in running:
        if job.allocated and job.start_time > edge:
            gpus = gpu_amount(len(job.gpu_ids), job.gpu_milli)
            rate[job.project] += gpus
            if job.start_time + policy.window < before:
                running_bends.append((job.start_time + policy.window, job.project, -gpus))
    running_bends.sort()
    window = state.window
    if window is not None:
        for name in tree.nodes:
            rate[name] += window.rate(name, True)
    claimed = dict.fromkeys(tree.nodes, 0.0)
    for job in state.claimants.values():
        if job.allocated:
            claimed[job.project] += charge_of(job)
    for node in reversed(list(tree.top_down())):
        if node.parent is not None:
            rate[node.parent.name] += rate[node.name]
            claimed[node.parent.name] += claimed[node.name]
    # The changes of slope to come before `before`, from both, in time order, at most `MAX_BENDS` of them, and
    # where the lines stop being followed (taken when a line is first followed). While a reservation holds a
    # job back, where it holds moves with more than the comparisons counted here (its sweep's order of
    # leaving, its ties between hosts): the lines are followed only to their first bend, and a tick looks again
    # there.
    bends: list[tuple[float, str, float]] = []
    most = 0 if state.held_back else MAX_BENDS
    stretches: dict[tuple[str, str], list] = {}
    # Pairs of units compared alike for many pairs of projects under them ask the same again.
    known: dict[tuple, float] = {}

    def crossing(low, low_extra: float, high, high_extra: float = 0.0, strict: bool = True) -> float:
        key = (low.name, low_extra, high.name, high_extra, strict)
        found = known.get(key)
        if found is None:
            found = known[key] = _crossing(low, low_extra, high, high_extra, strict)
        return found

    def _crossing(low, low_extra: float, high, high_extra: float, strict: bool) -> float:
        if not bends:
            _take_bends()
        if len(bends) == 1:
            # No bend before the lines stop being followed: one straight piece, as `_stretches` would give it.
            known = [(now, bends[0][0], 0.0, rate[high.name] / high.entitled - rate[low.name] / low.entitled)]
        else:
            key = (low.name, high.name)
            known = stretches.get(key)
            if known is None:
                known = stretches[key] = _stretches(low, high, rate, now, bends, tree)
        return lines_cross(low, low_extra, high, high_extra, known, strict)

    def _take_bends() -> None:
        later = window.bends_after(now) if window is not None else iter(())
        for bend in heapq.merge(running_bends, later):
            if bend[0] >= before or len(bends) == most:
                bends.append((bend[0], "", 0.0))  # followed no further
                return
            bends.append(bend)
        bends.append((math.inf, "", 0.0))  # no more: the last slopes hold for ever

    return tree, claimed, crossing


def _stretches(low, high, rate: dict[str, float], now: float, bends: list[tuple[float, str, float]],
               tree) -> list[tuple[float, float, float, float]]:
    """`low`'s ratio line less `high`'s, piece by piece: (from when, until when, how much it has fallen by then
    since `now`, how fast it falls), changing where the usage of a project under either bends (`bends`, the
    last at inf); the last piece ends at the last bend known (`MAX_BENDS`) if more may follow."""
    slope_low, slope_high = rate[low.name], rate[high.name]
    pieces = []
    start, fallen = now, 0.0
    closing = slope_high / high.entitled - slope_low / low.entitled
    nodes = tree.nodes
    for when, project, change in bends:
        node = nodes.get(project)
        path = node.path if node is not None else ()
        if when < math.inf and low not in path and high not in path and when != bends[-1][0]:
            continue  # neither line bends here
        pieces.append((start, when, fallen, closing))
        if when == math.inf:
            break
        fallen += closing * (when - start)
        start = when
        if low in path:
            slope_low += change
        elif high in path:
            slope_high += change
        closing = slope_high / high.entitled - slope_low / low.entitled
    return pieces


def _own_path(tree, gainer: str, gainer_side) -> list:
    """The units with an entitlement on the gainer's own path below its side: rule 4b's second clause
    (`may_take_on_own_path`) compares them for a job that needs a whole NVLink domain."""
    return [node for node in tree.nodes[gainer].path[len(gainer_side.path):] if node.entitled > 0]


def _protection_turns(state: ClusterState, now: float, policy: Policy, protected: list[tuple[str, float, float]],
                      lines: tuple, charges: dict[str, list[float]], before: float) -> float:
    """When the first of these protected jobs (project, protection end, shield end) could first be preempted, if
    before `before` (else `before`): they are taken by when their protection ends, and none counts before that.

    A job past its protection is a victim only for a waiting job whose unit may take from its own (rule 4b):
    a job that needs a whole NVLink domain from its protection's end (also by the second clause), any other
    from its shield's end too. Until then it changes nothing a tick decides: where rule 5 holds moves with its
    leaving time, which does not jump there (the caller keeps the moment when a waiting job could
    defragment, or the job's host drains). The first moment a unit may take from another is now or when
    their lines cross (`lines_cross`), for the smallest of its charges (a larger one crosses later).
    """
    tree, claimed, crossing = lines
    large: dict[str, list[float]] | None = None  # walked over the queue only once a pair is compared

    def first_take(gainer_side, loser_side, charge: float) -> float:
        gainer_charge = charge + claimed[gainer_side.name]
        loser_charge = claimed[loser_side.name]
        if gainer_side.ratio_with(gainer_charge) < loser_side.ratio_with(loser_charge):
            return now
        return crossing(gainer_side, gainer_charge, loser_side, loser_charge)

    # Loser project -> (first moment any waiting job may take from it, first moment a whole-domain one may).
    firsts: dict[str, tuple[float, float]] = {}
    soonest = before
    for project, ends, shield_ends in sorted(protected, key=itemgetter(1)):
        if ends >= soonest:
            break
        first = firsts.get(project)
        if first is None:
            any_job = whole_job = math.inf
            loser = tree.nodes[project]
            for gainer, amounts in charges.items():
                sides = sides_at_common_ancestor(tree.nodes[gainer], loser)
                if sides is None or not amounts or sides[1].entitled <= 0:
                    continue
                gainer_side, loser_side = sides
                if large is None:
                    large = _large_charges(state, policy)
                whole = large.get(gainer)
                # Side by side (clause 1), smallest charge first: the one that may take soonest.
                if gainer_side.entitled > 0:
                    any_job = min(any_job, first_take(gainer_side, loser_side, amounts[0]))
                    if whole:
                        whole_job = min(whole_job, first_take(gainer_side, loser_side, whole[0]))
                for node in _own_path(tree, gainer, gainer_side) if whole else ():
                    whole_job = min(whole_job, first_take(node, loser_side, whole[0]))
            first = firsts[project] = (any_job, whole_job)
        any_job, whole_job = first
        soonest = min(soonest, max(ends, whole_job), max(ends, shield_ends, any_job))
    return soonest


def _large_charges(state: ClusterState, policy: Policy) -> dict[str, list[float]]:
    """Project -> the charges of its pending allocated jobs that need a whole multi-host NVLink domain
    (`placement.needs_whole_domain`, as the tick asks it); jobs holding a claim aside, as in `pending_charges`.
    The caller must not change it."""
    capacity = state.capacity
    found: dict[str, set[float]] = {}
    # Whether jobs asking alike need a whole domain: what `needs_whole_domain` reads of a job. That depends on the
    # policy and the capacity's shape alone, so it is kept with what the ticks carry on this capacity while the
    # policy is the same object (`BoundedSearch._start_search`); a new capacity or policy starts afresh. So is
    # the answer, while the pending jobs ask the same (`ClusterState.asks_version`).
    carried = capacity.carried
    if carried is not None and carried["policy"] is policy:
        whole: dict[tuple, bool] = carried["whole_domain_asks"]
        known = carried.get("large_charges")
        if known is not None and known[0] == state.asks_version:
            return known[1]
    else:
        whole = {}
    # One job per project and ask stands for all that ask alike (the state keeps them counted).
    for project, asks in state.pending_asks().items():
        for _, job in asks.values():
            key = (job.gpus, job.gpus_per_host, job.gpu_types, lanes(job, policy))
            large = whole.get(key)
            if large is None:
                large = whole[key] = needs_whole_domain(JobRequest.of(job, policy), capacity)
            if large:
                found.setdefault(project, set()).add(charge_of(job))
    result = {project: sorted(charges) for project, charges in found.items()}
    if carried is not None and carried["policy"] is policy:
        carried["large_charges"] = (state.asks_version, result)
    return result


def lines_cross(low, low_extra: float, high, high_extra: float, stretches: list, strict: bool = True) -> float:
    """When `low`'s ratio (charged `low_extra` more) first falls below `high`'s (charged `high_extra`), following
    their lines piece by piece (`_stretches`); the end of the last piece known if not by then (inf: never).

    `strict`: what turns needs `low` strictly below (just after the lines meet); else it turns where they meet
    (rule 4b stops letting a unit take from another there), and the moment named is just before (a tick at
    a boundary the lines meet on must not be skipped for rounding)."""
    # (usage_low + extra + rate_low·t) / entitled_low < (usage_high + extra + rate_high·t) / entitled_high
    behind = low.ratio_with(low_extra) - high.ratio_with(high_extra)
    end = math.inf
    for start, end, fallen, closing in stretches:
        if closing > 0:
            meet = start + (behind - fallen) / closing
            turns = meet + AFTER if strict else max(meet - AFTER, stretches[0][0] + AFTER)
            if turns < end:
                return turns
    return end


def _first_turn(gainer_side, loser_side, charges: list[float], claimed: dict[str, float],
                seen: Callable[[str], tuple[set, set]], reach: Callable[[str, float], bool], gainer: str, now: float,
                crossing) -> float:
    """When one of the gainer's waiting jobs (each charging its own amount) first may take from the loser.

    `seen(gainer)`: (the units charged when the tick compared the gainer's jobs, which the next tick charges no
    more or only at its start; those charged for claims after it compared one) (`_charges_unseen`). `reach`:
    could the gainer's jobs charging an amount find victims at all then (`_reach`)?

    `charges` are smallest first, and the gainer's ratio and the moment its line crosses the loser's only grow
    with the charge: the jobs that may take now come first, and the first charge after them turns soonest.
    """
    loser_charge = claimed[loser_side.name]
    for charge in charges:
        # Jobs holding claims are charged at the start of every tick (engine.py, `precharged`).
        gainer_charge = charge + claimed[gainer_side.name]
        if gainer_side.ratio_with(gainer_charge) < loser_side.ratio_with(loser_charge):
            charged, charged_for_claims = seen(gainer)
            if (gainer_side in charged or loser_side in charged_for_claims) and reach(gainer, charge):
                return now + AFTER  # the tick's charges may have kept it from taking: look again
            continue  # it may, and the tick just now looked with these ratios
        return crossing(gainer_side, gainer_charge, loser_side, loser_charge)
    return math.inf


def _last_take(gainer_side, holder_side, charge: float, claimed: dict[str, float], crossing) -> float:
    """When a gainer charging `charge` that may take from the holder now (rule 4b) first may not (inf: it may
    not now)."""
    gainer_charge = charge + claimed[gainer_side.name]
    holder_charge = claimed[holder_side.name]
    if gainer_side.ratio_with(gainer_charge) < holder_side.ratio_with(holder_charge):
        return crossing(holder_side, holder_charge, gainer_side, gainer_charge, strict=False)
    return math.inf


def _waits(node, state: ClusterState) -> bool:
    """Does a unit (or a unit under it) have allocated jobs waiting?"""
    queues = state.queues[True]
    stack = [node]
    while stack:
        unit = stack.pop()
        if unit.name in queues:
            return True
        stack.extend(unit.children)
    return False

"""Searching, bounded (DESIGN §6b): what one tick already showed stands for the rest of it.

Capacity and victims only shrink while a tick decides, so a failure to fit
stands for the rest of it, and a failure to find victims until the walk next
charges a unit (a unit charged may then be taken from, rule 4b): a class of
job that did not fit, or found nothing to preempt, is not searched again for
a job of that class as big or bigger; jobs asking the same thing then wait
by a lookup. A class holds all a search reads of a job but its size, so
that a larger job of the class fails wherever a smaller one did
(`_classify`; tests/unit/core/test_tick_memos.py checks each tick against one
deciding every job in full). Jobs that wait alike share one `Wait`, so a
reason is written once per kind of waiting job.

`BoundedSearch` is the memo half of the tick's `Cycle` (engine.py): the
decisions are made there, the waits are explained in explain.py.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass
from typing import NamedTuple

from . import reasons
from .capacity import Capacity, HostState
from .fairshare import charge_of
from .model import ANY, DOMAIN, UP, WHOLE_GPU_MILLI, PendingJob, backed_off_until
from .placement import (
    HostFilter,
    JobRequest,
    Placement,
    find_placement,
    lanes,
    needs_whole_domain,
    pools_for,
    pools_in,
    spans_hosts,
)

# Which reservations a job may start under (`BoundedSearch._access`).
Access = int | tuple[int, int]


class FailedSearch(NamedTuple):
    """A victim search that found nothing (`BoundedSearch._no_victims`): the job's GPUs and charge, whether it
    passed over a job between its checkpoints, and how many charges the walk had made by then (`_charged`)."""

    gpus: int
    charge: float
    passed_over: bool
    charges: int

    def stands_for(self, job: PendingJob) -> bool:
        """Does it stand for this job of the same project and class: no smaller, charging no less?"""
        return job.gpus >= self.gpus and charge_of(job) >= self.charge

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


class BoundedSearch:
    """What the tick has learnt so far about kinds of jobs, and the searches it spares.

    A mixin of `Cycle`, which provides `capacity`, `policy`, `now`, `owed`,
    `in_flight`, `waits`, `reservation_attempts` and rule 5's holds
    (`_reserved`, `_reserved_until`).
    """

    def _start_search(self, classes: dict[str, int]) -> None:
        # What depends only on a job, the policy and the capacity's shape, from the last tick on this capacity
        # (a kept state's): a job's request (kept while the job is the same object), the classes of jobs by what
        # they ask, what jobs of each of the state's classes are (`_classes`, `_shape`), and which of them no
        # healthy capacity could hold; and which asks need a whole domain, for `quiet_until`
        # (`quiet._large_charges`).
        capacity, policy = self.capacity, self.policy
        carried = capacity.carried if capacity.carried is not None and capacity.carried["policy"] is policy \
            else {"policy": policy, "jobs": {}, "classes": {}, "class_keys": {}, "shapes": {}, "key_objects": {},
                  "never": {}, "whole_domain_asks": {}, "backoffs": {}, "no_room": {}}
        capacity.carried = carried
        self._carried_jobs: dict[str, tuple[PendingJob, JobRequest]] = carried["jobs"]
        # Requeued unallocated job id -> (the job, until when it backs off, its Wait while it does), from the last
        # tick on this capacity, and this tick's, handed on at the end (`carry`).
        self._carried_backoffs: dict[str, tuple[PendingJob, float, Wait]] = carried["backoffs"]
        self._backoffs_seen: dict[str, tuple[PendingJob, float, Wait]] = {}
        # This tick's: job id -> (job, its request), handed on at the end (`carry`).
        self._jobs_seen: dict[str, tuple[PendingJob, JobRequest]] = {}
        self._requests: dict[str, JobRequest] = {}
        # The state's class number -> (kind, placement class, preemption class) of its jobs (`_classify`), and
        # -> (needs a whole domain, fits on one host) (`_shape`).
        self._class_keys: dict[int, tuple[tuple, tuple, tuple]] = carried["class_keys"]
        self._shapes: dict[int, tuple[bool, bool]] = carried["shapes"]
        self._key_objects: dict[tuple, tuple] = carried["key_objects"]
        self._classes_by_fields: dict[tuple, tuple[tuple, tuple, tuple]] = carried["classes"]
        # (GPUs, kind) -> why no healthy capacity could ever hold such a job ("" if some could).
        self._never_facts: dict[tuple, str] = carried["never"]
        # (project, kind, GPUs, reservations) -> the Wait of jobs that wait for room alike (`_waiting`): this tick's,
        # and the last tick's on this capacity, whose objects are handed out again (one per key, as if made anew).
        self._waiting_alike: dict[tuple, Wait] = {}
        self._carried_no_room: dict[tuple, Wait] = carried["no_room"]
        # Pending job id -> the number of its class: jobs alike in all their decision reads but who they are
        # (`model.alike`) share one (`ClusterState.classes`).
        self._class_of = classes
        # Class -> what its jobs are known to wait for (see `_known_to_wait`); cleared when room comes back.
        self._verdicts: dict[int, Wait] = {}
        # (GPUs, kind) -> the Wait of jobs no healthy capacity could hold, or None if some could.
        self._never_waits: dict[tuple, Wait | None] = {}
        self._resting: dict[int, Wait] = {}
        self._no_fit: dict[tuple, int] = {}
        # (project, class, reservations, whole domain, on one host) -> the last job of them that found nothing to
        # preempt.
        self._no_victims: dict[tuple, FailedSearch] = {}
        # The same key -> every such search this tick, in order, for the reasons (`_search_for_reason`; kept only
        # when the tick explains): neither room coming back (`_room_came_back`) nor a later search of a larger job
        # forgets that a job's found none.
        self._searched: dict[tuple, list[FailedSearch]] = {}
        # Units charged so far this tick by the allocated walk (`_charged`): a failed victim search stands only
        # until the next charge.
        self._charges = 0
        # (placement class, reservations) of jobs only a reservation kept from starting.
        self._kept_out: set[tuple] = set()
        self._claimant_kept_out = False


    def _on_one_host(self, job: PendingJob) -> bool:
        """Does the job fit on one host? Such a job waits for every victim's declared checkpoints, one that needs
        several hosts only for victims holding whole hosts (`model.waits_for_checkpoints`)."""
        return self._shape(job)[1]

    def _whole_domain(self, job: PendingJob) -> bool:
        """Does the job need at least one whole multi-host NVLink domain (rule 5's large jobs)?

        Such a job may preempt a job once its protection ends, though earlier preemptions still shield it from
        others (`model.shield`), so the large jobs' bound (cap + grace + tick) holds.
        """
        return self._shape(job)[0]

    def _shape(self, job: PendingJob) -> tuple[bool, bool]:
        """(Does it need a whole multi-host domain, does it fit on one host): what they read of a job is all in
        its class (`model.alike`), so they are worked out once per class on this capacity."""
        number = self._class_of[job.id]
        shape = self._shapes.get(number)
        if shape is None:
            req = self._request(job)
            shape = self._shapes[number] = (needs_whole_domain(req, self.capacity), not spans_hosts(req, self.capacity))
        return shape

    def _request(self, job: PendingJob) -> JobRequest:
        req = self._requests.get(job.id)
        if req is None:
            carried = self._carried_jobs.get(job.id)
            req = carried[1] if carried is not None and carried[0] is job else JobRequest.of(job, self.policy)
            self._requests[job.id] = req
            self._jobs_seen[job.id] = (job, req)
        return req

    def carry(self) -> None:
        """Hand the requests (and back-offs) of the jobs this tick looked at on to the next tick on this capacity."""
        self.capacity.carried["jobs"] = self._jobs_seen
        self.capacity.carried["backoffs"] = self._backoffs_seen
        self.capacity.carried["no_room"] = self._waiting_alike

    def _backoff(self, job: PendingJob) -> tuple[float, Wait]:
        """Until when a requeued unallocated job backs off (`model.backed_off_until`), and the Wait of it while it
        does. Both follow from the job and the policy alone, so they are carried to the next tick on this capacity
        while the job is the same object (a pending job changes by being replaced)."""
        carried = self._carried_backoffs.get(job.id)
        if carried is None or carried[0] is not job:
            until = backed_off_until(job, self.policy)
            carried = (job, until, Wait(BACKING_OFF, f"{job.preemptions}", until))
        self._backoffs_seen[job.id] = carried
        return carried[1], carried[2]

    def _host_filter(self, req: JobRequest) -> HostFilter:
        """Rule 5: allocated jobs protected beyond a reservation may not start on its hosts."""
        if not self._reserved or req.protected_for == 0:
            return any_host
        ends = self.now + req.protected_for

        def allowed(host: HostState) -> bool:
            return host.reserved_until is None or host.reserved_for == req.job_id or ends <= host.reserved_until

        return allowed

    def _kind(self, job: PendingJob) -> tuple:
        """What placement and the reasons depend on but the GPU count (one shared object per kind)."""
        return self._classes(job)[0]

    def _classes(self, job: PendingJob) -> tuple[tuple, tuple, tuple]:
        """(kind, placement class, preemption class); see `_classify`."""
        return self._class_keys.get(self._class_of[job.id]) or self._classify(job)

    def _classify(self, job: PendingJob) -> tuple[tuple, tuple, tuple]:
        """A job's kind, and the classes whose failures this tick stand for it (once per kind of job).

        Failures are remembered per class with the smallest GPU count that
        failed: capacity and victims only shrink while a tick decides (but
        for a claim let go, `_room_came_back`, and victims' units charged,
        `_charged`), so a larger job of the same class fails too. A job that
        fits on one host in every pool it may use is placed and preempts for
        the same way whatever its topology and shape. A larger one is placed
        on one host, across hosts of one domain or across domains pool by
        pool, so its class holds that shape in every pool; where one domain
        could hold it in every pool it preempts within one domain whatever
        its topology.
        """
        short = job.min_runtime <= self.policy.fast_lane_max_min_runtime
        fields = (job.gpus, job.gpus_per_host, job.gpu_milli, job.gpu_types, job.topology, job.min_runtime > 0, short,
                  job.cpus, job.memory_gib, job.mig_profile)
        keys = self._classes_by_fields.get(fields)
        if keys is None:
            keys = self._classes_by_fields[fields] = self._classes_of(job, lanes(job, self.policy))
        self._class_keys[self._class_of[job.id]] = keys
        return keys

    def _classes_of(self, job: PendingJob, sides: tuple[bool, ...]) -> tuple[tuple, tuple, tuple]:
        # With CPU or memory asked, a class is the exact ask: a job asking fewer CPUs or less memory may fit
        # where one asking more did not, and more GPUs need fewer CPUs per GPU (on each host it spans).
        exact = (job.gpus, job.cpus, job.memory_gib) if job.cpus or job.memory_gib else None
        milli = job.gpu_milli if job.gpus == 1 else WHOLE_GPU_MILLI
        mig = job.mig_profile
        # The core reads a job's topology only as "one domain or not" (placement, victims, rule 5's sweep and the
        # reasons alike): `preferred` jobs are placed, preempt for and wait as `any` jobs do, in one class.
        topology = DOMAIN if job.topology == DOMAIN else ANY
        kind = (job.gpus_per_host, milli, job.gpu_types, topology, sides, exact, mig)
        pools = [pool for side in pools_in(self.capacity, sides, job.gpu_types) for pool in side]
        smallest_host = min((pool.largest_host for pool in pools), default=0)
        largest_group = max((pool.largest_group for pool in pools), default=0)
        per_host = job.gpus_per_host
        if (per_host is None and job.gpus <= smallest_host) or (per_host is not None and per_host >= job.gpus):
            placing = preempting = (None, milli, job.gpu_types, ONE_HOST, sides, exact, mig)
        elif job.gpus <= largest_group:
            # Between the smallest host and the largest domain, a job's shape may differ from pool to pool (one
            # host in one, several in another; one domain or several): only jobs of the same shape in every pool
            # fail alike by size, so the shape is part of the class.
            # Per pool: (on one host, in one domain); not `_shape`, which is the job's across all pools.
            per_pool = tuple((per_host is None and job.gpus <= pool.largest_host, job.gpus <= pool.largest_group)
                             for pool in pools)
            placing = (*kind, per_pool)
            # It preempts within one domain whatever its topology only where one domain could hold it in every
            # pool; elsewhere a `domain` job may not span domains and an `any` job may.
            within = DOMAIN if all(in_domain for _, in_domain in per_pool) else topology
            preempting = (per_host, milli, job.gpu_types, within, sides, exact, mig, per_pool)
        else:
            placing = preempting = kind
        return tuple(self._key_objects.setdefault(k, k) for k in (kind, placing, preempting))

    def _access(self, job: PendingJob) -> Access:
        """Which reservations the job may start under: those lasting at least its protection. 0: every one (as
        with none); else (how many there are, how many of them it may not start under: those ending first).
        Reservations are only added while a tick decides, so that pair names one set of them: failures remembered
        under it (`_no_fit`, `_no_victims`) stand only for jobs kept out of the same reservations."""
        reserved_until = self._reserved_until
        if not reserved_until or not job.min_runtime > 0:
            return 0
        # The request carries `protected_for(job, policy)`, worked out once per job (kept across ticks).
        req = self._requests.get(job.id)
        if req is None:
            req = self._request(job)
        kept_out = bisect_left(reserved_until, self.now + req.protected_for)
        return (len(reserved_until), kept_out) if kept_out else 0

    def _kept_out_of(self, job: PendingJob) -> list[str]:
        """The jobs whose reservations this one may not start under, by id: the hosts they hold are closed to it,
        for starting and for preempting (`_host_filter`)."""
        allowed = self._host_filter(self._request(job))
        return sorted({host.reserved_for for host in self._reserved if not allowed(host)})

    def _known_to_wait(self, job: PendingJob) -> bool:
        """This tick already showed the job can't start, preempt or reserve: record that it waits.

        The common case, made cheap: the order's tail is long. The verdict
        is kept per kind of job (what it asks, not who it is), since the
        failures it rests on stay failures for the rest of the tick.
        """
        if job.id in self.owed:
            return False
        alike = self._class_of[job.id]
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
        never = self._never_waits.get((job.gpus, kind), False)
        if never is not None and (never is not False or self._never_wait(job) is not None):
            return None  # no healthy capacity could hold it: decided in full, which records that
        access = self._access(job)
        if not self._fits_nowhere(job, (placing, access)):
            return None
        if allocated and not self._no_victims_for(job, preempting, access):
            return None
        return self._waiting(job, kind, access)

    def _no_victims_for(self, job: PendingJob, preempting: tuple, access: Access) -> bool:
        """Did a job of its project and class, no bigger and charging no more, find nothing to preempt since the
        last charge (`_charged`)? Then this one would find nothing either. With reasons, the search must also
        tell why (`_tells_why`), or the job searches itself."""
        failed = self._failed_search(job, preempting, access)
        return failed is not None and failed.charges == self._charges and (
            not self.policy.explain or self._tells_why(failed, job))

    def _tells_why(self, failed: FailedSearch, job: PendingJob) -> bool:
        """Is a failed victim search that stands for this job also its reason (explain.py: it passed over jobs
        between their declared checkpoints, or not)? One that passed over none is: a search passes over only
        jobs that could have made room, fewer for a larger job or one charging more (fewer units may be taken
        from). One that passed over some is only for a job of its GPUs and charge: the jobs passed over may be of
        no use to another. (Until the next charge the walk takes a project's jobs one after another, so they
        search in one scope, `Cycle._preemption_scope`; and jobs of one class ask and charge alike, so its
        verdict is theirs.)"""
        return not failed.passed_over or (failed.gpus == job.gpus and failed.charge == charge_of(job))

    def _search_for_reason(self, job: PendingJob, preempting: tuple, access: Access) -> FailedSearch | None:
        """For its reason: the last failed victim search this tick of a job of its project and class that was no
        bigger and charged no more (`_searched`: before a charge or after, before room came back or after), if
        any; whether it passed over jobs between their declared checkpoints is its `passed_over`."""
        searched = self._searched.get(self._no_victims_key(job, preempting, access), ())
        return next((failed for failed in reversed(searched) if failed.stands_for(job)), None)

    def _failed_search(self, job: PendingJob, preempting: tuple, access: Access) -> FailedSearch | None:
        """The last failed victim search of a job of its project and class, if it was no bigger and charged no
        more (`_no_victims`)."""
        failed = self._no_victims.get(self._no_victims_key(job, preempting, access))
        return failed if failed is not None and failed.stands_for(job) else None

    def _found_none(self, job: PendingJob, preempting: tuple, access: Access, failed: FailedSearch) -> None:
        """A victim search for the job found nothing: remembered for jobs alike (`_no_victims_for`) and for the
        reasons (`_search_for_reason`)."""
        key = self._no_victims_key(job, preempting, access)
        self._no_victims[key] = failed
        if self.policy.explain:
            self._searched.setdefault(key, []).append(failed)

    def _charged(self) -> None:
        """The allocated walk charged units for a job (rule 2). A unit charged is more served than before, so a
        job of another unit may now take from it (rule 4b): what was known of failed victim searches, and the
        verdicts of allocated jobs resting on them, hold no longer. (Room only shrinks, so what did not fit
        still does not.)"""
        self._charges += 1
        self._verdicts.clear()

    def _no_victims_key(self, job: PendingJob, preempting: tuple, access: Access) -> tuple:
        """What a failed victim search stands for (`_no_victims`): jobs alike in all of it search alike."""
        return job.project, preempting, access, *self._shape(job)

    def _waiting(self, job: PendingJob, kind: tuple | None = None, access: Access | None = None) -> Wait:
        """The shared `Wait` of jobs that wait for room like this one."""
        kind = kind or self._kind(job)
        access = self._access(job) if access is None else access
        key = (job.project, id(kind), job.gpus, access)
        wait = self._waiting_alike.get(key)
        if wait is None:
            wait = self._waiting_alike[key] = self._carried_no_room.get(key) or Wait(NO_ROOM)
        return wait

    def _waits_alike(self, job: PendingJob, kind: tuple, access: Access) -> None:
        """An allocated job decided in full waits: its placement and victim search failed and no rule 5 attempt
        is left. That is the verdict `_verdict` would now give every job of its class (they ask, charge and may
        start under the reservations it does: `model.alike`) until the next charge, reservation or room coming
        back, so it is kept as theirs and the next such job is not worked out again. A job owed GPUs leaves no
        failed placement behind (`_placement`), so no verdict either."""
        wait = self.waits[job.id] = self._waiting(job, kind, access)
        if not self._owed(job):
            self._verdicts[self._class_of[job.id]] = wait

    def _owed(self, job: PendingJob) -> bool:
        """Are GPUs owed to the job (a claim carried from earlier ticks, or victims leaving for it)? Such a job is
        placed on them whatever jobs alike showed, and its failure stands for none of them."""
        return bool(job.earmarked_gpus) or job.id in self.in_flight

    def _placement(self, job: PendingJob) -> Placement | None:
        owed = self._owed(job)
        key = (self._classes(job)[1], self._access(job))
        if not owed and self._fits_nowhere(job, key):
            return None
        req = self._request(job)
        placement = find_placement(req, self.capacity, self._host_filter(req))
        if placement is None and self._reserved and find_placement(req, self.capacity, any_host) is not None:
            if owed:
                self._claimant_kept_out = True  # a job holding a claim, kept from free GPUs elsewhere (`held_back`)
            else:
                self._kept_out.add(key)
        if placement is None and not owed:
            self._no_fit[key] = min(job.gpus, self._no_fit.get(key, math.inf))
        return placement

    def _fits_nowhere(self, job: PendingJob, key: tuple) -> bool:
        """Did a job of its placement class and reservations (`key`), no bigger, not fit this tick? Then this one
        does not either (room only shrinks while a tick decides)."""
        return job.gpus >= self._no_fit.get(key, math.inf)

    def _room_came_back(self) -> None:
        """A claim let go mid-tick: its GPUs (milli-GPU, CPUs, memory) are free again. What the tick learnt from
        jobs that did not fit or found nothing to preempt rested on room only shrinking; it is learnt anew."""
        self._no_fit.clear()
        self._no_victims.clear()
        self._verdicts.clear()
        self.victims.free_changed()

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
        alike = self._class_of[job.id]
        wait = self._resting.get(alike)
        if wait is None:
            wait = self._resting[alike] = self._never_wait(job) or self._waiting(job)
        self.waits[job.id] = wait


def any_host(host: HostState) -> bool:
    return True


# The class of jobs that fit on one host in every pool they may use, whatever their topology: never equal to a
# topology, so it never stands for a job of topology `any` that may span hosts (which may fit across hosts
# where a smaller one-host job did not).
ONE_HOST = "one host"



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
    if req.topology == DOMAIN and spans_hosts(req, capacity):
        largest = max(pool.largest_group for pool in pools)
        if req.gpus > largest:
            return f"largest healthy domain{types} has {largest} GPUs"
    largest_pool = max(sum(g.capacity for g in pool.groups.values()) for pool in pools)
    if req.gpus > largest_pool:
        return f"the cluster has {reasons.plural(largest_pool, 'healthy GPU')}{types}"
    return ""

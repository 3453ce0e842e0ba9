"""Rule 8: why each job that did not start waits, where it stands, and when it may start.

`Explanation` is the reason-text half of the tick's `Cycle` (engine.py): it
reads what the decisions left (the waits, the capacity after the tick, the
reservations) and writes each kind of wait's text once.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from itertools import accumulate, chain

from . import reasons
from .fairshare import explain_order
from .model import DOMAIN, RUNNING, WHOLE_GPU_MILLI, PendingJob, PendingStatus, protected_until
from .placement import pools_for, spans_hosts
from .reservation import grace_period_for
from .search import (
    BACKING_OFF,
    DEFRAGMENTING,
    ENTITLED,
    NEVER,
    PREEMPTING_FOR,
    RESERVED,
    VICTIMS_LEAVING,
    Access,
    Wait,
)

# `leave_at` has no entry for the job.
_NOT_LEAVING = object()


class Explanation:
    """Reasons, positions and estimates (`statuses`) and the queue order explained (`queue_order`).

    A mixin of `Cycle`, which provides the decisions (`order`, `waits`,
    `started`, `started_jobs`, `reservations`, `leave_at`, `running`), the
    capacity and the search memo (`BoundedSearch`).
    """

    def _start_explaining(self) -> None:
        self._needs: dict[tuple, str] = {}


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
        # The last tick's statuses on this capacity: one equal in every field is handed out again rather than
        # built anew (`_same_status`).
        carried = self.capacity.carried
        last = carried.get("statuses") or {}
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
            status = last.get(job_id)
            if status is None or not _same_status(status, text, position, estimate):
                status = PendingStatus(job_id, text, position, estimate)
            result[job_id] = status
        self.queue_order = explain_order(firsts, self.tree, unit_ratios)
        carried["statuses"] = result
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
            where = "domain" if job.topology == DOMAIN and spans_hosts(self._request(job), self.capacity) else "host"
            return (f"{text}; every {where} that could hold it is held by project {job.project} itself or by units "
                    f"less served than it, which are entitled to keep their GPUs: it waits for jobs to end")
        _, placing, preempting = self._classes(job)
        access = self._access(job)
        blocked = self._reservation_blocking(job, placing, access)
        # The last failed victim search this tick that stands for it, if any.
        failed = None if blocked or job.min_runtime <= 0 else self._search_for_reason(job, preempting, access)
        if blocked:
            text = f"{text}; {blocked}"
        elif job.min_runtime > 0 and (failed is not None or not self.victims.live):
            if failed is not None and failed.passed_over:
                text += ("; the jobs it may preempt are between their checkpoints: each is taken early in an "
                         "interval or in the grace period before its next checkpoint, so that it loses little work")
            elif job.project in self._scoped:
                unit, waiting = self._scoped[job.project]
                text += (f"; while project {waiting}, less served than it under {unit}, waits to start, it may "
                         f"preempt only unallocated jobs and jobs under {unit}, and none of those would make room")
            else:
                text += f"; no running job may be preempted for it ({self._unpreemptible(job)})"
        if head is not None and head.project != job.project and unit_ratios[head.project] < project_ratio:
            ahead, yours = reasons.format_percent(unit_ratios[head.project]), reasons.format_percent(project_ratio)
            text += f"; waiting behind project {head.project} (usage ratio {ahead} vs yours {yours})"
        return text

    def _unpreemptible(self, job: PendingJob) -> str:
        """Why none of the running jobs may be taken for this one, naming only what holds this tick."""
        why = ["is protected by its minimum runtime"]
        if any(self._victims_of.values()):
            why.append("is already leaving for a job ahead of it")
        held_for = self._kept_out_of(job)
        if held_for:
            jobs = "job" if len(held_for) == 1 else "jobs"
            why.append(f"runs where GPUs are held for {jobs} {reasons.job_list(held_for)}")
        why.append(f"belongs to project {job.project} or to a unit less served")
        return f"each {', '.join(why[:-1])}, or {why[-1]}"

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
        if job.topology == DOMAIN and spans_hosts(req, self.capacity):
            return f"largest free is {max(pool.largest_free_group for pool in pools)}"
        return f"{free} free"

    def _reservation_blocking(self, job: PendingJob, placing: tuple, access: Access) -> str:
        """If, at its turn, only reservations kept a job of this placement class and reservation access
        (`_access`) out: whose (`_kept_out_of`), and when those jobs start."""
        if (placing, access) not in self._kept_out:
            return ""
        starts = {r.job_id: r.expected_start for r in self.reservations}
        whose = [f"{held_for} (it starts {reasons.format_time(starts[held_for], self.now)})"
                 for held_for in self._kept_out_of(job)]
        if len(whose) == 1:
            return (f"the free GPUs that fit were reserved for job {whose[0]}, and this job's protection "
                    f"(its minimum runtime, longer after a preemption) would outlast that")
        return (f"the free GPUs that fit were under the reservations of jobs {', '.join(whose[:-1])} and "
                f"{whose[-1]}, and this job's protection (its minimum runtime, longer after a preemption) would "
                f"outlast them")

    def _release_timeline(self) -> tuple[list[float], list[int]]:
        """When GPUs come back to the schedulable pool, and how many by then (cumulative)."""
        timeline: list[tuple[float, int]] = []
        held_by = self.capacity.held.get
        leave_at = self.leave_at
        now, policy = self.now, self.policy
        # `protected_until` of the running jobs, as a kept state has them (`ClusterState.run_ends`).
        ends = self._run_ends or {}
        for job in chain(self.running, self.started_jobs):
            held = held_by(job.id)
            if held and held[0][0].group is None or job.mig_profile:
                continue
            when = leave_at.get(job.id, _NOT_LEAVING)
            if when is _NOT_LEAVING:
                if job.state != RUNNING:
                    continue
                allocated = job.min_runtime > 0
                when = math.inf
                if allocated:
                    known = ends.get(job.id)
                    protected = known[1] if known is not None and known[0] is job else protected_until(job, policy)
                    if protected > now:
                        when = protected
                if job.max_runtime is not None:
                    when = min(when, job.start_time + job.max_runtime)
                if when == math.inf:
                    continue
                when += grace_period_for(allocated, policy)
            timeline.append((when, len(job.gpu_ids)))
        timeline.sort()
        return [t for t, _ in timeline], list(accumulate(g for _, g in timeline))


def _same_status(status: PendingStatus, reason: str, position: int, estimate: float | None) -> bool:
    """Is this status equal to a new one with these fields, down to the type and sign of the estimate?"""
    if status.position != position or status.reason != reason:
        return False
    last = status.estimated_start
    return last is estimate or (type(last) is type(estimate) and last == estimate and last != 0)

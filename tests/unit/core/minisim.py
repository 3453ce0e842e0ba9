"""A tiny tick loop over `schedule()` for multi-tick tests (not the simulator).

It applies decisions the way the live tick does: starts become running jobs,
preempted ones enter their grace period and then leave (requeued with their
original submit time if resumable), every pending job's claim on GPUs
(`Decisions.earmarks`) is kept and passed back at the next tick, jobs finish
after their duration, and usage in the window is fed back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from scheduler.core import PREEMPTING, Decisions, PendingJob, Policy, RunningJob, Snapshot, Topology, Unit, schedule


@dataclass
class Interval:
    project: str
    gpus: float
    start: float
    end: float
    allocated: bool


@dataclass
class MiniCluster:
    topology: Topology
    units: tuple[Unit, ...]
    policy: Policy
    now: float = 0.0
    pending: dict[str, PendingJob] = field(default_factory=dict)
    running: dict[str, RunningJob] = field(default_factory=dict)
    # Seconds of work each job needs in total.
    duration: dict[str, float] = field(default_factory=dict)
    # Seconds of work done in earlier runs (resumed exactly, no checkpoints lost).
    done: dict[str, float] = field(default_factory=dict)
    history: list[Interval] = field(default_factory=list)
    finished: dict[str, float] = field(default_factory=dict)
    started_at: dict[str, list[float]] = field(default_factory=dict)
    decisions: list[tuple[float, Decisions]] = field(default_factory=list)
    # Preempted job id -> whether it goes back to pending once it has left.
    _requeue_flags: dict[str, bool] = field(default_factory=dict)

    def submit(self, job: PendingJob, duration: float) -> None:
        self.pending[job.id] = job
        self.duration[job.id] = duration

    def snapshot(self) -> Snapshot:
        window_start = self.now - self.policy.window
        allocated: dict[str, float] = {}
        unallocated: dict[str, float] = {}
        for interval in self.history:
            seconds = interval.end - max(interval.start, window_start)
            if seconds > 0:
                target = allocated if interval.allocated else unallocated
                target[interval.project] = target.get(interval.project, 0.0) + interval.gpus * seconds
        # The units' own usage is what they had before the simulation started.
        units = tuple(replace(u, allocated_usage=u.allocated_usage + allocated.get(u.name, 0.0),
                              unallocated_usage=u.unallocated_usage + unallocated.get(u.name, 0.0))
                      for u in self.units)
        return Snapshot(self.topology, units, tuple(self.running.values()), tuple(self.pending.values()))

    def tick(self) -> Decisions:
        decisions = schedule(self.snapshot(), now=self.now, policy=self.policy)
        self.decisions.append((self.now, decisions))
        for preemption in decisions.preemptions:
            job = self.running[preemption.job_id]
            self.running[job.id] = replace(job, state=PREEMPTING, preempted_for=preemption.preemptor,
                                           grace_ends=self.now + preemption.grace)
            self._requeue_flags[job.id] = preemption.requeue
        for job_id, job in list(self.pending.items()):
            claim = decisions.earmarks.get(job_id, ())
            if job.earmarked_gpus != claim:
                self.pending[job_id] = replace(job, earmarked_gpus=claim)
        for start in decisions.starts:
            job = self.pending.pop(start.job_id)
            self.running[job.id] = RunningJob(
                job.id, job.project, start.gpu_ids, self.now, job.min_runtime, job.resumable, job.submit_time,
                job.seq, gpu_milli=start.gpu_milli, topology=job.topology, max_runtime=job.max_runtime,
                cpus=job.cpus, memory_gib=job.memory_gib, preemptions=job.preemptions)
            self.started_at.setdefault(job.id, []).append(self.now)
        return decisions

    def advance(self, seconds: float) -> None:
        """Move time on; jobs finish or leave at their exact times."""
        self.now += seconds
        for job in sorted(self.running.values(), key=lambda j: j.id):
            left = self.duration[job.id] - self.done.get(job.id, 0.0)
            ends = job.start_time + left
            if job.state == PREEMPTING and job.grace_ends <= min(ends, self.now):
                self._leave(job, job.grace_ends, requeue=self._requeue_flags.pop(job.id))
            elif ends <= self.now:
                self.finished[job.id] = ends
                self._requeue_flags.pop(job.id, None)
                self._leave(job, ends, requeue=False)

    def _leave(self, job: RunningJob, when: float, *, requeue: bool) -> None:
        del self.running[job.id]
        gpus = len(job.gpu_ids) if len(job.gpu_ids) != 1 else job.gpu_milli / 1000
        self.history.append(Interval(job.project, gpus, job.start_time, when, job.allocated))
        self.done[job.id] = self.done.get(job.id, 0.0) + when - job.start_time
        if requeue and job.id not in self.finished:
            self.pending[job.id] = PendingJob(
                job.id, job.project, len(job.gpu_ids), job.min_runtime, job.resumable, job.submit_time, job.seq,
                gpu_milli=job.gpu_milli, topology=job.topology, max_runtime=job.max_runtime, cpus=job.cpus,
                memory_gib=job.memory_gib, preemptions=job.preemptions + 1, requeued_at=when)

    def usage(self, project: str, *, since: float = 0.0) -> float:
        """Allocated GPU-seconds of a project from `since` to now, running jobs included."""
        total = 0.0
        for interval in self.history:
            if interval.project == project and interval.allocated:
                total += interval.gpus * max(0.0, interval.end - max(interval.start, since))
        for job in self.running.values():
            if job.project == project and job.allocated:
                total += len(job.gpu_ids) * max(0.0, self.now - max(job.start_time, since))
        return total

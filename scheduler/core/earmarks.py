"""Rule 4's claims: the GPUs a preemption was decided for stay the preemptor's until it starts.

When a job preempts others (or has jobs moved out of a domain for it), the
GPUs it will start on — its victims' and the free ones the plan counted on —
become its *claim*. The caller keeps the claim between ticks
(`Decisions.earmarks` out, `PendingJob.earmarked_gpus` back in); no other job
starts on those GPUs, the victims' own requeued runs included, until the
claimant has started, is cancelled, or its plan fails. A plan fails, and the
claim is dropped with a reason the caller records, when

- a host of the claim is no longer up (down, draining, cordoned) or a GPU of
  it is no longer healthy;
- a GPU of it is held by a job that is not leaving for the claimant (a stop
  that did not happen);
- a job leaving for the claimant still holds its GPUs a heartbeat timeout
  after its grace period ended (it could not be stopped).
"""

from __future__ import annotations

from .capacity import Capacity
from .model import PREEMPTING, UP, WHOLE_GPU_MILLI, EarmarkDrop, PendingJob, Policy
from .reasons import format_duration, job_list, plural


def check_claims(claimants, capacity: Capacity, *, now: float, policy: Policy) -> list[EarmarkDrop]:
    """The claims that no longer hold, and why (claims not yet applied to `capacity`)."""
    drops: list[EarmarkDrop] = []
    for job in sorted(claimants, key=lambda j: (j.seq, j.id)):
        reason = _broken(job, capacity, now, policy)
        if reason:
            drops.append(EarmarkDrop(job.id, f"the GPUs held for it are free for others again: {reason}"))
    return drops


def _broken(job: PendingJob, capacity: Capacity, now: float, policy: Policy) -> str:
    """Why a claim no longer holds ("" if it does)."""
    shared = job.gpus == 1 and job.gpu_milli < WHOLE_GPU_MILLI and not job.mig_profile
    stuck: list[str] = []
    for gpu in job.earmarked_gpus:
        host = capacity.hosts.get(gpu.rsplit(":", 1)[0])
        if host is None:
            return f"GPU {gpu} is not in the cluster any more"
        if host.state != UP:
            return f"host {host.name} is {host.state}"
        if capacity.gpu_host.get(gpu) != host.name:
            return f"GPU {gpu} is not healthy"
        for holder in sorted((j for j in host.jobs if gpu in j.gpu_ids), key=lambda j: (j.seq, j.id)):
            if shared and holder.gpu_milli < WHOLE_GPU_MILLI and holder.preempted_for != job.id:
                continue  # another fraction on the same GPU: the claim is on the milli-GPU it needs
            if holder.state != PREEMPTING or holder.preempted_for != job.id:
                return f"GPU {gpu} is held by job {holder.id}, which is not leaving for it"
            if holder.grace_ends is not None and now > holder.grace_ends + policy.heartbeat_timeout:
                stuck.append(holder.id)
    if stuck:
        late = format_duration(policy.heartbeat_timeout)
        jobs = sorted(set(stuck))
        return (f"{plural(len(jobs), 'job')} preempted for it ({job_list(jobs)}) still "
                f"{'holds' if len(jobs) == 1 else 'hold'} its GPUs more than {late} after the grace period "
                f"ended: {'it' if len(jobs) == 1 else 'they'} could not be stopped")
    return ""

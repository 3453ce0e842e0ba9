"""Rule 4 weighs what a preemption costs: the work since the last periodic checkpoint plus the restart overhead."""

from __future__ import annotations

from dataclasses import replace

from scheduler.core import Policy, schedule
from scheduler.core.model import restart_overhead
from scheduler.core.preemption import preemption_cost

from .builders import DAY, HOUR, gpus_of, hgx, pending, running, snapshot, topology, units

NOW = 3 * HOUR
WEEK = 7 * DAY


def _usage(ratio: float, gpus: int, running_gpu_seconds: float) -> float:
    return (ratio * 0.5 * gpus * WEEK - running_gpu_seconds) / HOUR


def _victims(overhead_a: float | None, overhead_c: float | None, policy: Policy) -> set[str]:
    """p's four 4-GPU jobs on two servers: those on hgx-00 checkpointed 1-2 min ago, those on hgx-01 10-15 min
    ago; q (served 10 % against p's 90 %) asks for 8 GPUs on one server."""
    topo = topology(hgx("hgx-00"), hgx("hgx-01"))
    held = [
        running("p-a", "p", gpus_of("hgx-00-h01", 4), last_checkpoint=NOW - 60, restart_overhead=overhead_a),
        running("p-b", "p", gpus_of("hgx-00-h01", 4, 4), last_checkpoint=NOW - 120, restart_overhead=overhead_a),
        running("p-c", "p", gpus_of("hgx-01-h01", 4), last_checkpoint=NOW - 600, restart_overhead=overhead_c),
        running("p-d", "p", gpus_of("hgx-01-h01", 4, 4), last_checkpoint=NOW - 900, restart_overhead=overhead_c),
    ]
    org = units(("p", None, 50, _usage(0.9, 16, 16 * NOW)), ("q", None, 50, _usage(0.1, 16, 0)))
    decisions = schedule(snapshot(topo, org, running_jobs=held, pending_jobs=[pending("q-big", "q", 8)]),
                         now=NOW, policy=policy)
    assert {p.preemptor for p in decisions.preemptions} == {"q-big"}
    return {p.job_id for p in decisions.preemptions}


def test_with_the_same_overhead_the_freshest_checkpoints_are_taken() -> None:
    assert _victims(None, None, Policy()) == {"p-a", "p-b"}


def test_a_long_restart_outweighs_a_fresh_checkpoint() -> None:
    # hgx-00's jobs take 30 min to restart: 4 × (60 + 1800) + 4 × (120 + 1800) GPU-s against hgx-01's
    # 4 × (600 + 0) + 4 × (900 + 0).
    assert _victims(1800, 0, Policy()) == {"p-c", "p-d"}


def test_the_policy_default_applies_to_jobs_that_give_none() -> None:
    # The cluster's default is long, the jobs on hgx-01 restart at once.
    assert _victims(None, 0, Policy(restart_overhead=1800)) == {"p-c", "p-d"}
    assert _victims(None, 0, Policy(restart_overhead=0)) == {"p-a", "p-b"}


def test_the_cost_is_work_since_the_checkpoint_plus_the_overhead_in_gpu_seconds() -> None:
    job = running("j", "p", gpus_of("hgx-00-h01", 4), start_time=0, last_checkpoint=NOW - 600)
    assert preemption_cost(job, NOW, Policy(restart_overhead=300)) == 4 * (600 + 300)
    assert preemption_cost(replace(job, restart_overhead=0), NOW, Policy(restart_overhead=300)) == 4 * 600
    # Nothing checkpointed yet: since the start.
    assert preemption_cost(replace(job, last_checkpoint=None), NOW, Policy(restart_overhead=0)) == 4 * NOW
    # A job that is not resumable loses its whole run and is not restarted: no overhead.
    assert preemption_cost(replace(job, resumable=False, last_checkpoint=None), NOW, Policy()) == 4 * NOW
    assert restart_overhead(job, Policy()) == 300

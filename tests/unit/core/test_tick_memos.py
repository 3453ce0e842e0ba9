"""What a tick learns from one job stands for another only where the rules would give that job the same answer.

A tick remembers failures (a job that did not fit, a job that found nothing to preempt) and lets them stand for
jobs alike that come later in the walk (search.py). A unit charged for a job it started is more served than
before, so a job of another unit may now take from it (rule 4b): a search that failed before that charge no
longer stands.
"""

from __future__ import annotations

from scheduler.core import Policy, schedule

from .builders import DAY, HOUR, gpus_of, hgx, pending, running, snapshot, topology, units


def test_a_job_may_take_from_a_unit_charged_after_a_job_alike_found_nothing() -> None:
    """x's first 8-GPU job may not take p's job on hgx-00 (x, charged for it, would be more served than p). x's
    2-GPU job starts, then p's (charged 16 GPU-hours), and x's second 8-GPU job, alike the first, may then take
    p's job: it preempts it."""
    org = units(("p", None, 50.0, 143.0), ("x", None, 50.0, 300.0))
    snap = snapshot(
        topology(hgx("hgx-00"), hgx("hgx-01")), org,
        running_jobs=[running("p-old", "p", gpus_of("hgx-00-h01", 8), start_time=DAY - 20 * HOUR),
                      running("p-new", "p", gpus_of("hgx-01-h01", 4), start_time=DAY - 600, min_runtime=8 * HOUR)],
        pending_jobs=[pending("x-1", "x", 8, submit_time=0.0), pending("x-small", "x", 2, min_runtime=4 * HOUR,
                                                                        submit_time=1.0),
                      pending("x-2", "x", 8, submit_time=2.0),
                      pending("p-small", "p", 2, min_runtime=8 * HOUR, submit_time=3.0)])

    decisions = schedule(snap, now=DAY, policy=Policy(tick=5))

    assert sorted(s.job_id for s in decisions.starts) == ["p-small", "x-small"]
    assert [(p.job_id, p.preemptor) for p in decisions.preemptions] == [("p-old", "x-2")]
    assert decisions.pending["x-1"].reason.startswith("needs 8 GPUs")

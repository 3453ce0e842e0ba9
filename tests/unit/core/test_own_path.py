"""Rule 4b's second clause: a whole-domain job is not kept out by a side its siblings keep level.

Program A and program B have used about as much (A 54.1 %, B 55.5 %): charged a whole-rack job's
72 GPUs × 4 h, A would no longer be less served than B, so by the first clause the job may not take the
only rack that can hold it from B. But A stands level with B only because a2, a1's sibling, used far more
than its share (81 %) while a1 (27 %) waited for the rack. a1 itself, charged the job, stays less served
than B: the job may take B's rack. Other jobs are not concerned: they can be given what a2 holds.
"""

from __future__ import annotations

from scheduler.core import schedule

from .builders import HOUR, hgx, nvl72, pending, snapshot, topology, units

# The two programs, the rack and b's jobs of the rule-4 guard's scenarios, with a1 further behind here.
from .test_preemption_scope import CLUSTER, NOW, POLICY, a1_big, b_hgx, b_rack

# 88 healthy GPUs over 7 days: A and B are entitled to 7,392 GPU-hours each, a1 and a2 to 3,696.
ORG = units(("A", None, 50), ("a1", "A", 50, 1000), ("a2", "A", 50, 3000), ("B", None, 50), ("b", "B", 100, 3924))


def test_a_whole_rack_job_takes_the_rack_when_its_own_project_is_behind() -> None:
    snap = snapshot(CLUSTER, ORG, running_jobs=[b_rack(), b_hgx("b-1", "hgx-01-h01"), b_hgx("b-2", "hgx-02-h01")],
                    pending_jobs=[a1_big()])
    decisions = schedule(snap, now=NOW, policy=POLICY)
    assert [(p.job_id, p.preemptor) for p in decisions.preemptions] == [("b-rack", "a1-big")]
    # The reason names the unit that was less served: a1 itself, against B.
    assert decisions.preemptions[0].reason == (
        "preempted by job a1-big of project a1: its unit a1 had used 27 % of its 7-day budget against 55 % "
        "for your unit B")


def test_not_when_its_own_project_charged_would_not_stay_behind() -> None:
    level = units(("A", None, 50), ("a1", "A", 50, 1800), ("a2", "A", 50, 2200), ("B", None, 50),
                  ("b", "B", 100, 3924))
    snap = snapshot(CLUSTER, level, running_jobs=[b_rack(), b_hgx("b-1", "hgx-01-h01"), b_hgx("b-2", "hgx-02-h01")],
                    pending_jobs=[a1_big()])
    decisions = schedule(snap, now=NOW, policy=POLICY)
    assert decisions.preemptions == ()
    assert "every domain that could hold it is held by" in decisions.pending["a1-big"].reason


def test_a_job_that_other_domains_could_hold_keeps_to_the_first_clause() -> None:
    """A 64-GPU job could be given what a2 holds elsewhere: A, not a1, is compared with B."""
    wide = topology(nvl72("nvl72-01"), *(hgx(f"hgx-{n:02d}") for n in range(1, 9)))
    hgx_jobs = [b_hgx(f"b-{n}", f"hgx-{n:02d}-h01") for n in range(1, 9)]
    job = pending("a1-wide", "a1", 64, min_runtime=4 * HOUR, submit_time=0)
    snap = snapshot(wide, ORG, running_jobs=[b_rack(), *hgx_jobs], pending_jobs=[job])
    decisions = schedule(snap, now=NOW, policy=POLICY)
    assert decisions.preemptions == ()

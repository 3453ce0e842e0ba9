"""Rule 4: a unit's turn belongs to its least-served child first.

Program A is a little less served than program B, so A's jobs come first. A's
least-served project a1 waits with a whole-rack job that may not preempt B's
rack job (charged for its 72 GPUs × 4 h, A would no longer be less served than
B). Its sibling a2, far more served inside A, has a small job that could
preempt one of B's jobs on its own account. It may not: what A is owed over B
is a1's until a1's job can start, or a2 would win back for A, one small job at
a time, the margin a1 waits for, and a1 would never start (the family's
few-large months showed exactly that). a2 may still take free GPUs and
unallocated jobs' GPUs, and preempts B as before when no sibling of its waits.
"""

from __future__ import annotations

from scheduler.core import Policy, schedule

from .builders import HOUR, gpus_of, hgx, nvl72, pending, running, snapshot, topology, units

POLICY = Policy(tick=5, grace_period=60, unallocated_grace=10)
NOW = 10 * 24 * HOUR
# 88 healthy GPUs over a 7-day window: A and B are entitled to 7,392 GPU-hours each, a1 and a2 to 3,696.
# A has used 4,000 (ratio 54.1 %); B 3,924 plus 176 from its running jobs (55.5 %). a1 has used 1,800 (48.7 %):
# charged its job's 288 GPU-hours, neither A (58.0 %) nor a1 itself (56.5 %) stays below B, so it may not
# take B's rack (rule 4b's second clause, test_own_path.py, does not open it either).
ORG = units(("A", None, 50), ("a1", "A", 50, 1800), ("a2", "A", 50, 2200), ("B", None, 50), ("b", "B", 100, 3924))
CLUSTER = topology(nvl72("nvl72-01"), hgx("hgx-01"), hgx("hgx-02"))
RACK = tuple(f"nvl72-01-h{n:02d}:{i}" for n in range(1, 19) for i in range(4))
STARTED = NOW - 2 * HOUR  # past their one-hour protection


def b_rack():
    return running("b-rack", "b", RACK, start_time=STARTED)


def b_hgx(name: str, host: str, *, min_runtime: float = HOUR):
    return running(name, "b", gpus_of(host, 8), start_time=STARTED, min_runtime=min_runtime)


def a1_big():
    return pending("a1-big", "a1", 72, min_runtime=4 * HOUR, topology="domain", gpus_per_host=4, submit_time=0)


def a2_small():
    return pending("a2-small", "a2", 8, min_runtime=HOUR, submit_time=0)


def test_a_sibling_does_not_preempt_another_branch_while_the_less_served_sibling_waits() -> None:
    snap = snapshot(CLUSTER, ORG, running_jobs=[b_rack(), b_hgx("b-1", "hgx-01-h01"), b_hgx("b-2", "hgx-02-h01")],
                    pending_jobs=[a1_big(), a2_small()])
    decisions = schedule(snap, now=NOW, policy=POLICY)
    assert decisions.preemptions == ()
    assert decisions.starts == ()
    # a1 waits first in the order, a2 behind it.
    assert decisions.pending["a1-big"].position < decisions.pending["a2-small"].position
    assert ("while project a1, less served than it under A, waits to start, it may preempt only unallocated jobs "
            "and jobs under A") in decisions.pending["a2-small"].reason


def test_without_a_waiting_sibling_the_same_job_preempts_the_other_branch() -> None:
    snap = snapshot(CLUSTER, ORG, running_jobs=[b_rack(), b_hgx("b-1", "hgx-01-h01"), b_hgx("b-2", "hgx-02-h01")],
                    pending_jobs=[a2_small()])
    decisions = schedule(snap, now=NOW, policy=POLICY)
    assert [(p.job_id, p.preemptor) for p in decisions.preemptions] in ([("b-1", "a2-small")],
                                                                         [("b-2", "a2-small")])


def test_the_waiting_sibling_itself_preempts_once_its_program_is_behind_enough() -> None:
    """The guard holds a2 back; it does not hold a1 back: with B further ahead, a1's job takes the rack."""
    ahead = units(("A", None, 50), ("a1", "A", 50, 1800), ("a2", "A", 50, 2200), ("B", None, 50),
                  ("b", "B", 100, 4400))
    snap = snapshot(CLUSTER, ahead, running_jobs=[b_rack(), b_hgx("b-1", "hgx-01-h01"), b_hgx("b-2", "hgx-02-h01")],
                    pending_jobs=[a1_big(), a2_small()])
    decisions = schedule(snap, now=NOW, policy=POLICY)
    by_preemptor = {(p.preemptor, p.job_id) for p in decisions.preemptions}
    assert ("a1-big", "b-rack") in by_preemptor


def test_the_sibling_still_takes_free_gpus_and_unallocated_jobs() -> None:
    free = snapshot(CLUSTER, ORG, running_jobs=[b_rack(), b_hgx("b-1", "hgx-01-h01")],
                    pending_jobs=[a1_big(), a2_small()])
    assert [s.job_id for s in schedule(free, now=NOW, policy=POLICY).starts] == ["a2-small"]

    filler = b_hgx("b-free", "hgx-02-h01", min_runtime=0)
    busy = snapshot(CLUSTER, ORG, running_jobs=[b_rack(), b_hgx("b-1", "hgx-01-h01"), filler],
                    pending_jobs=[a1_big(), a2_small()])
    decisions = schedule(busy, now=NOW, policy=POLICY)
    assert [(p.job_id, p.preemptor) for p in decisions.preemptions] == [("b-free", "a2-small")]

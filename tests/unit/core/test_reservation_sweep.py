"""Rule 5's sweep over a domain: which running jobs count as ever giving their GPUs to the waiting job.

A sweep first adds up what the jobs on its hosts could give back at most, leaving out those that never leave for
the waiting job (an allocated job of a unit it may not take from), and works out no leave time where even that
is not enough. A job of such a unit still leaves at its maximum runtime (plus the grace period), and a job
already stopping leaves when its grace period ends: the place held for the waiting job must come from them.
"""

from __future__ import annotations

from scheduler.core import DRAINING, PREEMPTING, Policy, schedule

from .builders import HOUR, gpus_of, nvl72, pending, running, snapshot, topology, units

NOW = 10 * HOUR
POLICY = Policy()


def _rack_held_by_other(last: dict, *, gpus: int = 8, states: dict | None = None) -> tuple:
    """One NVL72 rack (host states `states`) whose every GPU a unit less served than `big` holds with jobs that
    never leave for `big`'s, but for the 8 GPUs of hosts 17 and 18, held by a job with the facts `last`; `big`
    waits to run a job of `gpus` GPUs."""
    held = [running(f"keep-{n}", "other", gpus_of(f"rack-h{n:02d}", 4), start_time=NOW - HOUR, min_runtime=8 * HOUR)
            for n in range(1, 17)]
    held.append(running("last", "other", gpus_of("rack-h17", 4) + gpus_of("rack-h18", 4),
                        **{"start_time": NOW - HOUR, "min_runtime": 8 * HOUR, **last}))
    # `big` has used far more of its share: it may take nothing from `other` (rule 4b).
    org = units(("big", None, 50, 5000), ("other", None, 50))
    return snapshot(topology(nvl72("rack", states=states)), org, running_jobs=held,
                    pending_jobs=[pending("wide", "big", gpus, min_runtime=HOUR)])


def _reservation(snap, *, leaving: tuple[str, ...] = ()):
    decisions = schedule(snap, now=NOW, policy=POLICY)
    assert not decisions.starts and tuple(p.job_id for p in decisions.preemptions) == leaving
    return {r.job_id: r for r in decisions.reservations}.get("wide")


def test_a_job_of_a_unit_it_may_not_take_from_still_frees_its_gpus_at_its_maximum_runtime():
    reservation = _reservation(_rack_held_by_other({"max_runtime": 3 * HOUR}))
    assert reservation is not None
    assert reservation.hosts == ("rack-h17", "rack-h18")
    assert reservation.expected_start == NOW + 2 * HOUR + POLICY.grace_period


def test_a_stopping_job_of_a_unit_it_may_not_take_from_frees_its_gpus_when_its_grace_ends():
    reservation = _reservation(_rack_held_by_other({"state": PREEMPTING, "grace_ends": NOW + 45}))
    assert reservation is not None
    assert reservation.hosts == ("rack-h17", "rack-h18")
    assert reservation.expected_start == NOW + 45


def test_a_job_leaving_a_draining_host_frees_its_gpus_on_the_others_after_its_grace():
    # Host 18 drains: the job, past its minimum runtime, leaves it now, and its 4 GPUs on host 17 with it.
    snap = _rack_held_by_other({"start_time": NOW - 9 * HOUR}, gpus=4, states={18: DRAINING})
    reservation = _reservation(snap, leaving=("last",))
    assert reservation is not None
    assert reservation.hosts == ("rack-h17",)
    assert reservation.expected_start == NOW + POLICY.grace_period


def test_nothing_is_held_where_no_job_would_ever_leave_for_it():
    # The same rack with the last job like the others: every job keeps its GPUs from `big`'s (rule 5's exception).
    assert _reservation(_rack_held_by_other({})) is None

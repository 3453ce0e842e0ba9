"""What a preemption costs in the simulator, on cases small enough to compute by hand (issue 18):
the restart overhead, lost work, goodput, wasted preemptions and preemptions per job."""

import pytest

from scheduler.sim.checks import check_result

from .helpers import job, one_host, org, run


def _two_preemptions(**u_kwargs):
    """One 4-GPU host; p and q have 50 % each; tick 10 s, unallocated grace 10 s, restart overhead 300 s.

    u (q, unallocated, 4 GPUs, checkpoint every 600 s of progress, 10,000 s of work) starts at 0.
    a (p, 4 GPUs, 1000 s of work) arrives at 1000 and preempts u; u leaves at 1010 keeping 600 s
    (lost 410 s); a runs [1010, 2010).
    u restarts at 2010: it holds the GPUs until 2310 (the overhead) before making progress; its
    checkpoints fall at 2310 + 600 k. b (p, 4 GPUs, 1000 s) arrives at 3000 and preempts it; u
    leaves at 3010 with 700 s of progress, keeps 600 (checkpoint at 2910), loses 300 s of overhead
    and 100 s of work. b runs [3010, 4010).
    u restarts at 4010, makes progress from 4310 and finishes its 8800 s left at 13,110.
    """
    return run(one_host(4, tick=10, unallocated_grace=10, restart_overhead=300), org(("p", 50), ("q", 50)), [
        job("u", 0, "q", 4, 10_000, min_runtime=0, checkpoint_every=600, **u_kwargs),
        job("a", 1000, "p", 4, 1000),
        job("b", 3000, "p", 4, 1000),
    ])


def test_a_restarted_run_holds_its_gpus_for_the_overhead_before_making_progress():
    result = _two_preemptions()
    assert [(t, j, e) for t, j, e, _ in result.events] == [
        (0, "u", "submit"), (0, "u", "start"), (1000, "a", "submit"), (1000, "u", "preempt"),
        (1010, "u", "requeue"), (1010, "a", "start"), (2010, "a", "finish"), (2010, "u", "start"),
        (3000, "b", "submit"), (3000, "u", "preempt"), (3010, "u", "requeue"), (3010, "b", "start"),
        (4010, "b", "finish"), (4010, "u", "start"), (13_110, "u", "finish"),
    ]
    assert result.events[10][3] == "lost 400 s of work"
    summary = result.summary
    # Lost: 4 GPUs × (410 + (300 + 100) + 300) s; of it, restart overhead 4 × 600 s.
    assert summary["lost_gpu_hours"] == round(4 * 1110 / 3600, 3)
    assert summary["restart_overhead_gpu_hours"] == round(4 * 600 / 3600, 3)
    assert check_result(result) == []


def test_a_job_s_own_restart_overhead_replaces_the_policy_s():
    result = _two_preemptions(restart_overhead=120)
    # Restarts at 2010 and 4010 make progress from 2130 and 4130; at 3010 u has 880 s of progress and keeps
    # 600; it finishes 10,000 − 1200 = 8800 s after 4130.
    assert result.events[-1][:3] == (12_930, "u", "finish")
    assert result.summary["lost_gpu_hours"] == round(4 * (410 + 120 + 280 + 120) / 3600, 3)


def test_goodput_is_work_kept_over_gpu_time_held_overall_and_per_project():
    """Held: u 4 × (1010 + 1000 + 9100) = 44,440 GPU-s, a and b 4 × 1000 each: 52,440.
    Kept: u's 10,000 s of work × 4 GPUs, a's and b's 4000 each: 48,000 (52,440 − 4440 lost)."""
    goodput = _two_preemptions().summary["goodput"]
    assert goodput["overall"] == pytest.approx(48_000 / 52_440, abs=1e-6)
    assert goodput["per_project"] == {"p": 1.0, "q": pytest.approx(40_000 / 44_440, abs=1e-6)}
    assert goodput["worst_project"] == "q"
    assert (goodput["allocated"], goodput["unallocated"]) == (1.0, pytest.approx(40_000 / 44_440, abs=1e-6))
    # The GPU time held is the occupancy's: nothing is left out of the denominator.
    result = _two_preemptions()
    assert sum(result.tracker.gpu_seconds()[k] for k in ("allocated", "unallocated")) == pytest.approx(52_440)


def test_preemptions_per_job_and_none_wasted_when_each_preemptor_starts_after_the_grace():
    summary = _two_preemptions().summary
    assert summary["preemptions_per_job"]["unallocated"] == {"mean": 2.0, "p99": 2, "max": 2, "jobs": 1}
    assert summary["preemptions_per_job"]["allocated"] == {"mean": 0.0, "p99": 0, "max": 0, "jobs": 2}
    assert summary["preemptions_per_job"]["all"]["mean"] == pytest.approx(2 / 3, abs=1e-6)
    assert summary["wasted_preemptions"] == {"share": 0.0, "wasted": 0, "on_behalf": 2, "undecided": 0}


def test_a_preemption_is_wasted_when_its_preemptor_does_not_start_within_grace_and_two_ticks():
    """The same case, but a's and b's preemptions are recorded as if they had started late: a started at
    1010 (grace 10 s + 2 ticks of 10 s: deadline 1030) counts as started; a preemption for a job that never
    started is wasted, and one whose deadline is after the end is not judged."""
    from scheduler.sim.output import wasted_preemptions

    result = _two_preemptions()
    result.preemptions_for.append((5000, "a", "u", 10))  # a never starts after 5000
    result.preemptions_for.append((result.end - 5, "b", "u", 10))  # deadline after the end
    assert wasted_preemptions(result) == {"share": pytest.approx(1 / 3, abs=1e-6), "wasted": 1, "on_behalf": 3,
                                          "undecided": 1}


def test_the_workload_file_takes_an_optional_restart_overhead_column():
    from scheduler.sim.workload import WorkloadError, parse_workload_text, workload_rows

    header = "job_id,submit,project,gpus,min_runtime,resumable,duration"
    jobs = parse_workload_text(f"{header},restart_overhead\na,0,p,1,0,1,60,900\nb,0,p,1,0,1,60,\n")
    assert [j.restart_overhead for j in jobs] == [900, None]
    assert workload_rows(jobs)[1][-1] == "900" and workload_rows(jobs)[2][-1] == ""
    assert parse_workload_text(f"{header}\na,0,p,1,0,1,60\n")[0].restart_overhead is None
    with pytest.raises(WorkloadError, match=r"row 1 .*column restart_overhead: 86401 must be at most 86400"):
        parse_workload_text(f"{header},restart_overhead\na,0,p,1,0,1,60,86401\n")
    with pytest.raises(WorkloadError, match=r"column restart_overhead: -5 must be at least 0"):
        parse_workload_text(f"{header},restart_overhead\na,0,p,1,0,1,60,-5\n")


def test_the_grace_a_preemptor_waits_for_is_its_plan_s_longest():
    """A preemption of an unallocated victim (10 s grace) in the same plan as an allocated one (60 s): the
    preemptor starts when both have left, 60 s later, and that is in time (60 + 2 × 10 s)."""
    from scheduler.sim.output import wasted_preemptions

    result = _two_preemptions()
    result.preemptions_for[:] = [(1000, "a", "u", 10), (1000, "a", "other", 60)]
    next(run for run in result.runs if run.job.id == "a").starts[:] = [1055]
    assert wasted_preemptions(result)["wasted"] == 0
    result.preemptions_for[:] = [(1000, "a", "u", 10)]
    assert wasted_preemptions(result)["wasted"] == 1

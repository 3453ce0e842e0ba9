"""A tick passes over the waiting jobs it already knows wait without deciding each again (issue 15).

Once a job is known to wait, the jobs after it in its project's queue that are alike in all the decision reads
of them (`model.alike`) wait for the same reason, and the walk takes them at once. What must not change: a job
owed GPUs (a claim from an earlier preemption) or a job of another kind among them is still decided, and every
waiting job still gets its reason and its place in the order.
"""

from __future__ import annotations

from scheduler.core import Policy, schedule
from scheduler.core.engine import decide
from scheduler.core.fairshare import FairShareWalk
from scheduler.core.state import ClusterState

from .builders import DAY, HOUR, gpus_of, hgx, pending, running, snapshot, topology, units

ORG = units(("p", None, 50.0), ("q", None, 50.0), ("free", None, None))


def test_a_job_owed_gpus_behind_jobs_alike_that_wait_still_starts_on_its_claim() -> None:
    """Six 8-GPU jobs of p wait (hgx-00 is held for p's claim, hgx-01 runs q's protected job, p's one reservation
    is spent on the first), and the seventh, alike in all but its claim on hgx-00, starts there."""
    claimant = pending("p-claim", "p", 8, submit_time=600.0, earmarked_gpus=gpus_of("hgx-00-h01", 8))
    waiting = [pending(f"p-{n}", "p", 8, submit_time=float(n)) for n in range(6)]
    state = ClusterState.from_snapshot(snapshot(
        topology(hgx("hgx-00"), hgx("hgx-01")), ORG,
        running_jobs=[running("q-run", "q", gpus_of("hgx-01-h01", 8), start_time=DAY - 600, min_runtime=4 * HOUR)],
        pending_jobs=[*waiting, claimant]))
    assert len({state.classes[job.id] for job in [*waiting, claimant]}) == 1

    decisions = decide(state, now=DAY, policy=Policy(tick=5))

    assert [(s.job_id, s.gpu_ids) for s in decisions.starts] == [("p-claim", gpus_of("hgx-00-h01", 8))]
    statuses = decisions.pending
    assert sorted(statuses) == [job.id for job in waiting]
    # Every one waits with its reason and its own place in the order.
    assert [statuses[job.id].position for job in waiting] == [1, 2, 3, 4, 5, 6]
    assert all(statuses[job.id].reason for job in waiting)
    assert len({statuses[job.id].reason for job in waiting[1:]}) == 1


def test_a_smaller_job_behind_many_alike_that_wait_still_starts_and_each_keeps_its_reason() -> None:
    """Unallocated: twenty 8-GPU jobs wait for the 4 free GPUs, the 2-GPU job after them starts; with reasons and
    without, the tick starts the same job."""
    jobs = [pending(f"big-{n:02}", "free", 8, min_runtime=0, submit_time=float(n)) for n in range(20)]
    jobs.append(pending("small", "free", 2, min_runtime=0, submit_time=100.0))
    snap = snapshot(topology(hgx("hgx-00")), ORG,
                    running_jobs=[running("q-run", "q", gpus_of("hgx-00-h01", 4), start_time=DAY - 600)],
                    pending_jobs=jobs)

    explained = schedule(snap, now=DAY, policy=Policy(tick=5))
    quiet = schedule(snap, now=DAY, policy=Policy(tick=5, explain=False))

    assert [s.job_id for s in explained.starts] == [s.job_id for s in quiet.starts] == ["small"]
    assert [explained.pending[f"big-{n:02}"].position for n in range(20)] == list(range(1, 21))
    assert len({explained.pending[f"big-{n:02}"].reason for n in range(20)}) == 1
    assert quiet.pending == {}


def test_the_walk_passes_over_known_classes_only_until_an_owed_job_or_another_class() -> None:
    jobs = [pending(name, "p", 1, submit_time=float(n)) for n, name in enumerate("abcdef")]
    classes = {"a": 1, "b": 1, "c": 1, "d": 1, "e": 2, "f": 1}
    walk = FairShareWalk.of_jobs(_tree(), jobs, allocated=True)
    assert walk.next().id == "a"
    # c is owed GPUs: decided, not passed over.
    assert [job.id for job in walk.pass_known(classes, {1: "waits"}, {"c"})] == ["b"]
    assert walk.next().id == "c"
    assert [job.id for job in walk.pass_known(classes, {1: "waits"}, set())] == ["d"]
    # e's class is not known: it comes next, and nothing is passed over before it.
    assert walk.pass_known(classes, {1: "waits"}, set()) == []
    assert walk.next().id == "e"
    assert [job.id for job in walk.pass_known(classes, {1: "waits"}, set())] == ["f"]
    assert walk.next() is None


def _tree():
    """The org tree of `ORG` with p named in it (a project is in the tree once it has a job)."""
    state = ClusterState(topology(hgx("hgx-00")), ORG)
    state.submit(pending("p-seed", "p", 1))
    return state.usage_tree(DAY, 7 * DAY)

"""What a tick learns from one job stands for another only where the rules would give that job the same answer.

A tick remembers failures (a job that did not fit, a job that found nothing to preempt) and lets them stand for
jobs alike that come later in the walk (search.py). Five ways that went wrong, each a decision (or a reason) the
rules do not make:
- a unit charged for a job it started is more served than before, so a job of another unit may now take from it
  (rule 4b): a search that failed before that charge no longer stands;
- between the smallest host and the largest domain, a job's shape differs from pool to pool: an 8-GPU job must
  have one 8-GPU host to itself, a 12-GPU one may span two, so the 8-GPU job's failure says nothing of it;
- with several reservations, "kept out of the first k" named different reservations as more were made;
- a job preempted before is protected longer when it runs again, so a reservation may keep it off hosts that a job
  otherwise alike may start on (rule 5): a verdict on the one said nothing of the other;
- a search that passed over a job between its checkpoints tells the job it searched for to wait for that
  checkpoint, but a larger job, or one charging more, may have had no use for the job passed over: the search
  stands for it as a failure, not as its reason.
The property at the end compares every tick with one that decides each job in full.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core import PREEMPTING, Policy, preemption, schedule, search

from .builders import DAY, HOUR, domain, gpus_of, hgx, pending, running, snapshot, topology, units


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


def test_a_larger_job_that_may_span_hosts_starts_where_a_smaller_one_needing_one_host_did_not_fit() -> None:
    """H100 hosts of 8 beside a GB200 domain of 4-GPU hosts; 7 and 6 GPUs free on the two H100 hosts, 4 on the
    domain. An 8-GPU job needs one H100 host (or 8 in the domain) and waits; a 12-GPU job may span the H100
    hosts, and starts."""
    org = units(("free", None, None))
    topo = topology(hgx("hgx-00", gpu_type="H100"), hgx("hgx-01", gpu_type="H100"), domain("nvl-00", 4, 4))
    held = [running("h0", "free", gpus_of("hgx-00-h01", 1), min_runtime=0),
            running("h1", "free", gpus_of("hgx-01-h01", 2), min_runtime=0),
            *[running(f"n{h}", "free", gpus_of(f"nvl-00-h{h:02}", 3), min_runtime=0) for h in range(1, 5)]]
    snap = snapshot(topo, org, running_jobs=held,
                    pending_jobs=[pending("eight", "free", 8, min_runtime=0, submit_time=0.0),
                                  pending("twelve", "free", 12, min_runtime=0, submit_time=1.0)])

    decisions = schedule(snap, now=DAY, policy=Policy(tick=5))

    assert [(s.job_id, len(s.gpu_ids)) for s in decisions.starts] == [("twelve", 12)]
    assert {g.rsplit(":", 1)[0] for g in decisions.starts[0].gpu_ids} == {"hgx-00-h01", "hgx-01-h01"}
    assert "eight" in decisions.pending



def test_a_job_kept_out_of_other_reservations_than_a_failed_one_is_still_placed() -> None:
    """Three reservations may be made (`max_reservations`). a1's 2-GPU job reserves nvl-00-h04 until now + 10 s
    and b1's 16-GPU job the three H100 hosts for about 5 hours. a2's 4-GPU job, protected for an hour, may not
    start on the first but may on the second: it starts on hgx-01's four free GPUs. Before, what a job kept out
    of one reservation had shown (it did not fit) stood for this job, kept out of a different one: it
    reserved instead."""
    org = units(("a", None, 60.0), ("b", None, 40.0), ("a1", "a", 30.0, 31.65), ("a2", "a", 30.0, 86.12),
                ("b1", "b", 70.0, 15.62), ("free", None, None))
    topo = topology(*[hgx(f"hgx-0{i}", gpu_type="H100") for i in range(3)], domain("nvl-00", 4, 4))
    runs = [running("r0", "a2", gpus_of("hgx-00-h01", 1), start_time=DAY - 600, min_runtime=8 * HOUR,
                    max_runtime=30 * HOUR),
            running("r1", "a2", gpus_of("hgx-01-h01", 4), start_time=DAY - 600, min_runtime=8 * HOUR),
            running("r4", "a2", gpus_of("hgx-02-h01", 4, 1), start_time=DAY - 3 * HOUR, min_runtime=8 * HOUR),
            running("r6", "a1", gpus_of("nvl-00-h02", 4), start_time=DAY - 3 * HOUR),
            running("r8", "free", gpus_of("nvl-00-h04", 4), start_time=DAY - 20 * HOUR, min_runtime=0)]
    waiting = [pending("j2", "b1", 8, min_runtime=600, submit_time=2.0),
               pending("j3", "a1", 2, min_runtime=8 * HOUR, submit_time=3.0),
               pending("j4", "b1", 16, min_runtime=600, submit_time=4.0),
               pending("j5", "a2", 4, submit_time=5.0),
               pending("j11", "b1", 2, min_runtime=8 * HOUR, submit_time=11.0)]

    decisions = schedule(snapshot(topo, org, running_jobs=runs, pending_jobs=waiting), now=DAY,
                         policy=Policy(tick=5, max_reservations=3))

    assert ("j5", gpus_of("hgx-01-h01", 4, 4)) in [(s.job_id, s.gpu_ids) for s in decisions.starts]
    assert sorted(r.job_id for r in decisions.reservations) == ["j3", "j4"]


# What a job's reason says when rule 4 found nothing for it (`explain.py`), read after the whole walk.
NO_VICTIMS = "no running job may be preempted for it"


def test_a_job_never_preempted_starts_under_a_reservation_that_keeps_out_jobs_alike_preempted_before() -> None:
    """p's 8-GPU job holds hgx-01 until x's job there ends, in 10 hours; its 4 other GPUs are free. x's three
    4-GPU jobs ask for 8 hours: the first two were preempted before, so their next runs are protected for about
    16 hours and may not start on the held host; the third never was, its 8 hours end before the hold does, and
    it starts there (rule 5). Before, the second job's verdict (it waits) stood for the third, a job alike in
    all but its preemptions, which kept it waiting."""
    org = units(("p", None, 50.0, 0.0), ("x", None, 50.0, 100.0))
    snap = snapshot(
        topology(hgx("hgx-00"), hgx("hgx-01")), org,
        running_jobs=[running("x-run", "x", gpus_of("hgx-00-h01", 8), start_time=DAY - 600, min_runtime=8 * HOUR,
                              preemptions=2),
                      running("x-ends", "x", gpus_of("hgx-01-h01", 4), start_time=DAY - 600, min_runtime=8 * HOUR,
                              preemptions=2, max_runtime=10 * HOUR + 600)],
        pending_jobs=[pending("p-big", "p", 8, min_runtime=HOUR, submit_time=0.0),
                      pending("x-1", "x", 4, min_runtime=8 * HOUR, preemptions=1, submit_time=1.0),
                      pending("x-2", "x", 4, min_runtime=8 * HOUR, preemptions=1, submit_time=2.0),
                      pending("x-3", "x", 4, min_runtime=8 * HOUR, submit_time=3.0)])

    decisions = schedule(snap, now=DAY, policy=Policy(tick=5, max_reservations=1))

    assert [(r.job_id, r.hosts) for r in decisions.reservations] == [("p-big", ("hgx-01-h01",))]
    assert [s.job_id for s in decisions.starts] == ["x-3"]
    assert "this job's protection (its minimum runtime, longer after a preemption) would outlast that" in \
        decisions.pending["x-2"].reason


def test_a_job_that_found_nothing_to_preempt_says_so_after_a_larger_job_alike_searched_again() -> None:
    """q, less served than p, holds every GPU but one (past protection, but p may not take from a unit less
    served). p's 8-GPU a0 takes the tick's reservation; x (4 GPUs) finds nothing to preempt; s (1 GPU) starts
    on the free GPU, charging p; y (8 GPUs, alike x but larger) searches again after that charge and finds
    nothing. x's reason still says why it could not preempt: before, y's search took the place of x's, and x,
    smaller than y, read as if it had never searched."""
    org = units(("p", None, 50.0, 300.0), ("q", None, 50.0, 0.0))
    snap = snapshot(
        topology(hgx("hgx-00"), hgx("hgx-01")), org,
        running_jobs=[running("q-0", "q", gpus_of("hgx-00-h01", 7), start_time=DAY - 2 * HOUR),
                      running("q-1", "q", gpus_of("hgx-01-h01", 8), start_time=DAY - 2 * HOUR)],
        pending_jobs=[pending("a0", "p", 8, submit_time=0.0), pending("x", "p", 4, submit_time=1.0),
                      pending("s", "p", 1, min_runtime=60, submit_time=2.0), pending("y", "p", 8, submit_time=3.0)])

    decisions = schedule(snap, now=DAY, policy=Policy(tick=5))

    assert [s.job_id for s in decisions.starts] == ["s"]
    assert decisions.preemptions == ()
    assert NO_VICTIMS in decisions.pending["x"].reason
    assert NO_VICTIMS in decisions.pending["y"].reason


def test_a_larger_job_that_could_not_use_a_job_between_its_checkpoints_is_not_told_it_waits_for_one() -> None:
    """p's 2-GPU job on hgx-00 is past its protection but 40 minutes into an hour between checkpoints; p's other 6
    GPUs there are protected. x's 2-GPU job could take the 2 GPUs and waits for that checkpoint (rule 4). x's
    8-GPU job, of the same class, could not use them (it needs the whole host): no running job may be
    preempted for it, and its reason says so. Before, the smaller job's search stood for it, reason and all."""
    org = units(("p", None, 50.0, 300.0), ("x", None, 50.0))
    snap = snapshot(
        topology(hgx("hgx-00")), org,
        running_jobs=[running("p-ckpt", "p", gpus_of("hgx-00-h01", 2), start_time=DAY - 20 * HOUR,
                              checkpoint_every=HOUR, last_checkpoint=DAY - 2400),
                      running("p-new", "p", gpus_of("hgx-00-h01", 6, 2), start_time=DAY - 600, min_runtime=8 * HOUR)],
        pending_jobs=[pending("x-small", "x", 2, submit_time=0.0), pending("x-big", "x", 8, submit_time=1.0)])

    decisions = schedule(snap, now=DAY, policy=Policy(tick=5, max_reservations=0))

    assert decisions.starts == () and decisions.preemptions == ()
    assert "between their checkpoints" in decisions.pending["x-small"].reason
    assert NO_VICTIMS in decisions.pending["x-big"].reason


def test_a_job_that_found_nothing_to_preempt_says_so_after_a_claim_let_gpus_go_later_in_the_tick() -> None:
    """p's a2 finds nothing to preempt (r's job, past protection, is of a unit less served). Later in the walk,
    q's claimant starts on 4 of the 8 GPUs held for it and lets the other 4 go, so the tick learns anew what
    fits and what may be preempted. a2's reason still says why it could not preempt: before, it read as if it
    had never searched."""
    org = units(("p", None, 40.0, 200.0), ("q", None, 30.0, 500.0), ("r", None, 30.0, 0.0))
    snap = snapshot(
        topology(hgx("hgx-00"), hgx("hgx-01")), org,
        running_jobs=[running("r-run", "r", gpus_of("hgx-01-h01", 8), start_time=DAY - 2 * HOUR)],
        pending_jobs=[pending("a1", "p", 8, submit_time=0.0), pending("a2", "p", 8, min_runtime=2 * HOUR,
                                                                       submit_time=1.0),
                      pending("c", "q", 4, submit_time=2.0, earmarked_gpus=gpus_of("hgx-00-h01", 8))])

    decisions = schedule(snap, now=DAY, policy=Policy(tick=5))

    assert [(s.job_id, s.gpu_ids) for s in decisions.starts] == [("c", gpus_of("hgx-00-h01", 4))]
    assert [r.job_id for r in decisions.reservations] == ["a1"]
    assert NO_VICTIMS in decisions.pending["a2"].reason


class _DecidedInFull:
    """Within it, a tick decides every job in full: no verdict by class, no failure standing for a job alike
    (placement or victims), no victim search answered from an earlier one. The rules' own answer."""

    def __enter__(self):
        self._saved = {name: getattr(search.BoundedSearch, name)
                       for name in ("_verdict", "_no_victims_for", "_fits_nowhere")}
        self._find = preemption.Victims.find
        find = self._find

        def find_afresh(victims, *args, **kwargs):
            for outlook in victims._outlooks.values():
                outlook.hopeless.clear()
            return find(victims, *args, **kwargs)

        search.BoundedSearch._verdict = lambda cycle, job: None
        search.BoundedSearch._no_victims_for = lambda cycle, job, preempting, access: False
        search.BoundedSearch._fits_nowhere = lambda cycle, job, key: False
        preemption.Victims.find = find_afresh
        return self

    def __exit__(self, *exc):
        for name, method in self._saved.items():
            setattr(search.BoundedSearch, name, method)
        preemption.Victims.find = self._find


def _cluster(seed: int):
    """A small, busy cluster: 8-GPU H100 hosts beside 4-GPU GB200 domains, sometimes with CPUs and memory to ask
    for; flat or two-level orgs; running jobs past and within their protection, some sharing a GPU, some with a
    maximum runtime, some between declared checkpoints, some leaving for a waiting job; and waiting jobs of every
    size, some needing one domain, some preferring one, some asking GPUs per host, a GPU type, a fraction, a
    maximum runtime or CPUs, some preempted before."""
    rng = random.Random(seed)
    hgxs, nvls = rng.randint(1, 3), rng.randint(0, 2)
    cpus = rng.choice([0, 0, 64])
    topo = topology(*[hgx(f"hgx-{i:02}", gpu_type="H100", cpus=cpus, memory_gib=cpus * 8) for i in range(hgxs)],
                    *[domain(f"nvl-{i:02}", 4, 4, cpus=cpus, memory_gib=cpus * 8) for i in range(nvls)])
    hosts = [(f"hgx-{i:02}-h01", 8) for i in range(hgxs)] + [(f"nvl-{i:02}-h{h:02}", 4)
                                                              for i in range(nvls) for h in range(1, 5)]
    if rng.random() < 0.5:
        projects = ["a1", "a2", "b1", "b2"]
        org = units(("a", None, rng.choice([30.0, 50.0, 70.0])), ("b", None, rng.choice([30.0, 50.0])),
                    *[(p, p[0], rng.choice([20.0, 50.0, 80.0]), rng.uniform(0, 200)) for p in projects],
                    ("free", None, None))
    else:
        projects = ["p", "x", "y"][:rng.randint(2, 3)]
        org = units(*[(p, None, rng.choice([10.0, 20.0, 30.0, 50.0]), rng.uniform(0, 300)) for p in projects],
                    ("free", None, None))
    runs = []
    for host, size in hosts:
        used = 0
        while used < size and rng.random() < 0.85:
            gpus = rng.choice([1, 2, 4, 8])
            if used + gpus > size:
                break
            project = rng.choice([*projects, "free"])
            extra = {}
            if rng.random() < 0.3:
                extra.update(checkpoint_every=rng.choice([1800.0, 3 * HOUR]),
                             last_checkpoint=DAY - rng.choice([300, 1500, 2 * HOUR]))
            if rng.random() < 0.2:
                extra["max_runtime"] = rng.choice([HOUR * 21, 30 * HOUR])
            if cpus:
                extra.update(cpus=8 * gpus, memory_gib=64 * gpus)
            if gpus == 1 and rng.random() < 0.3:
                extra["gpu_milli"] = 500
            min_runtime = 0 if project == "free" else rng.choice([HOUR, 2 * HOUR, 8 * HOUR])
            runs.append(running(f"r{len(runs)}", project, gpus_of(host, gpus, used),
                                start_time=DAY - rng.choice([600, 3 * HOUR, 20 * HOUR]), min_runtime=min_runtime,
                                **extra))
            used += gpus
    waiting = []
    for n in range(rng.randint(4, 24)):
        project = rng.choice([*projects, "free"])
        gpus = rng.choice([1, 2, 4, 8, 12, 16])
        # A `preferred` job is placed and preempts for as an `any` one does: one class with it (`_classes_of`).
        ask = {"topology": "domain"} if gpus >= 8 and nvls and rng.random() < 0.3 else \
            {"topology": "preferred"} if rng.random() < 0.3 else {}
        if gpus >= 8 and rng.random() < 0.3:
            ask["gpus_per_host"] = rng.choice([4, 8]) if gpus % 8 == 0 else 4
        if gpus == 1 and rng.random() < 0.3:
            ask["gpu_milli"] = rng.choice([250, 500])
        if rng.random() < 0.2:
            ask["gpu_types"] = frozenset([rng.choice(["H100", "GB200"])])
        if rng.random() < 0.3:
            ask["max_runtime"] = rng.choice([2 * HOUR, 5 * HOUR, 12 * HOUR])
        if cpus and rng.random() < 0.5:
            ask.update(cpus=rng.choice([4, 8, 24]) * gpus, memory_gib=rng.choice([64, 256]))
        waiting.append(pending(f"j{n}", project, gpus, min_runtime=0 if project == "free" else rng.choice(
            [HOUR, 8 * HOUR]), submit_time=float(n), preemptions=rng.choice([0, 0, 1, 2]),
            restart_overhead=rng.choice([None, None, 1800.0]), **ask))
    # A running job leaving for a waiting allocated job (its victim, in its grace period), whose GPUs are held
    # for it.
    claimants = [n for n, job in enumerate(waiting) if job.min_runtime > 0]
    if runs and claimants and rng.random() < 0.3:
        n, victim = rng.choice(claimants), rng.randrange(len(runs))
        runs[victim] = replace(runs[victim], state=PREEMPTING, preempted_for=waiting[n].id, grace_ends=DAY + 30)
        waiting[n] = replace(waiting[n], earmarked_gpus=runs[victim].gpu_ids)
    return snapshot(topo, org, running_jobs=runs, pending_jobs=waiting)


def _decided(decisions, explain: bool) -> tuple:
    result = (sorted((s.job_id, s.gpu_ids) for s in decisions.starts),
              sorted((p.job_id, p.preemptor) for p in decisions.preemptions),
              sorted((r.job_id, r.hosts, r.expected_start) for r in decisions.reservations))
    if explain:
        result += (sorted((job_id, s.position, s.estimated_start, s.reason)
                          for job_id, s in decisions.pending.items()),)
    return result


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), explain=st.booleans(),
       reservations=st.sampled_from((1, 3)))
def test_a_tick_decides_as_it_would_deciding_every_job_in_full(seed: int, explain: bool, reservations: int) -> None:
    snap = _cluster(seed)
    policy = Policy(tick=5, explain=explain, max_reservations=reservations)
    remembered = schedule(snap, now=DAY, policy=policy)
    with _DecidedInFull():
        in_full = schedule(snap, now=DAY, policy=policy)
    assert _decided(remembered, explain) == _decided(in_full, explain)

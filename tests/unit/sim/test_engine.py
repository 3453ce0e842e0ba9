"""The simulator's event loop: determinism, a sound event log, faults, and the calls it may skip."""

import random
from dataclasses import replace

import pytest

from scheduler.core import DOWN, DRAINED, DRAINING, UP, Policy, quiet, schedule
from scheduler.core.window import WindowUsage
from scheduler.sim.checks import check_result
from scheduler.sim.engine import InitialRun, InitialState, Simulation, UsageInterval
from scheduler.sim.faults import Fault
from scheduler.sim.output import job_rows

from .helpers import HOUR, cluster, hgx, job, nvl72, one_host, org, run

UNITS = org(("p", 50), ("q", 30), ("r", 20)) + org(("free", None))


def random_jobs(seed: int, count: int = 60, *, span: float = 4 * HOUR) -> list:
    rng = random.Random(seed)
    jobs = []
    for n in range(count):
        gpus = rng.choice([1, 1, 2, 4, 4, 8, 8, 16, 32])
        project = rng.choice(["p", "q", "r", "free"])
        min_runtime = 0 if project == "free" or rng.random() < 0.15 else rng.choice([300, 900, 1800, 3600])
        topology = rng.choice(["any", "domain", "preferred"]) if gpus >= 8 else "any"
        jobs.append(job(
            f"j{n:03d}", float(rng.randint(0, int(span))), project, gpus, float(rng.randint(120, 3 * int(HOUR))),
            min_runtime=min_runtime, resumable=rng.random() < 0.8,
            checkpoint_every=rng.choice([None, 300.0, 600.0]), topology=topology,
            gpus_per_host=4 if gpus >= 8 and topology == "domain" else None,
            gpu_milli=rng.choice([1000, 1000, 500, 300]) if gpus == 1 else 1000,
            seq=n + 1,
        ))
    return jobs


def small_cluster(**policy):
    return cluster(nvl72("rack-a", missing={7: 4}), nvl72("rack-b"), hgx("hgx-01"), hgx("hgx-02"),
                   policy=Policy(tick=5, **policy))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_it_is_deterministic(seed):
    jobs = random_jobs(seed)
    first = run(small_cluster(fast_lane_gpus=8), UNITS, jobs)
    second = run(small_cluster(fast_lane_gpus=8), UNITS, list(reversed(jobs)))
    assert first.events == second.events
    assert job_rows(first) == job_rows(second)
    first.summary.pop("wall_seconds"), second.summary.pop("wall_seconds")
    assert first.summary == second.summary


@pytest.mark.parametrize("policy", ["allot", "fifo", "priority", "node-level"])
@pytest.mark.parametrize("seed", [4, 5])
def test_its_event_log_is_consistent(seed, policy):
    faults = [Fault(3000, "rack-b-h03", "down", 1), Fault(5000, "rack-b-h03", "up", 2),
              Fault(4000, "hgx-01-h01", "drain", 3), Fault(9000, "hgx-01-h01", "resume", 4)]
    result = run(small_cluster(fast_lane_gpus=8), UNITS, random_jobs(seed, 80), policy=policy, faults=faults)
    assert check_result(result) == []
    assert result.summary["jobs"] == 80


def test_a_down_host_loses_its_jobs_resumable_ones_requeue():
    """Two jobs on one 8-GPU host: r (resumable, checkpoint every 600 s) and n (not resumable).

    The host goes down at 1000: at the tick both are preempted (`down:box-h01`), r requeues having
    kept 600 s of its 1000 (4 GPUs × 400 s lost), n fails (4 GPUs × 1000 s lost). The host comes
    back at 2000 and r, after the default restart overhead of 300 s (lost too), runs its remaining 1400 s.
    """
    faults = [Fault(1000, "box-h01", "down", 1), Fault(2000, "box-h01", "up", 2)]
    result = run(one_host(8, tick=10), org(("p", 100)), [
        job("r", 0, "p", 4, 2000, checkpoint_every=600),
        job("n", 0, "p", 4, 5000, resumable=False),
    ], faults=faults)
    events = [(t, j, e, d) for t, j, e, d in result.events if t > 0]
    assert (1000, "r", "preempt", "down:box-h01") in events
    assert (1000, "r", "requeue", "lost 400 s of work") in events
    assert (1000, "n", "preempt", "down:box-h01") in events
    assert (1000, "n", "fail", "host down; not resumable") in events
    assert (2000, "r", "start", "box-h01:0 box-h01:1 box-h01:2 box-h01:3") in events
    assert (3700, "r", "finish", "") in events
    assert result.summary["lost_gpu_hours"] == round((4 * 400 + 4 * 1000 + 4 * 300) / 3600, 3)
    assert result.summary["availability"] == pytest.approx(1 - 1000 / 3700)
    assert check_result(result) == []


def test_a_drained_host_empties_as_the_engine_drains():
    """D1: a host runs an unallocated job and an allocated one 10 min into its 1 h minimum runtime.

    Drain at 600: the unallocated job is preempted at once (`drain:box-h01`), the allocated one when
    its protection ends at 3600, leaving after the 60 s grace; the host is then drained. Resumed at
    4000, it runs the requeued jobs again.
    """
    faults = [Fault(600, "box-h01", "drain", 1), Fault(4000, "box-h01", "resume", 2)]
    sim = Simulation(one_host(8, tick=10), org(("p", 100)), [
        job("free", 0, "p", 4, 20_000, min_runtime=0),
        job("held", 0, "p", 4, 20_000, min_runtime=HOUR),
    ], decide=schedule, faults=faults, until=3700)
    result = sim.run()
    events = [(t, j, e, d) for t, j, e, d in result.events if t > 0]
    assert events[:2] == [(600, "free", "preempt", "drain:box-h01"), (610, "free", "requeue", "lost no work")]
    assert (3600, "held", "preempt", "drain:box-h01") in events
    assert (3660, "held", "requeue", "lost no work") in events
    assert result.host_states["box-h01"] == DRAINED
    result = run(one_host(8, tick=10), org(("p", 100)), [
        job("free", 0, "p", 4, 20_000, min_runtime=0),
        job("held", 0, "p", 4, 20_000, min_runtime=HOUR),
    ], faults=faults)
    starts = [(t, j) for t, j, e, _ in result.events if e == "start"]
    assert starts == [(0, "held"), (0, "free"), (4000, "held"), (4000, "free")]
    assert result.host_states["box-h01"] == UP
    assert check_result(result) == []


def test_a_fault_changes_the_host_state_as_on_call_actions_do():
    fault = Fault(0, "h", "drain")
    assert fault.new_state(UP) == DRAINING
    assert fault.new_state(DOWN) == DOWN
    assert Fault(0, "h", "resume").new_state(DRAINED) == UP
    assert Fault(0, "h", "resume").new_state(DOWN) == DOWN
    assert Fault(0, "h", "up").new_state(DOWN) == UP


class EveryTick(Simulation):
    """The live loop's rhythm: the core at every tick while any job waits or runs, quiet or not."""

    def _tick(self, when):
        super()._tick(when)
        if self.state.pending or self.state.running:
            self.quiet_at = when + self.policy.tick


# 118 diverged before a tick that charged units where the walk met their jobs, while a reservation held a job
# back, was followed by one (the next tick charges claims at its start: the reservation may not hold then); 638
# before the moment a unit stops being allowed to take from another counted while a reservation held a job back
# (rule 5's sweep then counts the other's jobs as never leaving for it, and the reservation moves).
@pytest.mark.parametrize("seed", [6, 7, 8, 12, 13, 118, 638])
def test_skipping_the_ticks_the_core_calls_quiet_changes_nothing(seed):
    """The simulator calls the core only when something happened or when the core said a tick could decide
    something new (`quiet_until`): the same run, event for event, as calling it at every tick as live,
    with far fewer calls."""
    jobs = random_jobs(seed, 50, span=2 * HOUR)
    quiet = run(small_cluster(fast_lane_gpus=8), UNITS, jobs)
    every = EveryTick(small_cluster(fast_lane_gpus=8), UNITS, jobs, decide=schedule).run()
    assert quiet.core_calls < every.core_calls / 2
    assert quiet.events == every.events


# Two programs with two projects each: siblings under a common ancestor, so a less-served sibling's wait can
# keep the other from preempting outside their program (rule 4), and shields after preemptions (churn).
NESTED = (org(("A", 60), ("B", 40)) + org(("a1", 30), ("a2", 70), parent="A") + org(("b1", 50), ("b2", 50), parent="B")
          + org(("free", None)))


def nested_jobs(seed: int) -> list:
    rename = {"p": "a1", "q": "a2", "r": "b1"}
    jobs = random_jobs(seed, 60, span=3 * HOUR)
    rng = random.Random(seed)
    return [replace(j, project=rename.get(j.project, j.project) if rng.random() < 0.8 else "b2") for j in jobs]


# 54 and 90 diverged before the sibling-order moments were counted where a sibling's wait kept a job from
# preempting (`state.scoped`); 75 and 79 before a job holding a claim, kept by a reservation from free GPUs
# elsewhere, counted as held back; 384 before the checkpoints of the jobs defragmentation may move counted while
# a waiting job could defragment (a move costs what the moved jobs lose, which a checkpoint brings to nothing);
# 656 before the moments the order a move takes a domain's jobs in turns (least work lost first: the lines of
# lost work cross); 816 before a tick that preempted for a job while a reservation held hosts was followed by
# one (the claim is planned anew from its leaving victims on any host, and took free GPUs the reservation held).
@pytest.mark.parametrize("seed", [6, 7, 8, 12, 13, 21, 54, 75, 79, 90, 384, 656, 816])
def test_skipping_quiet_ticks_changes_nothing_in_a_nested_org(seed):
    """The same with programs and projects: the moments siblings swap places count where a sibling's wait
    kept a job from preempting, and a shield's end counts like a protection's."""
    jobs = nested_jobs(seed)
    quiet = run(small_cluster(fast_lane_gpus=8), NESTED, jobs)
    every = EveryTick(small_cluster(fast_lane_gpus=8), NESTED, jobs, decide=schedule).run()
    assert quiet.events == every.events


def varied_jobs(seed: int) -> list:
    """`nested_jobs` with what else a job may ask: a GPU type, a maximum runtime, a priority, its own restart
    overhead."""
    rng = random.Random(seed)

    def varied(j):
        fields = {}
        if rng.random() < 0.2:
            fields["gpu_types"] = frozenset([rng.choice(["GB200", "H100"])])
        if rng.random() < 0.2:
            fields["max_runtime"] = max(j.min_runtime, rng.choice([1800.0, HOUR, 2 * HOUR]))
        if rng.random() < 0.3:
            fields["priority"] = rng.choice([0, 2])
        if rng.random() < 0.2:
            fields["restart_overhead"] = rng.choice([0.0, 900.0])
        return replace(j, **fields)

    return [varied(j) for j in nested_jobs(seed)]


# 3000 diverged when a tick passed over with nothing waiting forgot the moment a maximum runtime ended; 3135
# before a preemptible job that could leave together with a leaving one now counted to leave after it from the
# next tick on (rule 5's sweep then held the leaving job's hosts, not the preemptible one's).
@pytest.mark.parametrize("seed", [3000, 3001, 3002, 3135])
def test_skipping_quiet_ticks_changes_nothing_with_jobs_of_every_ask(seed):
    """The same with GPU types, maximum runtimes, priorities and restart overheads in the workload (over 10 hours:
    a job asking a type no domain of its size has waits for ever, and a call every tick would never end)."""
    jobs = varied_jobs(seed)
    quiet = run(small_cluster(fast_lane_gpus=8), NESTED, jobs, until=10 * HOUR)
    every = EveryTick(small_cluster(fast_lane_gpus=8), NESTED, jobs, decide=schedule, until=10 * HOUR).run()
    assert quiet.events == every.events


class EveryWindow(Simulation):
    """As before `ClusterState.window_jobs`: every running job's checkpoint window counted after each tick."""

    def _apply(self, decisions, when):
        super()._apply(decisions, when)
        self.state.window_jobs = set(self.state.running)


# With a half-hour window runs slide out of it all the time, and the units' usage lines bend at every slide.
# 555 diverged when the lines were first followed through the bends: there rule 4b stopped letting a unit take
# from another where their lines met, on a tick boundary, and that moment was counted just after it.
@pytest.mark.parametrize("seed", [555, 302, 305])
def test_following_the_usage_lines_through_the_window_changes_nothing(seed, monkeypatch):
    """`quiet_until` follows the ratio lines through the window's bends rather than naming the first bend as a
    moment: the same run, event for event, as calling the core at every tick and as looking again at every
    bend, with fewer calls than the latter."""
    jobs = random_jobs(seed, 50, span=2 * HOUR)
    followed = run(small_cluster(fast_lane_gpus=8, window=1800.0), UNITS, jobs)
    every = EveryTick(small_cluster(fast_lane_gpus=8, window=1800.0), UNITS, jobs, decide=schedule).run()
    monkeypatch.setattr(quiet, "MAX_BENDS", 0)  # the first bend is as far as a line is followed
    at_each_bend = run(small_cluster(fast_lane_gpus=8, window=1800.0), UNITS, jobs)
    assert followed.events == every.events == at_each_bend.events
    assert followed.core_calls < at_each_bend.core_calls


def test_only_the_windows_a_tick_read_wake_the_next():
    """A job's checkpoint window opening or closing can change a decision only if the last tick's searches passed
    it over or its sweep read its leave time from it; counting only those spares calls and changes nothing."""
    narrow_calls = every_calls = 0
    for seed in (6, 12, 21, 75):
        jobs = [replace(j, checkpoint_every=j.checkpoint_every or 600.0) for j in nested_jobs(seed)]
        narrow = run(small_cluster(fast_lane_gpus=8), NESTED, jobs)
        every_window = EveryWindow(small_cluster(fast_lane_gpus=8), NESTED, jobs, decide=schedule).run()
        assert narrow.events == every_window.events
        narrow_calls += narrow.core_calls
        every_calls += every_window.core_calls
    assert narrow_calls < every_calls


class Calls(Simulation):
    """Records the moments the core was called."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.called_at = []

    def _tick(self, when):
        calls = self.core_calls
        super()._tick(when)
        if self.core_calls > calls:
            self.called_at.append(when)


def test_an_unallocated_job_submitted_into_a_full_cluster_costs_no_call():
    """No GPU it could use is free, and it may neither preempt nor reserve: its arrival calls no tick (the core
    says so, `quiet.waits_on_arrival`). It starts once the host is free and no allocated job wants it, as with a
    tick every 5 s; an allocated job arriving alike calls its tick (it may preempt)."""
    jobs = [job("held", 0.0, "p", 8, 2 * HOUR, min_runtime=2 * HOUR),
            job("filler", 600.0, "free", 4, HOUR, min_runtime=0),
            job("owed", 1200.0, "q", 8, HOUR, min_runtime=HOUR)]
    host = one_host(8, tick=5)
    quiet = Calls(host, UNITS, jobs, decide=schedule)
    result = quiet.run()
    every = EveryTick(host, UNITS, jobs, decide=schedule).run()
    assert result.events == every.events
    assert 600.0 not in quiet.called_at and 1200.0 in quiet.called_at
    starts = {job_id: when for when, job_id, kind, _ in result.events if kind == "start"}
    assert (starts["owed"], starts["filler"]) == (2 * HOUR, 3 * HOUR)


@pytest.mark.parametrize("seed", [9, 10, 33])
def test_a_tick_leaves_nothing_to_decide_at_once(seed):
    """Quiescence: right after a tick's decisions are applied, a second tick at the same moment decides
    nothing more — after a preemption too, since its claim holds the GPUs for the preemptor."""
    sim = Simulation(small_cluster(fast_lane_gpus=8), UNITS, random_jobs(seed, 60), decide=schedule)
    decide_after = []
    original = sim._apply

    def apply_then_ask_again(decisions, when):
        original(decisions, when)
        again = schedule(sim.state.snapshot(when), now=when, policy=sim.policy)
        decide_after.append((when, again.starts, again.preemptions))

    sim._apply = apply_then_ask_again
    sim.run()
    assert decide_after
    assert [entry for entry in decide_after if entry[1] or entry[2]] == []


def test_the_core_decides_the_same_with_or_without_explanations():
    seen = []

    def both(snapshot, *, now, policy):
        plain = schedule(snapshot, now=now, policy=replace(policy, explain=False))
        explained = schedule(snapshot, now=now, policy=replace(policy, explain=True))
        assert plain.starts == explained.starts
        assert plain.preemptions == explained.preemptions
        assert plain.reservations == explained.reservations
        assert plain.host_changes == explained.host_changes
        assert plain.pending == {}
        seen.append(len(explained.pending))
        return plain

    Simulation(small_cluster(fast_lane_gpus=8), UNITS, random_jobs(11, 60), decide=both).run()
    assert sum(seen) > 0


def test_it_slides_usage_out_of_the_window_as_it_goes():
    window = WindowUsage(100)
    window.add("p", True, 2, 0, 50)  # 100 GPU-seconds
    window.add("p", True, 1, 40, 90)  # 50
    window.at(90)
    assert window.usage("p", True) == pytest.approx(150)
    window.at(120)  # window [20, 120]: 2 × 30 + 1 × 50
    assert window.usage("p", True) == pytest.approx(110)
    window.at(145)  # window [45, 145]: 2 × 5 + 1 × 45
    assert window.usage("p", True) == pytest.approx(55)
    window.at(200)
    assert window.usage("p", True) == 0
    assert window.usage("p", False) == 0


def test_it_names_every_change_of_slope_to_come_in_order():
    """`bends_after`: where each ended allocated run starts and stops sliding out, after `now`, in time order;
    the slope `rate` gives now is what those before it leave."""
    window = WindowUsage(100)
    window.add("p", True, 2, 0, 50)
    window.add("q", True, 1, 40, 90)
    window.add("p", False, 4, 10, 20)  # unallocated: not in the allocated usage's slope
    assert list(window.bends_after(0)) == [(100, "p", -2), (140, "q", -1), (150, "p", 2), (190, "q", 1)]
    window.at(145)
    assert list(window.bends_after(145)) == [(150, "p", 2), (190, "q", 1)]
    assert window.rate("p", True) == -2 and window.rate("q", True) == -1
    window.add("q", True, 3, 150, 160)  # ended later: its changes come in their place
    assert list(window.bends_after(145)) == [(150, "p", 2), (190, "q", 1), (250, "q", -3), (260, "q", 3)]


def test_it_starts_from_a_live_state():
    """The what-if: a job already running since −600 with 1000 s of work left, and a week of prior usage."""
    initial = InitialState(
        running=(InitialRun(job("old", -900, "p", 4, 1600), start=-600, gpu_ids=("box-h01:0", "box-h01:1",
                                                                                  "box-h01:2", "box-h01:3")),),
        history=(UsageInterval("q", 8, -7200, -3600, True),),
    )
    result = run(one_host(8, tick=10), org(("p", 50), ("q", 50)),
                 [job("new", 0, "q", 8, 100)], initial=initial)
    events = [(t, j, e) for t, j, e, _ in result.events]
    assert events[:2] == [(-900, "old", "submit"), (-600, "old", "start")]
    assert (1000, "old", "finish") in events
    assert (1000, "new", "start") in events
    assert check_result(result) == []


def test_a_maximum_runtime_ends_a_run_though_another_ended_while_nothing_waited():
    """Two jobs start at once on an idle host: one is done in an hour, the other may run 2 hours of its 3. The
    first ends with nothing waiting; the core is not called then (nothing could start), but the second is still
    stopped at its maximum runtime, as the live tick stops it. Before, the call passed over at the first end
    forgot when the core had to look again, and the second ran its 3 hours."""
    jobs = [job("short", 0, "p", 4, HOUR), replace(job("capped", 0, "p", 4, 3 * HOUR), max_runtime=2 * HOUR)]
    result = run(one_host(8, tick=10), org(("p", 100)), jobs)
    events = [(t, j, e, d) for t, j, e, d in result.events if j == "capped"]
    assert (2 * HOUR, "capped", "preempt", "max_runtime") in events
    assert all(e != "finish" for _, _, e, _ in events)
    every = EveryTick(one_host(8, tick=10), org(("p", 100)), jobs, decide=schedule).run()
    assert result.events == every.events

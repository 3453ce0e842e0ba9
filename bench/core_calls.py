"""Where a simulation's core calls go: what asked for each call, and what it decided (issue 15).

    .venv/bin/python bench/core_calls.py speed-1024 [WORKLOAD ...] [--days D]

Plays each workload under `allot` as `bench/sim_table.py` does (the first D
days only, with --days) and sorts every call of the core by what asked for it
and by what it decided:

- asked by: the events since the last call that ask for one (`allocated
  arrival`, `unallocated arrival` (one that may start: `quiet.waits_on_arrival`),
  `run ended`, `host change`), or, with none, the `quiet moment`: when the
  core itself said a tick could next decide something new
  (`core.quiet.quiet_until`), with which of its moments it was (`quiet.TERMS`:
  a protection ending, usage ratios crossing, a look again after a tick that
  charged units while a reservation held a job back, ...);
- decided: started a job, else preempted one, else moved a reservation (another
  job, or other hosts, than the last call's), else nothing new.

For each pair it prints the calls, their share, the seconds spent in the core
and the mean per call. Calls that decide nothing new are the ones a cheaper
core (or a more exact `quiet_until`) would spare; calls that start a job after
a run ended are the ones only a faster decision can.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sim_table import DAY, unknown_workload, workload  # noqa: E402
from scheduler.core import schedule  # noqa: E402
from scheduler.sim.engine import Simulation  # noqa: E402

# What asks for a call: the core's own next moment (`quiet_until`), or the events since the last call.
QUIET = "quiet moment"
ARRIVED = "allocated arrival"
ARRIVED_UNALLOCATED = "unallocated arrival"
ENDED = "run ended"
HOST = "host change"
OUTCOMES = ("started a job", "preempted", "moved a reservation", "nothing new")


class Counted(Simulation):
    """The simulator, counting its core calls by what asked for them and what they decided."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # (asked by, decided) -> calls, and -> seconds in the core.
        self.calls: Counter = Counter()
        self.seconds: Counter = Counter()
        self._event = ""
        self._asked: set[str] = set()
        self._reservations: tuple = ()
        # What the call being made decided (`_apply`), one of OUTCOMES.
        self._decided = ""
        # Which of `quiet_until`'s moments the last call named (`quiet.TERMS`).
        self._term = ""

    # What each event is, noted as it is handled; it asks for a call if the engine marks the next tick due.
    def _submit(self, run, when: float) -> None:
        self._event = ARRIVED if run.job.allocated else ARRIVED_UNALLOCATED
        super()._submit(run, when)

    def _end(self, run, when: float, outcome) -> None:
        self._event = ENDED
        super()._end(run, when, outcome)

    def _fault(self, fault, when: float) -> None:
        self._event = HOST
        super()._fault(fault, when)

    def _dirty(self, when: float) -> None:
        if self._event:
            self._asked.add(self._event)
        super()._dirty(when)

    def _tick(self, when: float) -> None:
        calls, seconds = self.core_calls, self.core_seconds
        asked = " + ".join(sorted(self._asked)) or f"{QUIET}: {self._term}"
        self._asked = set()
        super()._tick(when)
        if self.core_calls > calls:
            key = (asked, self._decided)
            self.calls[key] += 1
            self.seconds[key] += self.core_seconds - seconds

    def _quiet_until(self, when: float, decisions, named: list[str] | None = None) -> float:
        named = [] if named is None else named
        moment = super()._quiet_until(when, decisions, named)
        self._term = named[-1]
        return moment

    def _apply(self, decisions, when: float) -> None:
        reservations = tuple((r.job_id, r.hosts) for r in decisions.reservations)
        if decisions.starts:
            self._decided = OUTCOMES[0]
        elif decisions.preemptions:
            self._decided = OUTCOMES[1]
        elif reservations != self._reservations:
            self._decided = OUTCOMES[2]
        else:
            self._decided = OUTCOMES[3]
        self._reservations = reservations
        super()._apply(decisions, when)


def table(counted: Counted) -> list[str]:
    """One line per (asked by, decided), most time first, and the totals."""
    calls, seconds = sum(counted.calls.values()), sum(counted.seconds.values())

    def row(asked: str, decided: str, n: int, spent: float) -> str:
        return (f"  {asked:80} {decided:20} {n:8,} {n / calls:6.1%} {spent:8.2f} {spent / seconds:6.1%} "
                f"{spent / n * 1000:8.2f}")

    lines = [f"  {'asked by':80} {'decided':20} {'calls':>8} {'share':>6} {'core s':>8} {'share':>6} {'ms/call':>8}"]
    for key, spent in sorted(counted.seconds.items(), key=lambda item: (-item[1], item[0])):
        lines.append(row(*key, counted.calls[key], spent))
    for outcome in OUTCOMES:
        n = sum(v for k, v in counted.calls.items() if k[1] == outcome)
        if n:
            lines.append(row("all", outcome, n, sum(v for k, v in counted.seconds.items() if k[1] == outcome)))
    if calls:
        lines.append(row("all", "", calls, seconds))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+", help="names as bench/sim_table.py takes them")
    parser.add_argument("--days", type=float, default=None, help="simulate only the first D days")
    parser.add_argument("--traces", default=None, help="trace folder (default ../shared/traces)")
    args = parser.parse_args(argv)
    for name in args.workloads:
        if unknown_workload(name):
            parser.error(unknown_workload(name))
    if args.days is not None and not args.days > 0:
        parser.error(f"--days must be more than 0, not {args.days}")
    for name in args.workloads:
        cluster, units, jobs, faults, until, _ = workload(name, quick=False, traces=args.traces)
        if args.days is not None:
            until = min(until, args.days * DAY)
        counted = Counted(cluster, units, jobs, decide=schedule, policy_name="allot", faults=faults, until=until)
        counted.run()
        print(f"{name} ({until / DAY:g} days): {counted.core_calls:,} core calls, {counted.core_seconds:.1f} s in "
              f"the core")
        print("\n".join(table(counted)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

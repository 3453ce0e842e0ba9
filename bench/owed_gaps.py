"""Where a workload's worst project loses what it was owed, hour by hour (issue 18).

    .venv/bin/python bench/owed_gaps.py family-few-large-2 [WORKLOAD ...]

Plays each workload under `allot` as `bench/sim_table.py` does, with reasons asked for (they change no
decision). At the first tick of every simulated hour it reads, for every project with an allocation, what the
project was owed then (`min(entitled GPUs, GPUs its allocated jobs hold or ask)`, Ai2's measure) against the
GPUs it held, and the reason its first waiting allocated job gave; each reading counts until the next one (an
hour with no tick changed nothing a tick would see). For the project the summary names worst it prints the
shortfall summed per kind of reason, as points of all it was owed. The measure itself nets those hours against
the hours the project held more than it was owed, so the points add up to more than what it falls short of in
the summary.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sim_table import unknown_workload, workload  # noqa: E402
from scheduler.core import schedule  # noqa: E402
from scheduler.sim.engine import Simulation  # noqa: E402
from scheduler.sim.output import summarise  # noqa: E402

HOUR = 3600.0

# The first words of rule 8's reasons that say why an allocated job waits, in the order they are tried.
KINDS = (
    ("entitled to keep", "every domain that could hold it is held by units less served (rule 5's exception)"),
    ("reserved for it", "a place is reserved for it"),
    ("preempting", "its victims are leaving"),
    ("waiting for the jobs it preempted", "its victims are leaving"),
    ("less served than it under", "a less-served sibling waits (rule 4's scope)"),
    ("between their checkpoints", "the jobs it may take are between checkpoints"),
    ("no running job may be preempted", "no running job it may take (protected, its own, or less served)"),
    ("the free GPUs that fit were", "another job's reservation keeps it out"),
)


def kind_of(reason: str) -> str:
    return next((kind for words, kind in KINDS if words in reason), "other: " + reason.split(";")[0])


class Observed(Simulation):
    """The simulator, with reasons asked for, reading every project at the first tick of each hour."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.policy = replace(self.policy, explain=True)
        self.next_hour = 0.0
        # GPU-hours owed, and held less than owed by the reason the project's first waiting job gave.
        self.owed: Counter = Counter()
        self.short: defaultdict[str, Counter] = defaultdict(Counter)
        # The last reading: when, and project -> (GPUs owed, GPUs short, why), counted until the next one.
        self._reading: tuple[float, dict[str, tuple[float, float, str]]] | None = None

    def _apply(self, decisions, when: float) -> None:
        if when >= self.next_hour:
            self.next_hour = (when // HOUR + 1) * HOUR
            self._count_until(when)
            self._reading = (when, self._read(decisions))
        super()._apply(decisions, when)

    def run(self):
        result = super().run()
        self._count_until(result.end)
        return result

    def _count_until(self, when: float) -> None:
        """The last reading holds until `when` (an hour with no tick changed nothing a tick would see)."""
        if self._reading is None:
            return
        since, read = self._reading
        hours = (when - since) / HOUR
        for project, (owed, short, why) in read.items():
            self.owed[project] += owed * hours
            if short > 0:
                self.short[project][why] += short * hours
        self._reading = None

    def _read(self, decisions) -> dict[str, tuple[float, float, str]]:
        healthy = self.state.capacity.healthy_gpus
        held: Counter = Counter()
        for job in self.state.running.values():
            if job.min_runtime > 0:
                held[job.project] += len(job.gpu_ids)
        first: dict[str, tuple[int, str]] = {}
        asked: Counter = Counter()
        for job in self.state.pending.values():
            status = decisions.pending.get(job.id)
            if job.min_runtime > 0 and status is not None:
                asked[job.project] += job.gpus
                if job.project not in first or status.position < first[job.project][0]:
                    first[job.project] = (status.position, status.reason)
        read = {}
        for project, share in self.shares.items():
            if share > 0:
                owed = min(share * healthy, held[project] + asked[project])
                why = kind_of(first[project][1]) if project in first else "nothing waiting"
                read[project] = (owed, owed - held[project], why)
        return read


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+", help="names as bench/sim_table.py takes them")
    parser.add_argument("--traces", default=None, help="trace folder (default ../shared/traces)")
    args = parser.parse_args(argv)
    for name in args.workloads:
        if unknown_workload(name):
            parser.error(unknown_workload(name))
    for name in args.workloads:
        cluster, units, jobs, faults, until, _ = workload(name, quick=False, traces=args.traces)
        simulation = Observed(cluster, units, jobs, decide=schedule, policy_name="allot", faults=faults, until=until)
        result = simulation.run()
        owed = summarise(result)["owed_delivered"]
        worst = owed["worst_project"]
        if worst is None:
            print(f"{name}: no project with an allocation was owed anything")
            continue
        total = simulation.owed[worst]
        gaps = simulation.short[worst]
        print(f"{name}: worst project {worst}, delivered {owed['worst']:.1%} of what it was owed; the hours it "
              f"held less: {sum(gaps.values()) / total:.1%} of it, while its first waiting job's reason was")
        for kind, gap in gaps.most_common():
            print(f"  {gap / total:6.1%}  {kind}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Fractions in the engine: topology rules first, then the fragmentation-aware cost of `packing.ShareCost`.

SCENARIOS P1 stays in test_scenarios.py; these are the cases where the
packing score, the topology rules, CPU and memory and GPU types decide.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduler.core import Domain, Host, Policy, Snapshot, schedule
from scheduler.core.capacity import Capacity
from scheduler.core.packing import ShareCost, Task
from scheduler.core.placement import JobRequest, demand_workload, find_placement, share_cost
from tests.unit.core.builders import HOUR, domain, pending, running, snapshot, topology, units

NOW = 10 * HOUR
POLICY = Policy()
ORG = units(("p", None, 100))


def box(name: str, gpus: int, *, gpu_type: str = "T4", cpus: int = 0) -> tuple[Domain, tuple[Host, ...]]:
    return domain(name, 1, gpus, gpu_type=gpu_type, cpus=cpus)


def share(job_id: str, gpu: str, milli: int, **kwargs):
    kwargs.setdefault("start_time", NOW - HOUR)
    return running(job_id, "p", (gpu,), gpu_milli=milli, **kwargs)


@dataclass
class Case:
    name: str
    snapshot: Snapshot
    job: str
    gpu: str

    def __str__(self) -> str:
        return self.name


def cases() -> list[Case]:
    table = []
    # GPU 0 has 600 free, GPU 1 has 700; the demand is mostly 200-milli tasks. Best fit would put 500 on GPU 0
    # and leave 100 no one asks for; the cost puts it on GPU 1, leaving 200 for the next small task.
    held = [share("r0", "a-h01:0", 400), share("r1", "a-h01:1", 300)]
    queue = [pending("five", "p", 1, gpu_milli=500, submit_time=0)]
    queue += [pending(f"small{i}", "p", 1, gpu_milli=200, submit_time=10 + i) for i in range(10)]
    table.append(Case("a fraction avoids leaving a hole the demand cannot fill",
                      snapshot(topology(box("a", 2)), ORG, running_jobs=held, pending_jobs=queue), "five", "a-h01:1"))
    # The same GPUs with a demand of 100-milli tasks: the 100 hole is useful, best fit wins.
    queue = [pending("five", "p", 1, gpu_milli=500, submit_time=0)]
    queue += [pending(f"tiny{i}", "p", 1, gpu_milli=100, submit_time=10 + i) for i in range(10)]
    table.append(Case("with small tasks expected, the tighter fit is best",
                      snapshot(topology(box("a", 2)), ORG, running_jobs=held, pending_jobs=queue), "five", "a-h01:0"))
    # Prefer a GPU already shared over a whole free one, even on another host.
    held = [share("r0", "a-h01:0", 300)]
    table.append(Case("a GPU already shared comes before a whole free one",
                      snapshot(topology(box("a", 1), box("b", 1)), ORG, running_jobs=held,
                               pending_jobs=[pending("j", "p", 1, gpu_milli=500)]), "j", "a-h01:0"))
    # No shared GPU has room: a whole GPU on a host already in use, not one of an empty domain.
    held = [running("w", "p", ("b-h01:0", "b-h01:1", "b-h01:2"), start_time=NOW - HOUR)]
    table.append(Case("a fraction on a whole GPU keeps empty hosts and domains whole",
                      snapshot(topology(box("a", 4), box("b", 4)), ORG, running_jobs=held,
                               pending_jobs=[pending("j", "p", 1, gpu_milli=500)]), "j", "b-h01:3"))
    # GPU types: a V100M16|V100M32 job skips the T4 with the better fit.
    held = [share("r0", "t-h01:0", 500), share("r1", "v-h01:0", 200)]
    table.append(Case("gpu_spec-style type constraints are honoured",
                      snapshot(topology(box("t", 1, gpu_type="T4"), box("v", 1, gpu_type="V100M16")), ORG,
                               running_jobs=held,
                               pending_jobs=[pending("j", "p", 1, gpu_milli=500,
                                                     gpu_types=frozenset({"V100M16", "V100M32"}))]),
                      "j", "v-h01:0"))
    # CPU bounds: the shared GPU's host has no CPU left for the job.
    held = [share("r0", "a-h01:0", 500, cpus=16)]
    table.append(Case("a host's CPUs bound where a fraction goes",
                      snapshot(topology(box("a", 1, cpus=16), box("b", 1, cpus=16)), ORG, running_jobs=held,
                               pending_jobs=[pending("j", "p", 1, gpu_milli=500, cpus=8)]), "j", "b-h01:0"))
    return table


@pytest.mark.parametrize("case", cases(), ids=str)
def test_it_places_fractions(case: Case) -> None:
    decisions = schedule(case.snapshot, now=NOW, policy=POLICY)
    starts = {s.job_id: s for s in decisions.starts}
    assert starts[case.job].gpu_ids == (case.gpu,), starts[case.job]


def test_the_reason_says_why_the_gpu_was_chosen() -> None:
    snap = snapshot(topology(box("a", 1)), ORG, running_jobs=[share("r", "a-h01:0", 300)],
                    pending_jobs=[pending("j", "p", 1, gpu_milli=500)])
    (start,) = schedule(snap, now=NOW, policy=POLICY).starts
    assert start.reason == "shares GPU a-h01:0 (200 milli-GPU left free on it): the shared GPU where it fragments " \
                           "the least"


def test_the_engine_cost_is_the_packers_measures_on_the_ticks_demand() -> None:
    held = (share("r0", "a-h01:0", 400), share("r1", "a-h01:1", 300))
    queue = (pending("five", "p", 1, gpu_milli=500), pending("two", "p", 1, gpu_milli=200, cpus=2),
             pending("gang", "p", 8), pending("mig", "p", 1, mig_profile="1g.10gb"), pending("cpu", "p", 0, cpus=4))
    workload = demand_workload(held, queue)
    assert dict(workload.counts) == {
        Task(0, 0, 1, 500): 1, Task(2000, 0, 1, 200): 1, Task(0, 0, 8, 1000): 1, Task(0, 0, 1, 400): 1,
        Task(0, 0, 1, 300): 1,
    }
    capacity = Capacity(topology(box("a", 2)), held, queue, NOW)
    cost = ShareCost(workload)
    req = JobRequest.of(queue[0], POLICY)
    placement = find_placement(req, capacity, lambda host: True)
    assert placement.shared_gpu is not None
    expected = min(cost.cost("T4", 1 << 40, [600, 700], gpu, Task(0, 0, 1, 500)) for gpu in (0, 1))
    assert placement.key[1] == expected
    assert share_cost(capacity) is share_cost(capacity)  # built once per tick

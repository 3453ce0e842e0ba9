"""The what-if's comparison: both sides simulated from the same inputs, and what differs for each affected unit.

`simulate_both` plays the next `HORIZON` seconds from `readers.build_inputs`'
inputs twice, with the shares as they are and with the request's unit at the
share tried, and gives, for the requesting unit, its siblings and its parent,
the share, entitlement, usage, usage ratio and waits on both sides, and the
cluster's occupancy and waits.

A busy cluster is chaotic (one start a tick earlier can reorder the rest of
the week), so the side without the change runs once more with the arrivals a
few minutes later: how far its numbers move is reported as the noise a
difference between the sides must exceed to mean anything.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from budgets.models import BudgetRequest
from scheduler.core import Unit as CoreUnit
from scheduler.core import schedule
from scheduler.sim import SimJob
from scheduler.sim.measures import percentile, unit_measures
from scheduler.sim.parallel import simulate_all

from .readers import CONTROL_SHIFT, HORIZON, POLICY, RUNNING, WhatIfInputs, build_inputs


def _round(value: float | None, places: int = 4) -> float | None:
    return None if value is None else round(value, places)


def _waits(result) -> dict[str, list[float]]:
    """Project → waits of its allocated jobs that were pending at the start or arrived (not those running)."""
    waits: dict[str, list[float]] = {}
    for run in result.runs:
        job = run.job
        if job.id.startswith(RUNNING) or not job.allocated or run.state == "waiting":
            continue
        start = run.first_start if run.first_start is not None else result.end
        waits.setdefault(job.project, []).append(max(0.0, start - job.submit))
    return waits


def _call(inputs: WhatIfInputs, units: tuple[CoreUnit, ...], jobs: tuple[SimJob, ...] | None = None) -> dict:
    """One side's week, as `simulate` takes it."""
    return {"cluster": inputs.cluster, "units": units, "jobs": inputs.jobs if jobs is None else jobs,
            "decide": schedule, "policy_name": POLICY, "initial": inputs.initial, "until": HORIZON}


def _side(units: tuple[CoreUnit, ...], result) -> tuple[dict, dict]:
    """Per unit and for the cluster, what one side's simulated week gave."""
    tracker = result.tracker
    waits = _waits(result)
    measures = unit_measures(units, used=tracker.used_by_project(), waits=waits,
                             healthy_gpu_seconds=tracker.gpu_seconds()["up"])
    every_wait = [wait for values in waits.values() for wait in values]
    summary = result.summary
    cluster = {
        "occupancy": summary["occupancy"],
        "allocated_occupancy": summary["allocated_occupancy"],
        "unallocated_occupancy": summary["unallocated_occupancy"],
        "wait_p90": _round(percentile(every_wait, 90), 1),
        "jobs": len(every_wait),
        "completed": summary["completed"],
        "preemptions": summary["preemptions"],
        "owed_delivered": summary["owed_delivered"]["overall"],
        "wall_seconds": round(result.wall_seconds, 3),
    }
    return measures, cluster


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else abs(a - b)


def simulate_both(inputs: WhatIfInputs, *, control: bool = True) -> dict:
    """Run both sides; per affected unit its share, entitlement, usage, usage ratio and waits on each.

    With `control`, the side without the change runs a second time on `inputs.control_jobs` (the arrivals a few
    minutes later): how much a unit's numbers move then (`noise`) is how much a
    difference between the sides may be chance. A busy cluster is chaotic: one job starting a tick earlier can
    reorder the rest of the week.
    """
    calls = [_call(inputs, inputs.without), _call(inputs, inputs.with_change)]
    if control:
        calls.append(_call(inputs, inputs.without, inputs.control_jobs))
    # The sides are independent weeks: played at once, one per CPU (`scheduler.sim.parallel`).
    results = simulate_all(calls)
    without, cluster_without = _side(inputs.without, results[0])
    with_change, cluster_with = _side(inputs.with_change, results[1])
    again = _side(inputs.without, results[2])[0] if control else None
    shares = {"without": {u.name: u.share for u in inputs.without},
              "with": {u.name: u.share for u in inputs.with_change}}

    def side(measures: dict, share: float | None) -> dict:
        return {
            "share": share,
            "share_of_cluster": _round(measures["share_of_cluster"], 6),
            "entitled_gpu_hours": _round(measures["entitled_gpu_hours"], 1),
            "used_gpu_hours": _round(measures["used_gpu_hours"], 1),
            "usage_ratio": _round(measures["usage_ratio"]),
            "wait_p50": _round(measures["wait_p50"], 1),
            "wait_p90": _round(measures["wait_p90"], 1),
            "jobs": measures["jobs"],
        }

    def noise(name: str) -> dict | None:
        if again is None:
            return None
        return {key: _round(_difference(without[name][key], again[name][key]), places)
                for key, places in (("usage_ratio", 4), ("wait_p90", 1), ("used_gpu_hours", 1))}

    return {
        "horizon_seconds": HORIZON,
        "units": [
            {"unit": name, "role": role,
             "without": side(without[name], shares["without"][name]),
             "with": side(with_change[name], shares["with"][name]),
             "noise": noise(name)}
            for name, role in inputs.affected
        ],
        "cluster": {"without": cluster_without, "with": cluster_with},
        "control_shift_seconds": CONTROL_SHIFT if control else None,
    }


def what_if(budget_request: BudgetRequest, *, share: Decimal, now: datetime, **caps) -> tuple[dict, dict]:
    """(assumptions, results) of one what-if, computed now, stored nowhere."""
    inputs = build_inputs(budget_request, share=share, now=now, **caps)
    return inputs.assumptions, simulate_both(inputs)

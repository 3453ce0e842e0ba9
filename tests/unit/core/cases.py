"""A table row for the scheduler core: a snapshot in, the decisions and reasons expected out."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from scheduler.core import Decisions, Policy, Snapshot, schedule


@dataclass
class Case:
    name: str
    snapshot: Snapshot
    now: float
    policy: Policy = field(default_factory=Policy)
    # job id -> GPU ids, for every start (None: don't check starts this way).
    starts: dict[str, tuple[str, ...]] | None = None
    # job id -> set of domains its GPUs must lie in, for jobs that must start.
    started_in: dict[str, set[str]] = field(default_factory=dict)
    # job id -> (cause, requeue, grace), for every preemption.
    preempted: dict[str, tuple[str, bool, float]] = field(default_factory=dict)
    # job id -> domain reserved for it.
    reserved: dict[str, str] = field(default_factory=dict)
    # job id -> fragments its reason (pending, preemption or start) must contain.
    facts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # job id -> queue position.
    positions: dict[str, int] = field(default_factory=dict)
    # host -> (state, fragment of the reason).
    host_changes: dict[str, tuple[str, str]] = field(default_factory=dict)
    # unit -> usage ratio at the start of the tick (to 4 decimals).
    ratios: dict[str, float] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


def _reason_of(decisions: Decisions, job_id: str) -> str:
    if job_id in decisions.pending:
        return decisions.pending[job_id].reason
    for item in decisions.preemptions + decisions.starts:
        if item.job_id == job_id:
            return item.reason
    raise AssertionError(f"no decision about {job_id}")


def check(case: Case) -> Decisions:
    """Run the case and assert everything it expects; returns the decisions for more checks."""
    decisions = schedule(case.snapshot, now=case.now, policy=case.policy)
    if case.starts is not None:
        assert {s.job_id: s.gpu_ids for s in decisions.starts} == case.starts
    started = {s.job_id: s for s in decisions.starts}
    for job_id, domains in case.started_in.items():
        assert job_id in started, f"{job_id} did not start: {decisions.pending[job_id].reason}"
        assert {gpu.split("-h")[0] for gpu in started[job_id].gpu_ids} <= domains
    if case.started_in and case.starts is None:
        assert set(started) == set(case.started_in)
    assert {p.job_id: (p.cause, p.requeue, p.grace) for p in decisions.preemptions} == case.preempted
    assert {r.job_id: r.domain for r in decisions.reservations} == case.reserved
    for job_id, fragments in case.facts.items():
        reason = _reason_of(decisions, job_id)
        for fragment in fragments:
            assert fragment in reason, f"{fragment!r} not in {reason!r}"
    for job_id, position in case.positions.items():
        assert decisions.pending[job_id].position == position
    for host, (state, fragment) in case.host_changes.items():
        change = next(c for c in decisions.host_changes if c.host == host)
        assert change.state == state and fragment in change.reason, change
    for unit, ratio in case.ratios.items():
        assert decisions.unit_ratios[unit] == pytest.approx(ratio, abs=1e-4)
    pending_ids = {job.id for job in case.snapshot.pending}
    assert set(decisions.pending) == pending_ids - set(started)
    return decisions

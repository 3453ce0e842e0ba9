"""`quiet._first_turn` stops at the first charge that cannot take now: the same moment as the minimum over all.

The charges come smallest first; the gainer's ratio, charged more, only grows, and so does the moment its
line crosses the loser's. A job that may take now is followed by larger ones that may not, never the other
way round, so the first charge that may not take is the one that turns soonest. Checked here against the
minimum over every charge, in floating point, on random usages, entitlements, rates and charges. And which of
the tick's charges a project's jobs were compared under (`_charges_unseen`): those alone may make the next tick
compare otherwise.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core import Policy
from scheduler.core.engine import decide
from scheduler.core.fairshare import UnitNode
from scheduler.core.quiet import AFTER, _charges_unseen, _first_turn, _stretches, lines_cross
from scheduler.core.state import ClusterState

from .builders import DAY, hgx, pending, snapshot, topology, units

NOW = 1_000_000.0
POLICY = Policy(tick=5, grace_period=60, unallocated_grace=10)
positive = st.floats(1.0, 1e9, allow_nan=False, allow_infinity=False)
amount = st.floats(0.0, 1e9, allow_nan=False, allow_infinity=False)


def _every_charge(gainer, loser, charges, claimed, charged, charged_for_claims, now, crossing, reach) -> float:
    """The minimum over every charge (what `_first_turn` stood for before it stopped early)."""
    soonest = math.inf
    loser_charge = claimed[loser.name]
    for charge in charges:
        gainer_charge = charge + claimed[gainer.name]
        if gainer.ratio_with(gainer_charge) < loser.ratio_with(loser_charge):
            if (gainer in charged or loser in charged_for_claims) and reach(gainer.name, charge):
                return now + AFTER
            continue
        soonest = min(soonest, crossing(gainer, gainer_charge, loser, loser_charge))
    return soonest


@settings(max_examples=300, deadline=None)
@given(usage=st.tuples(amount, amount), entitled=st.tuples(positive, positive), rate=st.tuples(amount, amount),
       claimed=st.tuples(amount, amount), charges=st.lists(amount, max_size=12, unique=True),
       segment=st.floats(1.0, 1e7), charged=st.sampled_from([(), ("g",), ("l",), ("g", "l")]),
       for_claims=st.sampled_from([(), ("g",), ("l",)]), reachable=st.sets(amount))
def test_the_first_charge_that_cannot_take_turns_soonest(usage, entitled, rate, claimed, charges, segment,
                                                          charged, for_claims, reachable) -> None:
    gainer = UnitNode("g", 10.0, None, usage=usage[0], entitled=entitled[0])
    loser = UnitNode("l", 10.0, None, usage=usage[1], entitled=entitled[1])
    rates = {"g": rate[0], "l": rate[1]}
    segment_end = NOW + segment

    def crossing(low, low_extra, high, high_extra=0.0):  # as `quiet_until` binds it, the lines bending later
        return lines_cross(low, low_extra, high, high_extra,
                           _stretches(low, high, rates, NOW, [(segment_end, "", 0.0)], SimpleNamespace(nodes={})))

    claims = {"g": claimed[0], "l": claimed[1]}
    ordered = sorted(charges)
    # A unit charged for a claim was charged (`charged` holds every unit the tick charged).
    units = {"g": gainer, "l": loser}
    for_claims = {units[name] for name in for_claims}
    charged = {units[name] for name in charged} | for_claims
    # Whether jobs charging an amount could find victims at all (`quiet._reach`): some charges could, some not.
    reachable = reachable | set(charges[::2])

    def reach(project, charge):
        return charge in reachable

    def seen(project):
        return charged, for_claims

    assert _first_turn(gainer, loser, ordered, claims, seen, reach, "g", NOW, crossing) == \
        _every_charge(gainer, loser, ordered, claims, charged, for_claims, NOW, crossing, reach)


# Two sides under a root, each with two projects: a bend of a project moves the line of the side above it.
_PROJECTS = {"g1": "g", "g2": "g", "l1": "l", "l2": "l", "elsewhere": None}


def _tree(usage, entitled):
    root = UnitNode("root", 100.0, None)
    gainer = UnitNode("g", 10.0, root, usage=usage[0], entitled=entitled[0])
    loser = UnitNode("l", 10.0, root, usage=usage[1], entitled=entitled[1])
    nodes = {"root": root, "g": gainer, "l": loser}
    for project, side in _PROJECTS.items():
        parent = nodes.get(side, root)
        nodes[project] = UnitNode(project, 10.0, parent)
    for node in nodes.values():
        node.path = (node.parent.path if node.parent is not None else ()) + (node,)
    return SimpleNamespace(nodes=nodes), gainer, loser


def _ratio_at(side, extra, rate, bends, t) -> float:
    """A side's ratio at `t`, summed from scratch: its usage, its rate since NOW and every bend under it since."""
    usage = side.usage + extra + rate * (t - NOW)
    for when, project, change in bends:
        if when < t and _PROJECTS.get(project) == side.name:
            usage += change * (t - when)
    return usage / side.entitled


@settings(max_examples=400, deadline=None)
@given(usage=st.tuples(amount, amount), entitled=st.tuples(positive, positive),
       rate=st.tuples(st.floats(0.0, 1e3), st.floats(0.0, 1e3)), extra=st.tuples(amount, amount),
       bends=st.lists(st.tuples(st.floats(1.0, 1e6), st.sampled_from(sorted(_PROJECTS)), st.floats(-1e3, 1e3)),
                      max_size=12),
       more_to_come=st.booleans())
def test_the_lines_are_followed_through_their_bends(usage, entitled, rate, extra, bends, more_to_come) -> None:
    """`lines_cross` over `_stretches` names the first moment the gainer's line falls below the loser's, their
    slopes changing at every bend of a project under either (and at no other): checked against the ratios
    summed from scratch just before and just after it. Past the last bend known, when more may follow, it names
    that bend."""
    tree, gainer, loser = _tree(usage, entitled)
    bends = sorted((NOW + offset, project, change) for offset, project, change in bends)
    rates = {"g": rate[0], "l": rate[1]}
    more_to_come = more_to_come and bool(bends)  # `_lines` ends the bends it takes with inf if none follow
    known = bends if more_to_come else [*bends, (math.inf, "", 0.0)]
    turns = lines_cross(gainer, extra[0], loser, extra[1], _stretches(gainer, loser, rates, NOW, known, tree))

    def behind(t: float) -> float:
        return _ratio_at(gainer, extra[0], rates["g"], bends, t) - _ratio_at(loser, extra[1], rates["l"], bends, t)

    if gainer.ratio_with(extra[0]) < loser.ratio_with(extra[1]):
        return  # below already: the callers ask only for lines not crossed yet
    scale = max(1.0, abs(gainer.ratio_with(extra[0])), abs(loser.ratio_with(extra[1])))
    moments = [NOW] + [when for when, _, _ in bends if when < turns]
    # Not below before it: at every bend before it (the lines are straight in between, so checking their ends
    # suffices), up to rounding.
    for moment in moments:
        assert behind(moment) >= -1e-6 * scale
    if turns == math.inf:
        assert not more_to_come
        last = max([NOW] + [when for when, _, _ in bends])
        assert behind(last + 1e9) >= -1e-6 * scale  # never below, even long after the last bend
    elif more_to_come and turns == bends[-1][0]:
        pass  # the last bend known: counted, whatever comes after
    else:
        assert behind(turns + AFTER) < 1e-6 * scale  # below (up to rounding) just after the moment named


def test_a_unit_looks_again_only_for_charges_its_jobs_were_compared_under() -> None:
    """After a tick that started jobs, their charges are gone at the next tick: only a project whose jobs the walk
    compared while a unit on its path was charged may compare otherwise then (`Cycle.met`, `_charges_unseen`).
    Here x's first job starts (x is charged), then y's (y is), then x's second job is compared under both
    charges; y's job was compared under x's charge only."""
    org = units(("P", None, 100), ("x", "P", 50), ("y", "P", 50))
    jobs = [pending("x1", "x", 2, submit_time=0.0), pending("x2", "x", 8, submit_time=1.0),
            pending("y1", "y", 2, submit_time=0.0)]
    state = ClusterState.from_snapshot(snapshot(topology(hgx("hgx-00")), org, pending_jobs=jobs))
    decided = decide(state, now=DAY, policy=POLICY)
    assert sorted(s.job_id for s in decided.starts) == ["x1", "y1"]
    assert state.walk_charges == (("x1", "y1"), {"x": (0, 2), "y": (1, 1)})
    seen = _charges_unseen(state, state.usage_tree(DAY, POLICY.window), {"x1": "x", "y1": "y"})

    def names(found: tuple[set, set]) -> tuple[set, set]:
        return {node.name for node in found[0]}, {node.name for node in found[1]}

    assert names(seen("x")) == ({"P", "x", "y"}, set())
    assert names(seen("y")) == ({"P", "x"}, set())
    # With no tick just before, nothing was charged.
    assert _charges_unseen(state, state.usage_tree(DAY, POLICY.window), {})("x") == (set(), set())

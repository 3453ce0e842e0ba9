"""`quiet._first_turn` stops at the first charge that cannot take now: the same moment as the minimum over all.

The charges come smallest first; the gainer's ratio, charged more, only grows, and so does the moment its
line crosses the loser's. A job that may take now is followed by larger ones that may not, never the other
way round, so the first charge that may not take is the one that turns soonest. Checked here against the
minimum over every charge, in floating point, on random usages, entitlements, rates and charges.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.fairshare import UnitNode
from scheduler.core.quiet import AFTER, _first_turn, lines_cross

NOW = 1_000_000.0
positive = st.floats(1.0, 1e9, allow_nan=False, allow_infinity=False)
amount = st.floats(0.0, 1e9, allow_nan=False, allow_infinity=False)


def _every_charge(gainer, loser, charges, claimed, charged, charged_for_claims, now, crossing) -> float:
    """The minimum over every charge (what `_first_turn` stood for before it stopped early)."""
    soonest = math.inf
    loser_charge = claimed[loser.name]
    for charge in charges:
        gainer_charge = charge + claimed[gainer.name]
        if gainer.ratio_with(gainer_charge) < loser.ratio_with(loser_charge):
            if gainer.name in charged or loser.name in charged_for_claims:
                return now + AFTER
            continue
        soonest = min(soonest, crossing(gainer, gainer_charge, loser, loser_charge))
    return soonest


@settings(max_examples=300, deadline=None)
@given(usage=st.tuples(amount, amount), entitled=st.tuples(positive, positive), rate=st.tuples(amount, amount),
       claimed=st.tuples(amount, amount), charges=st.lists(amount, max_size=12, unique=True),
       segment=st.floats(1.0, 1e7), charged=st.sampled_from([(), ("g",), ("l",), ("g", "l")]),
       for_claims=st.sampled_from([(), ("g",), ("l",)]))
def test_the_first_charge_that_cannot_take_turns_soonest(usage, entitled, rate, claimed, charges, segment,
                                                          charged, for_claims) -> None:
    gainer = UnitNode("g", 10.0, None, usage=usage[0], entitled=entitled[0])
    loser = UnitNode("l", 10.0, None, usage=usage[1], entitled=entitled[1])
    rates = {"g": rate[0], "l": rate[1]}
    segment_end = NOW + segment

    def crossing(low, low_extra, high, high_extra=0.0):  # as `quiet_until` binds it
        return lines_cross(low, low_extra, high, high_extra, rates, NOW, segment_end)

    claims = {"g": claimed[0], "l": claimed[1]}
    ordered = sorted(charges)
    # A unit charged for a claim was charged (`charged` holds every unit the tick charged).
    charged = set(charged) | set(for_claims)
    assert _first_turn(gainer, loser, ordered, claims, charged, set(for_claims), NOW, crossing) == \
        _every_charge(gainer, loser, ordered, claims, charged, set(for_claims), NOW, crossing)

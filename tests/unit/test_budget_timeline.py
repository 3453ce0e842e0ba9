"""budgets.lib.timeline: a unit's share over time as pure data (no database)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgets.lib.timeline import (
    Period,
    grant_temporary,
    peak_total,
    permanent_boundary,
    reuse_rows,
    set_from,
    share_at,
)

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def day(n: float) -> datetime:
    return T0 + timedelta(days=n)


def shares(timeline, *days):
    return [share_at(timeline, day(n)).share if share_at(timeline, day(n)) else None for n in days]


BASE = [Period(day(-10), None, Decimal(55), row_id=1)]


def test_it_grants_a_temporary_share_and_the_earlier_share_comes_back():
    timeline = grant_temporary(BASE, start=day(1), end=day(8), share=Decimal(70), request_id=7)
    assert shares(timeline, 0, 1, 7.9, 8, 30) == [55, 70, 70, 55, 55]
    assert [(p.temporary, p.resumes) for p in timeline] == [(False, False), (True, False), (False, True)]
    assert timeline[0].row_id == 1 and timeline[0].end == day(1)  # the stored row is closed, not edited
    assert timeline[1].request_id == 7 and timeline[2].row_id is None


def test_a_temporary_grant_for_a_unit_without_a_share_leaves_it_without_one_after():
    timeline = grant_temporary([], start=day(1), end=day(2), share=Decimal(10))
    assert shares(timeline, 0, 1, 2) == [None, 10, None]


def test_a_permanent_change_ends_a_temporary_grant_in_effect_and_keeps_later_ones():
    timeline = grant_temporary(BASE, start=day(-1), end=day(3), share=Decimal(70))
    timeline = grant_temporary(timeline, start=day(5), end=day(6), share=Decimal(80))
    changed = set_from(timeline, start=day(0), share=Decimal(40))
    assert shares(changed, -0.5, 0, 4, 5, 6, 20) == [70, 40, 40, 80, 40, 40]
    assert [p.resumes for p in changed if p.start >= day(0) and not p.temporary] == [False, True]


def test_a_permanent_change_stops_at_the_next_scheduled_permanent_change():
    timeline = set_from(BASE, start=day(10), share=Decimal(30), request_id=4)
    assert permanent_boundary(timeline, day(0)) == day(10)
    changed = set_from(timeline, start=day(0), share=Decimal(50))
    assert shares(changed, -1, 0, 9.9, 10, 40) == [55, 50, 50, 30, 30]


def test_no_share_removes_the_allocation_from_then_on():
    assert shares(set_from(BASE, start=day(0), share=None), -1, 0, 5) == [55, None, None]


def test_identical_periods_keep_their_rows():
    stored = [
        Period(day(-10), day(1), Decimal(55), row_id=1),
        Period(day(1), day(2), Decimal(60), temporary=True, row_id=11),
        Period(day(2), None, Decimal(55), resumes=True, row_id=12),
    ]
    again = reuse_rows(stored, grant_temporary(stored, start=day(1), end=day(2), share=Decimal(60)))
    assert [p.row_id for p in again] == [1, 11, 12]


def test_the_peak_of_siblings_counts_future_and_time_limited_periods():
    olmo = [Period(day(-5), None, Decimal(55))]
    tulu = grant_temporary([Period(day(-5), None, Decimal(30))], start=day(3), end=day(4), share=Decimal(45))
    assert peak_total([olmo, tulu], start=day(0)) == (Decimal(100), day(3))
    assert peak_total([olmo, tulu], start=day(0), end=day(3)) == (Decimal(85), day(0))
    assert peak_total([], start=day(0)) == (Decimal(0), day(0))


def test_a_grant_must_end_after_it_starts():
    with pytest.raises(ValueError):
        grant_temporary(BASE, start=day(2), end=day(2), share=Decimal(1))


operations = st.lists(
    st.tuples(
        st.sampled_from(["temporary", "permanent"]),
        st.integers(min_value=0, max_value=20),
        st.integers(min_value=1, max_value=10),
        st.one_of(st.none(), st.integers(min_value=0, max_value=100)),
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_any_sequence_of_changes_keeps_a_timeline_of_non_overlapping_periods(ops):
    timeline = list(BASE)
    for kind, start, length, share in ops:
        if kind == "temporary":
            share = Decimal(share if share is not None else 1)
            timeline = grant_temporary(timeline, start=day(start), end=day(start + length), share=share)
            assert share_at(timeline, day(start)).share == share
        else:
            timeline = set_from(timeline, start=day(start), share=None if share is None else Decimal(share))
            found = share_at(timeline, day(start))
            assert (found.share if found else None) == (None if share is None else Decimal(share))
        for earlier, later in zip(timeline, timeline[1:], strict=False):
            assert earlier.end is not None and earlier.end <= later.start
        assert all(p.end is None or p.end > p.start for p in timeline)
        assert share_at(timeline, day(-1)).share == 55  # the past never changes

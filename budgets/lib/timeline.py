"""A unit's share of one cluster over time, as pure data: no database, no clock.

A timeline is a sorted list of non-overlapping periods [start, end); `end`
None means "until further notice" and a gap means no allocation. Changes are
written as whole periods, never by editing a share in place, so the history
stays. There are two ways to change a timeline:

- `grant_temporary(start, end, share)`: the span gets the share; what was
  there before `start` and after `end` stays. When a time-limited grant ends,
  the share that was in effect before it comes back (a period marked
  `resumes`), as Slurm or Beaker users expect of a temporary increase.
- `set_from(start, share)`: from `start` the share is `share`, up to the next
  scheduled permanent change (a future-dated approved request). A temporary
  grant in effect at `start` ends there; temporary grants that begin later
  stay, and the unit returns to the new share after them.

`peak_total` answers the 100 % rule: the largest sum of siblings' shares at
any moment of a span, and the first moment it is reached.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal


@dataclass(frozen=True)
class Period:
    start: datetime
    end: datetime | None
    share: Decimal
    temporary: bool = False  # a time-limited grant, or room lent to one: its end is an expiry
    resumes: bool = False  # the share coming back after a temporary grant
    request_id: int | None = None  # the budget request that set it
    row_id: int | None = None  # the stored allocation it is; None: not stored yet

    def covers(self, at: datetime) -> bool:
        return self.start <= at and (self.end is None or at < self.end)

    def overlaps(self, start: datetime, end: datetime | None) -> bool:
        return (self.end is None or self.end > start) and (end is None or self.start < end)

    def same_as(self, other: "Period") -> bool:
        return (self.start, self.end, self.share, self.temporary, self.resumes, self.request_id) == (
            other.start, other.end, other.share, other.temporary, other.resumes, other.request_id
        )


def _ordered(periods: Iterable[Period]) -> list[Period]:
    return sorted(periods, key=lambda period: period.start)


def share_at(periods: Iterable[Period], at: datetime) -> Period | None:
    return next((period for period in periods if period.covers(at)), None)


def permanent_boundary(periods: Iterable[Period], start: datetime) -> datetime | None:
    """When the next scheduled permanent change after `start` begins; None: there is none."""
    return min(
        (p.start for p in periods if p.start > start and not p.temporary and not p.resumes), default=None
    )


def grant_temporary(
    periods: Sequence[Period], *, start: datetime, end: datetime, share: Decimal, request_id: int | None = None
) -> list[Period]:
    """`share` for [start, end) only; the periods around it stay, cut at the edges."""
    if end <= start:
        raise ValueError("a temporary grant must end after it starts")
    result = []
    for period in periods:
        if not period.overlaps(start, end):
            result.append(period)
            continue
        if period.start < start:
            result.append(replace(period, end=start))
        if period.end is None or period.end > end:
            # What was there before comes back when the grant ends.
            result.append(replace(
                period, start=end, row_id=None, resumes=period.resumes or not period.temporary,
            ))
    result.append(Period(start, end, share, temporary=True, request_id=request_id))
    return _ordered(result)


def set_from(
    periods: Sequence[Period], *, start: datetime, share: Decimal | None, request_id: int | None = None
) -> list[Period]:
    """`share` from `start` (None: no allocation) up to the next scheduled permanent change."""
    boundary = permanent_boundary(periods, start)
    result, kept_temporaries = [], []
    for period in periods:
        if period.end is not None and period.end <= start:
            result.append(period)
        elif boundary is not None and period.start >= boundary:
            result.append(period)
        elif period.start < start:
            result.append(replace(period, end=start))  # ends here, a temporary grant in effect too
        elif period.start > start and period.temporary:
            kept_temporaries.append(period)
            result.append(period)
        # Any other period inside [start, boundary) is replaced.
    if share is not None:
        cursor, first = start, True
        for temporary in _ordered(kept_temporaries):
            if temporary.start > cursor:
                result.append(Period(cursor, temporary.start, share, resumes=not first, request_id=request_id))
            cursor, first = temporary.end, False
        if boundary is None or cursor < boundary:
            result.append(Period(cursor, boundary, share, resumes=not first, request_id=request_id))
    return _ordered(result)


def reuse_rows(old: Sequence[Period], new: Sequence[Period]) -> list[Period]:
    """Give a new period the row of an identical old one, so rewriting a timeline changes only what changed."""
    used = {period.row_id for period in new if period.row_id is not None}
    spare = [period for period in old if period.row_id is not None and period.row_id not in used]
    result = []
    for period in new:
        if period.row_id is None:
            twin = next((candidate for candidate in spare if candidate.same_as(period)), None)
            if twin is not None:
                spare.remove(twin)
                period = replace(period, row_id=twin.row_id)
        result.append(period)
    return result


def peak_total(
    timelines: Iterable[Sequence[Period]], *, start: datetime, end: datetime | None = None
) -> tuple[Decimal, datetime]:
    """The largest sum of the timelines' shares at any moment of [start, end), and when it is first reached."""
    timelines = [list(timeline) for timeline in timelines]
    moments = {start}
    for timeline in timelines:
        for period in timeline:
            if period.overlaps(start, end) and period.start > start:
                moments.add(period.start)
    best = (Decimal(0), start)
    for at in sorted(moments):
        total = sum(
            (found.share for found in (share_at(timeline, at) for timeline in timelines) if found is not None),
            Decimal(0),
        )
        if total > best[0]:
            best = (total, at)
    return best

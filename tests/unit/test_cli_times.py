"""The CLI's times: spans back from now, dates and ISO times for --since/--until; printed times labelled."""

import argparse
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from client.cli import clock, moment

NOW = datetime(2026, 12, 1, 14, 5, tzinfo=UTC)


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    __import__("time").tzset()
    yield
    monkeypatch.delenv("TZ")
    __import__("time").tzset()


@pytest.mark.parametrize("typed, expected", [
    ("30d", NOW - timedelta(days=30)), ("12h", NOW - timedelta(hours=12)), ("1d12h", NOW - timedelta(hours=36)),
    ("2026-11-01", datetime(2026, 11, 1, tzinfo=UTC)), ("2026-11-01T09:00", datetime(2026, 11, 1, 9, tzinfo=UTC)),
    ("2026-11-01T09:00:00+02:00", datetime(2026, 11, 1, 7, tzinfo=UTC)),
    ("2026-11-01T09:00Z", datetime(2026, 11, 1, 9, tzinfo=UTC)),
])
def test_since_and_until_take_spans_dates_and_iso_times(typed, expected):
    with time_machine.travel(NOW, tick=False):
        assert datetime.fromisoformat(moment(typed)) == expected


@pytest.mark.parametrize("typed", ["yesterday", "30", "-3d", "2026-13-01"])
def test_anything_else_is_refused_with_the_forms_it_takes(typed):
    with pytest.raises(argparse.ArgumentTypeError, match=r"a span back from now \(30d, 12h\) or a date"):
        moment(typed)


def test_printed_times_name_their_zone(monkeypatch):
    assert clock("2026-12-01T14:05:00Z") == "2026-12-01 14:05 UTC"
    monkeypatch.setenv("TZ", "Europe/Berlin")
    __import__("time").tzset()
    assert clock("2026-12-01T14:05:00Z") == "2026-12-01 15:05 CET"
    assert clock(None) == "-"

import pytest

from scheduler.core.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    "text, seconds",
    [(90, 90), ("90", 90), ("90s", 90), ("15m", 900), ("8h", 28800), ("7d", 604800), ("1.5h", 5400), (" 2h ", 7200)],
)
def test_it_reads_the_forms_people_write(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "h", "8 hours", "-5", -5, "1e3", True, "8x"])
def test_it_refuses_malformed_durations_with_the_accepted_forms(bad):
    with pytest.raises(ValueError, match=r"duration|negative"):
        parse_duration(bad)


@pytest.mark.parametrize(
    "seconds, text", [(45, "45s"), (900, "15m"), (7200, "2h"), (9000, "2h30m"), (604800, "7d"), (100800, "1d4h")]
)
def test_it_formats_durations_briefly(seconds, text):
    assert format_duration(seconds) == text

import pytest

from scheduler.core.durations import format_duration, parse_cli_duration, parse_duration


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


@pytest.mark.parametrize("text, seconds", [("2h30m", 9000), ("1d4h", 100800), ("1w2d", 777600), ("15m30s", 930)])
def test_it_reads_compounds_as_format_duration_prints_them(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text, seconds",
    [("90", 5400), ("0", 0), ("5:30", 330), ("02:30:00", 9000), ("1-12", 129600), ("1-12:30", 131400),
     ("1-12:00:00", 129600), ("2h30m", 9000), ("90s", 90), ("1.5h", 5400), ("7d", 604800)],
)
def test_the_cli_reads_durations_as_slurm_users_type_them(text, seconds):
    assert parse_cli_duration(text) == seconds


@pytest.mark.parametrize("bad", ["-5m", "-90", "two hours", "1:2:3:4", "h", "", "1-"])
def test_the_cli_refuses_malformed_durations_naming_the_forms(bad):
    with pytest.raises(ValueError, match=r"2h30m, 02:30:00, 1-12:00:00"):
        parse_cli_duration(bad)


@pytest.mark.parametrize("seconds", [0, 45, 900, 5400, 9000, 86400, 100800, 604800, 694800])
def test_the_cli_reads_back_every_duration_it_prints(seconds):
    assert parse_cli_duration(format_duration(seconds)) == seconds

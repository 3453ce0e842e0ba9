"""Durations as people write them: integer seconds or `90s`, `15m`, `8h`, `7d`, compounds such as `2h30m`
or `1d4h` (what `format_duration` prints), and, on the command line, Slurm's forms (`parse_cli_duration`).

Pure and shared by the loaders, the API, the CLI and the simulator.
"""

import re

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_COMPOUND = re.compile(r"^(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
# Slurm's time limits: minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes,
# days-hours:minutes:seconds.
_SLURM = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
CLI_FORMS = "90 (minutes, as Slurm), 90s, 2h30m, 02:30:00, 1-12:00:00"


def parse_duration(value) -> int:
    """Seconds in `value`; raise ValueError with the accepted forms if malformed."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration (use seconds or 90s, 15m, 8h, 7d)")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value} is negative; a duration is at least 0")
        return value
    if isinstance(value, float):
        if value < 0 or value != value:
            raise ValueError(f"{value} is not a duration of at least 0 seconds")
        return int(round(value))
    match = _PATTERN.match(str(value))
    if not match:
        compound = _compound(str(value).strip())
        if compound is None:
            raise ValueError(f"{value!r} is not a duration (use seconds or 90s, 15m, 8h, 7d)")
        return compound
    number, unit = match.groups()
    return int(round(float(number) * UNITS[unit or "s"]))


def _compound(text: str) -> int | None:
    """`2h30m`, `1d4h`, `1w2d`: whole numbers of each unit, largest first; None if it is not one."""
    match = _COMPOUND.match(text)
    if not text or not match:
        return None
    return sum(int(count) * UNITS[unit] for count, unit in zip(match.groups(), "wdhms", strict=True) if count)


def parse_cli_duration(value: str) -> int:
    """Seconds in a duration typed on the command line, as Slurm users type them: a bare number is minutes
    (`90`), `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`; and every form `parse_duration` reads (`90s`, `2h30m`,
    `1d4h`). Raise ValueError naming the accepted forms."""
    text = str(value).strip()
    if text.startswith("-"):
        raise ValueError(f"{text} is negative; a duration is at least 0 (e.g. {CLI_FORMS})")
    match = _SLURM.match(text)
    if match:
        days, first, second, third = match.groups()
        if days is not None:  # D-H[:M[:S]]
            hours, minutes, seconds = int(first), int(second or 0), int(third or 0)
        elif third is not None:  # H:M:S
            hours, minutes, seconds = int(first), int(second), int(third)
        else:  # M or M:S
            hours, minutes, seconds = 0, int(first), int(second or 0)
        return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds
    try:
        return parse_duration(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration (use {CLI_FORMS})") from None


def format_duration(seconds: float) -> str:
    """Short human form: 45s, 15m, 2h, 2h30m, 7d, 1d4h (rounded down to its two largest units); every one
    reads back with `parse_duration` and `parse_cli_duration`."""
    seconds = int(round(seconds))
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if seconds < 86400:
        hours, rest = divmod(seconds, 3600)
        minutes = rest // 60
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    days, rest = divmod(seconds, 86400)
    hours = rest // 3600
    return f"{days}d{hours}h" if hours else f"{days}d"

"""Durations as people write them: integer seconds or `90s`, `15m`, `8h`, `7d`.

Pure and shared by the loaders, the API, the CLI and the simulator.
"""

import re

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


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
        raise ValueError(f"{value!r} is not a duration (use seconds or 90s, 15m, 8h, 7d)")
    number, unit = match.groups()
    return int(round(float(number) * UNITS[unit or "s"]))


def format_duration(seconds: float) -> str:
    """Short human form: 45s, 15m, 2h, 2h30m, 7d, 1d4h."""
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

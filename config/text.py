"""Characters no text field of Allot stores: controls (terminal escapes) and bidirectional overrides.

Used by the input boundary (config/middleware.py) for every request, and by the services for names that
reach them another way.
"""

import re

CONTROLS = "".join(chr(c) for c in range(0x20)) + "\x7f"
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
SINGLE_LINE_FORBIDDEN = re.compile(f"[{re.escape(CONTROLS + BIDI)}]")
MULTILINE_FORBIDDEN = re.compile(f"[{re.escape(CONTROLS.translate({9: None, 10: None, 13: None}) + BIDI)}]")


def describe(char: str) -> str:
    names = {"\x00": "a NUL byte (null characters are not allowed)", "\t": "a tab", "\n": "a newline",
             "\r": "a carriage return", "\x1b": "an escape character (terminal control sequence)"}
    if char in names:
        return names[char]
    if char in BIDI:
        return f"the bidirectional control U+{ord(char):04X} (it makes text display out of order)"
    return f"the control character U+{ord(char):04X}"


def forbidden_in(value: str, *, multiline: bool = False) -> str | None:
    """Why `value` cannot be stored (the first forbidden character, described), or None."""
    found = (MULTILINE_FORBIDDEN if multiline else SINGLE_LINE_FORBIDDEN).search(value)
    return f"holds {describe(found.group())} at character {found.start() + 1}" if found else None

"""Terminal-safe output: whatever the server sends, `allot` never prints a control sequence.

Job names, reasons, commands and output tails come from other people. Printed raw, an escape sequence in
one could clear the screen, rewrite earlier lines, retitle the terminal or hide text; a bidirectional
override could make a name read backwards. `clean` strips them all and keeps newlines and tabs.
"""

import functools
import re
import sys

# ESC-introduced sequences: CSI (colours, cursor moves), OSC (titles, hyperlinks) up to BEL or ST, and the
# two-character ones; then 8-bit C1 controls, the other C0 controls and DEL, and the bidi controls.
SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[ -~]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
    r"|[\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def clean(text: str) -> str:
    return SEQUENCES.sub("", text)


class SafeStream:
    """A text stream that writes `clean(text)` to the stream it wraps."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        return self._stream.write(clean(text))

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def terminal_safe(function):
    """Run `function` with standard output and error cleaned (the CLI's `main`)."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        out, err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = SafeStream(out), SafeStream(err)
        try:
            return function(*args, **kwargs)
        finally:
            sys.stdout, sys.stderr = out, err

    return wrapper

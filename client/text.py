"""Text from other people made safe to send, store and show: one set of rules for the agent, the server and
the CLI.

A job's output is anything: invalid UTF-8, NUL bytes (which PostgreSQL refuses in text), lone surrogates
(which no database encodes), terminal escape sequences. Job names, reasons and commands come from other
users too. Printed raw, an escape sequence could clear the screen, rewrite earlier lines, retitle the
terminal or hide text; a bidirectional override could make a name read backwards. What is kept: printable
text, newlines and tabs.
"""

import functools
import re
import sys

# ESC-introduced sequences: CSI (colours, cursor moves), OSC (titles, hyperlinks) up to BEL or ST, DCS and
# the like, and the two-character ones; then 8-bit C1 controls, the other C0 controls and DEL, and the bidi
# controls.
SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[ -~]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
    r"|[\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
SURROGATE = re.compile(r"[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def clean(text: str) -> str:
    """What a terminal may print: control and bidi sequences removed, newlines and tabs kept."""
    return SEQUENCES.sub("", text)


def clean_output(text: str, *, limit: int) -> str:
    """A job's output to send and store: NUL and lone surrogates → U+FFFD, then `clean`, the last `limit`
    characters kept."""
    text = SURROGATE.sub(REPLACEMENT, text).replace("\x00", REPLACEMENT)
    text = clean(text)
    return text[-limit:] if limit else text


def clean_bytes(data: bytes, *, limit: int) -> str:
    """Bytes a process wrote, as clean text: invalid UTF-8 becomes U+FFFD."""
    return clean_output(data.decode("utf-8", errors="replace"), limit=limit)


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

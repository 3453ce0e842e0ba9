"""Text a job printed, made safe to send, store and show. Used by the agent and again by the server.

A job's output is anything: invalid UTF-8, NUL bytes (which PostgreSQL refuses in text), terminal escape
sequences (which would colour or move the cursor of whoever reads it in a terminal), lone surrogates
(which no database encodes). What is kept: printable text, newlines and tabs.
"""

import re

# ESC-introduced sequences: CSI (`ESC [ … final`), OSC (`ESC ] … BEL` or `ESC \`), and two-byte escapes.
ESCAPE_SEQUENCE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
# C0 controls but tab and newline, DEL, and C1 controls; lone surrogates.
CONTROL = re.compile(r"[\x01-\x08\x0b-\x1f\x7f-\x9f]")
SURROGATE = re.compile(r"[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def clean_output(text: str, *, limit: int) -> str:
    """NUL → U+FFFD, escape sequences and control characters but newline and tab removed, the last `limit`
    characters kept."""
    text = SURROGATE.sub(REPLACEMENT, text).replace("\x00", REPLACEMENT)
    text = CONTROL.sub("", ESCAPE_SEQUENCE.sub("", text))
    return text[-limit:] if limit else text


def clean_bytes(data: bytes, *, limit: int) -> str:
    """Bytes a process wrote, as clean text: invalid UTF-8 becomes U+FFFD."""
    return clean_output(data.decode("utf-8", errors="replace"), limit=limit)

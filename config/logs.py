"""Logs as an operator's tools read them: `ALLOT_LOG_FORMAT=json` writes one JSON object a line, with the
fields a search wants — `tick` (one id per tick), `cluster`, `job` and `host` — besides time, level, logger
and message.

Code that knows what it is working on says so once, around the work (`with log_context(tick=..., cluster=...)`,
which every line logged inside carries), or per line (`log.info(..., extra={"job": 42, "host": "h01"})`).
"""

import json
import logging
import uuid
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime

FIELDS = ("tick", "cluster", "job", "host")
_context: ContextVar[tuple] = ContextVar("allot_log_context", default=())  # (key, value) pairs


@contextmanager
def log_context(**fields):
    merged = {**dict(_context.get()), **{k: v for k, v in fields.items() if v is not None}}
    token = _context.set(tuple(merged.items()))
    try:
        yield
    finally:
        _context.reset(token)


def new_tick_id() -> str:
    return uuid.uuid4().hex[:12]


class ContextFilter(logging.Filter):
    """Puts the surrounding log_context's fields on each record (a record's own `extra` wins)."""

    def filter(self, record):
        for key, value in _context.get():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record):
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
        }
        for key in FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)

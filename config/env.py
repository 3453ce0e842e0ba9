"""Small typed readers for settings from the environment.

Each raises ImproperlyConfigured naming the variable, so a bad deployment
fails at start-up with a message that says what to fix.
"""

import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ImproperlyConfigured(f"{name} must be one of 1/0, true/false, yes/no, on/off; got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer; got {raw!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def database_from_url(name: str, url: str, base_dir: Path) -> dict:
    """Django DATABASES entry for `sqlite:///path` or `postgres://user:pw@host:port/db`."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        # sqlite:///relative/path or sqlite:////absolute/path
        path = unquote(parts.path)
        if not path or path == "/":
            raise ImproperlyConfigured(f"{name}: a sqlite URL needs a file path, e.g. sqlite:///var/allot.sqlite3")
        file = Path(path[1:])
        if not file.is_absolute():
            file = base_dir / file
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(file),
            # Ticks and web requests share the file: wait for the lock instead of failing.
            "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
        }
    if scheme in {"postgres", "postgresql", "pgsql"}:
        database = unquote(parts.path.lstrip("/"))
        if not database:
            raise ImproperlyConfigured(f"{name}: a postgres URL needs a database name, e.g. postgres://127.0.0.1/allot")
        options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": database,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
            "OPTIONS": options,
        }
    raise ImproperlyConfigured(f"{name} must start with sqlite:// or postgres://; got {scheme or 'nothing'}://")

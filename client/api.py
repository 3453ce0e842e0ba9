"""A small REST client for Allot's API, shared by the CLI and the agent. No Django here."""

import json
import os
import stat
from pathlib import Path

import requests

DEFAULT_SERVER = "http://127.0.0.1:8000"
TIMEOUT = 30


class ApiError(Exception):
    """The server refused a request (4xx/5xx); `errors` holds its JSON body when there is one."""

    def __init__(self, status: int, errors, message: str):
        self.status = status
        self.errors = errors
        super().__init__(message)


class Unreachable(Exception):
    """The server could not be reached at all."""


def describe_errors(errors) -> str:
    """`{field: [message]}` (DRF's 400 body) as one line per field."""
    if isinstance(errors, dict):
        if set(errors) == {"detail"}:
            return str(errors["detail"])
        lines = []
        for field, messages in errors.items():
            messages = messages if isinstance(messages, list) else [messages]
            text = " ".join(describe_errors(m) if isinstance(m, dict) else str(m) for m in messages)
            lines.append(text if field == "non_field_errors" else f"{field}: {text}")
        return "\n".join(lines)
    if isinstance(errors, list):
        return "\n".join(describe_errors(e) for e in errors)
    return str(errors)


class Client:
    def __init__(self, server: str, *, token: str | None = None, scheme: str = "Token"):
        self.server = server.rstrip("/")
        self.session = requests.Session()
        self.session.headers["Accept"] = "application/json"
        if token:
            self.session.headers["Authorization"] = f"{scheme} {token}"

    def request(self, method: str, path: str, **kwargs):
        url = f"{self.server}/api/v1/{path.lstrip('/')}"
        try:
            response = self.session.request(method, url, timeout=kwargs.pop("timeout", TIMEOUT), **kwargs)
        except requests.RequestException as error:
            raise Unreachable(f"cannot reach {self.server}: {error.__class__.__name__}") from error
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = {"detail": response.text[:500] or response.reason}
            raise ApiError(response.status_code, body, describe_errors(body))
        return response.json() if response.content else None

    def get(self, path: str, **params):
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: dict | None = None):
        return self.request("POST", path, json=body or {})

    def get_all(self, path: str, **params):
        """Every row of a paginated list."""
        rows, offset = [], 0
        while True:
            page = self.get(path, offset=offset, limit=500, **params)
            if isinstance(page, list):
                return page
            rows.extend(page["results"])
            if not page.get("next"):
                return rows
            offset += len(page["results"])


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "allot"


def config_path() -> Path:
    return config_dir() / "config.json"


def load_config() -> dict:
    try:
        return json.loads(config_path().read_text())
    except (OSError, ValueError):
        return {}


def save_config(data: dict) -> Path:
    """Write the token where only its owner can read it (mode 0600, directory 0700)."""
    directory = config_dir()
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(stat.S_IRWXU)
    path = config_path()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(data, handle, indent=2)
    path.chmod(0o600)
    return path

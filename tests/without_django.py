"""Run Python code in a child process where Django cannot be imported, as on a machine without it."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What "without Django" means: none of these may be imported (the import-linter contract in pyproject.toml).
FORBIDDEN = ("django", "rest_framework", "celery", "config", "accounts",
             "scheduler.models", "topology.models", "budgets.models")

_PROLOGUE = f"""
import sys

FORBIDDEN = {FORBIDDEN!r}


def _forbidden(name):
    return any(name == module or name.startswith(module + ".") for module in FORBIDDEN)


class _Absent:
    \"\"\"A finder that refuses the forbidden modules: importing one fails as if it were not installed.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if _forbidden(name):
            raise ModuleNotFoundError(f"No module named {{name!r}} (absent in this test)", name=name)
        return None


sys.meta_path.insert(0, _Absent())
"""
_EPILOGUE = """
loaded = sorted(name for name in sys.modules if _forbidden(name))
assert not loaded, f"imported {loaded}"
"""


def run_without_django(code: str, *, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `code` (from the repository root) with the forbidden modules absent; fail the test if it fails or
    if any of them ended up in sys.modules. Returns the finished process (stdout, stderr)."""
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    program = _PROLOGUE + textwrap.dedent(code) + _EPILOGUE
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done

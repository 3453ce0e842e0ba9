"""Wheels built from this checkout and installed into fresh virtual environments, as an operator would."""

import os
import socket
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]


def build_wheel(source: Path, out: Path) -> Path:
    """`pip wheel` of `source` (no build isolation: this environment's setuptools, no index needed)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out),
         str(source)],
        check=True, cwd=out, capture_output=True,
    )
    (wheel,) = out.glob("*.whl")
    return wheel


def fresh_venv(path: Path) -> Path:
    """A new virtualenv with no packages (pip is this environment's, driven with `--python`)."""
    venv.EnvBuilder(with_pip=False, clear=True).create(path)
    return path / "bin" / "python"


def pip_install(python: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", *args],
                   check=True, capture_output=True)


def borrow_dependencies(python: Path) -> None:
    """Put this environment's site-packages at the end of the new one's path, so a wheel installed with
    `--no-deps` finds Django, Plotly and the rest without downloading them again. Only the plain folder is
    added (its .pth files, among them the checkout's editable install, are not run): the project's own
    modules come from the wheel or from nowhere."""
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "zz_borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, *, process: subprocess.Popen, seconds: float = 60) -> requests.Response:
    deadline = time.monotonic() + seconds
    while True:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode} before answering {url}")
        try:
            return requests.get(url, timeout=5)
        except requests.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def clean_env(**extra: str) -> dict:
    """The environment of a machine that has only the installed package: no checkout on the path, no DEBUG."""
    keep = {key: os.environ[key] for key in ("PATH", "HOME", "LANG", "TMPDIR") if key in os.environ}
    return {**keep, **extra}

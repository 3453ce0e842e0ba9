"""Several simulations at once: `simulate_all` plays independent `simulate` calls side by side.

The budget what-if plays the same week three times (without the change, with
it, and once more for the noise). Each simulation is pure Python bound by one
CPU, so on a machine with more than one the calls run at the same time: all
but the first in child processes (`python -m scheduler.sim.parallel`, which
reads one pickled call on stdin and writes the pickled `Result` on stdout),
the first in the calling process meanwhile. Children are plain subprocesses,
not `multiprocessing` workers, so a caller may itself be a daemonic process
(a Celery prefork worker) or a threaded web server. A simulation is
deterministic (the same inputs give the same bytes, whatever the process), so
the results are those of the calls played one after another, in order.

A child sees only what it needs: its interpreter, the import path and the
pickled call; none of the caller's environment (no database URL, no secret).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from .engine import simulate
from .output import Result

# The directory holding the `scheduler` package: a child imports this code, wherever it is installed.
_IMPORT_ROOT = str(Path(__file__).resolve().parents[2])


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def simulate_all(calls: Sequence[dict], *, side_by_side: bool | None = None) -> list[Result]:
    """`simulate(**call)` for each call, in order; all at once when this process may use more than one CPU
    (`side_by_side`, default: so), the operating system sharing the CPUs among them (the what-if's three weeks
    on two CPUs take about 1.8 times one week, bench/whatif_bench.py).

    Calls must pickle (a `decide` function is named, not a lambda). A child that fails raises `RuntimeError`
    with the end of what it printed.
    """
    if side_by_side is None:
        side_by_side = cpus() > 1
    if len(calls) <= 1 or not side_by_side:
        return [simulate(**call) for call in calls]
    children = [_start(call) for call in calls[1:]]
    try:
        first = simulate(**calls[0])
        return [first, *(_collect(child) for child in children)]
    finally:
        for child in children:
            if child.poll() is None:  # this process's own simulation failed: the others are not wanted
                child.kill()
                child.hand_over.join()
                child.stdin = None
                child.communicate()


def _start(call: dict) -> subprocess.Popen:
    child = subprocess.Popen(
        [sys.executable, "-m", "scheduler.sim.parallel"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, cwd=_IMPORT_ROOT, env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": _IMPORT_ROOT},
    )
    # A pipe holds 64 KiB and the call is larger: a thread hands it over while the child starts up.
    child.hand_over = threading.Thread(
        target=_hand_over, args=(child, pickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL)), daemon=True)
    child.hand_over.start()
    return child


def _hand_over(child: subprocess.Popen, data: bytes) -> None:
    try:
        child.stdin.write(data)
        child.stdin.close()
    except (BrokenPipeError, ValueError):
        pass  # the child died (or was killed) first: `_collect` reports what it printed


def _collect(child: subprocess.Popen) -> Result:
    child.hand_over.join()
    child.stdin = None  # closed by the hand-over: `communicate` only reads
    out, err = child.communicate()
    if child.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"a simulation in a child process failed (exit {child.returncode}): " + " / ".join(tail))
    return pickle.loads(out)  # noqa: S301 - our own child's output, written just now by this code


def _main() -> None:
    call = pickle.load(sys.stdin.buffer)  # noqa: S301 - written by `_start` in the parent
    result = simulate(**call)
    sys.stdout.buffer.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    _main()

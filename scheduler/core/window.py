"""Rule 1's look-back window over runs that have ended: usage per project, kept as time slides.

A kept state (`state.py`) records every run that ends and asks for the usage
at each tick; it costs what slides out of the window, not a re-summing of
every run. The usage is piecewise linear in time between the moments a run's
start or end leaves the window (every one to come in order: `bends_after`),
with the slope `rate` — what the kept state needs to tell when a fair-share
comparison can next turn.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right, insort
from collections.abc import Iterator


class WindowUsage:
    """Ended usage inside the look-back window, per project, kept as time slides (no re-summing).

    An ended run [s, e] of g GPUs counts g × (e − max(s, now − window)) while
    now − window < e: fully until now − window passes s, then shrinking
    linearly, then not at all. Each run crosses those two moments once.
    """

    def __init__(self, window: float):
        self.window = window
        self.full: dict[tuple[str, bool], float] = {}
        # Partly slid out: sums of g and g × e.
        self.partial: dict[tuple[str, bool], list[float]] = {}
        self._crossings: list[tuple[float, int, int, tuple, float, float]] = []
        self._seq = 0
        self.edge = -math.inf
        # The moments to come at which the slope of a project's allocated usage changes, sorted: (when, seq,
        # project, the change in GPUs); those before `_head` are past.
        self._bends: list[tuple[float, int, str, float]] = []
        self._head = 0

    def add(self, project: str, allocated: bool, gpus: float, start: float, end: float) -> None:
        if end <= start or gpus <= 0:
            return
        key = (project, allocated)
        self.full[key] = self.full.get(key, 0.0) + gpus * (end - start)
        self._seq += 1
        heapq.heappush(self._crossings, (start + self.window, 0, self._seq, key, gpus, end))
        if allocated:
            # It starts shrinking when the window's start passes its start, and stops when it passes its end.
            insort(self._bends, (start + self.window, self._seq, project, -gpus), lo=self._head)
            insort(self._bends, (end + self.window, self._seq, project, gpus), lo=self._head)

    def at(self, now: float) -> None:
        """Slide the window to end at `now`."""
        crossings = self._crossings
        edge = now - self.window
        while crossings and crossings[0][0] <= now:
            when, kind, seq, key, gpus, end = heapq.heappop(crossings)
            if kind == 0:
                # The window's start passes the run's start: from now on it shrinks.
                start = when - self.window
                self.full[key] -= gpus * (end - start)
                partial = self.partial.setdefault(key, [0.0, 0.0])
                partial[0] += gpus
                partial[1] += gpus * end
                heapq.heappush(crossings, (end + self.window, 1, seq, key, gpus, end))
            else:
                partial = self.partial[key]
                partial[0] -= gpus
                partial[1] -= gpus * end
        self.edge = edge
        bends = self._bends
        head = self._head = bisect_right(bends, (now, math.inf), lo=self._head)
        if head > 1024 and head * 2 > len(bends):
            del bends[:head]
            self._head = 0

    def usage(self, project: str, allocated: bool) -> float:
        key = (project, allocated)
        value = self.full.get(key, 0.0)
        partial = self.partial.get(key)
        if partial is not None and partial[0] > 0:
            value += partial[1] - self.edge * partial[0]
        return max(0.0, value)

    def rate(self, project: str, allocated: bool) -> float:
        """How fast the usage of runs that ended changes as time passes: minus the GPUs of partly slid-out runs."""
        partial = self.partial.get((project, allocated))
        return -partial[0] if partial is not None and partial[0] > 0 else 0.0

    def bends_after(self, now: float) -> Iterator[tuple[float, str, float]]:
        """(When, project, the change in GPUs per second) of every change to come after `now` in the slope of a
        project's allocated usage (`rate`), in time order."""
        bends = self._bends
        for index in range(bisect_right(bends, (now, math.inf), lo=self._head), len(bends)):
            when, _, project, change = bends[index]
            yield when, project, change

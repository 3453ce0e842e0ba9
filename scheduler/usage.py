"""GPU time used inside the fair-share window, from job run intervals.

One grouped query returns one row per job run (its GPUs summed in milli), so
the cost follows the number of runs in the window, not GPUs or ticks. The
scheduler's snapshot takes only ended runs (the core adds running jobs up to
`now` itself); pages and the API take both.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q, Sum

from scheduler.models import GpuAssignment


@dataclass
class Usage:
    """GPU-seconds: allocated ones are charged to the budget, unallocated ones are free."""

    allocated: float = 0.0
    unallocated: float = 0.0

    def add(self, gpu_seconds: float, allocated: bool) -> None:
        if allocated:
            self.allocated += gpu_seconds
        else:
            self.unallocated += gpu_seconds


def _run_rows(cluster, *, start: datetime, end: datetime, include_running: bool, by: tuple[str, ...]):
    """One row per job run overlapping [start, end): its GPUs summed in milli, with the `by` fields."""
    in_window = Q(released_at__gt=start)  # ended inside the window
    if include_running:
        in_window |= Q(released_at__isnull=True)
    return (
        GpuAssignment.objects.filter(in_window, job__cluster=cluster, assigned_at__lt=end)
        .values(*by, "job__min_runtime", "assigned_at", "released_at")
        .annotate(milli=Sum("milli"))
        .order_by()
    )


def _usage_by(cluster, *, start: datetime, end: datetime, include_running: bool, by: tuple[str, ...]) -> dict:
    usage: dict = defaultdict(Usage)
    for run in _run_rows(cluster, start=start, end=end, include_running=include_running, by=by):
        begin = max(run["assigned_at"], start)
        finish = min(run["released_at"] or end, end)
        if finish > begin:
            key = run[by[0]] if len(by) == 1 else tuple(run[field] for field in by)
            usage[key].add(run["milli"] / 1000 * (finish - begin).total_seconds(), run["job__min_runtime"] > 0)
    return dict(usage)


def project_usage(cluster, *, now: datetime, window_seconds: int | None = None,
                  include_running: bool = True) -> dict[int, Usage]:
    """Project unit id → usage inside [now - window, now]."""
    window_seconds = window_seconds if window_seconds is not None else cluster.window_seconds
    start = now - timedelta(seconds=window_seconds)
    return _usage_by(cluster, start=start, end=now, include_running=include_running, by=("job__project_id",))


def period_usage(cluster, *, start: datetime, end: datetime) -> dict[tuple[int, int], Usage]:
    """(project unit id, user id) → usage inside [start, end), running jobs up to `end`: the usage report's
    figures, from the same run intervals as the fair share's."""
    return _usage_by(cluster, start=start, end=end, include_running=True, by=("job__project_id", "job__user_id"))


def roll_up(usage: dict[int, Usage], parents: dict[int, int | None]) -> dict[int, Usage]:
    """Add each project's usage to every ancestor: unit id → usage of its subtree."""
    totals: dict[int, Usage] = defaultdict(Usage)
    for unit_id, used in usage.items():
        node = unit_id
        while node is not None:
            totals[node].allocated += used.allocated
            totals[node].unallocated += used.unallocated
            node = parents.get(node)
    return dict(totals)


def usage_series(cluster, *, start: datetime, end: datetime, bucket_seconds: int) -> dict[int, list[Usage]]:
    """Project unit id → one Usage per bucket of [start, end); bucket i begins at start + i × bucket_seconds.

    The same run intervals as `project_usage`, in one grouped query; running
    jobs count up to `end`. Each run is spread over the buckets it overlaps.
    """
    if bucket_seconds <= 0:
        raise ValueError("bucket_seconds must be positive")
    count = max(1, int(-(-(end - start).total_seconds() // bucket_seconds)))
    runs = (
        GpuAssignment.objects.filter(
            Q(released_at__gt=start) | Q(released_at__isnull=True), job__cluster=cluster, assigned_at__lt=end,
        )
        .values("job__project_id", "job__min_runtime", "assigned_at", "released_at")
        .annotate(milli=Sum("milli"))
        .order_by()
    )
    series: dict[int, list[Usage]] = {}
    for run in runs:
        begin = max(run["assigned_at"], start)
        finish = min(run["released_at"] or end, end)
        if finish <= begin:
            continue
        buckets = series.setdefault(run["job__project_id"], [Usage() for _ in range(count)])
        gpus, allocated = run["milli"] / 1000, run["job__min_runtime"] > 0
        first = int((begin - start).total_seconds() // bucket_seconds)
        last = min(count - 1, int((finish - start).total_seconds() // bucket_seconds))
        for index in range(first, last + 1):
            bucket_start = start + timedelta(seconds=index * bucket_seconds)
            bucket_end = bucket_start + timedelta(seconds=bucket_seconds)
            overlap = (min(finish, bucket_end) - max(begin, bucket_start)).total_seconds()
            if overlap > 0:
                buckets[index].add(gpus * overlap, allocated)
    return series

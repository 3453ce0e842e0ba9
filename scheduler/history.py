"""What the tick keeps for the dashboards and /metrics: a sample a minute, a histogram of tick durations.

Both ride on the tick (the only writer), cost a few queries, and stay bounded:
samples beyond the fair-share window and tick rows older than
`TICK_RETENTION` are pruned when a sample is written. The sample's measures
are the tick's own (`core.measures.sample_after`, from its snapshot and the
decisions it applied): nothing here reads the inventory again.
"""

from bisect import bisect_left
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Avg, Count, Max

from scheduler.core.measures import Sample
from scheduler.models import ClusterSample, Tick, TickHistogram

# Upper bounds (seconds) of the tick duration histogram: Prometheus' defaults, which bracket
# DESIGN §6's targets (core decision ≤ 0.25 s, whole tick ≤ 1 s at 16k GPUs).
TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Tick rows hold the queue's ratios and reservations; the latest is all the pages read.
TICK_RETENTION = timedelta(days=2)


@transaction.atomic
def record_tick_duration(cluster, seconds: float) -> None:
    """Count one tick in the cluster's histogram (the row is locked: two ticks never lose a count)."""
    histogram, _ = TickHistogram.objects.select_for_update().get_or_create(cluster=cluster)
    buckets = list(histogram.buckets) + [0] * (len(TICK_BUCKETS) + 1 - len(histogram.buckets))
    buckets[bisect_left(TICK_BUCKETS, seconds)] += 1
    histogram.buckets = buckets
    histogram.count += 1
    histogram.sum_seconds += seconds
    histogram.save(update_fields=["buckets", "count", "sum_seconds"])


def sample_due(cluster, now: datetime) -> bool:
    interval = timedelta(seconds=settings.ALLOT_SAMPLE_SECONDS)
    return not ClusterSample.objects.filter(cluster=cluster, at__gt=now - interval, at__lte=now).exists()


def record_sample(cluster, *, now: datetime, sample: Sample) -> ClusterSample:
    """Keep `sample`, the cluster as it stands after a tick applied its decisions, with the ticks since the last."""
    states, fragmentation, demand = sample.measures.states, sample.measures.fragmentation, sample.pending
    previous = ClusterSample.objects.filter(cluster=cluster, at__lt=now).order_by("-at").values_list(
        "at", flat=True).first()
    ticks = Tick.objects.filter(cluster=cluster, started_at__lte=now)
    if previous is not None:
        ticks = ticks.filter(started_at__gt=previous)
    else:
        ticks = ticks.filter(started_at__gt=now - timedelta(seconds=settings.ALLOT_SAMPLE_SECONDS))
    durations = ticks.aggregate(count=Count("id"), mean=Avg("duration"), worst=Max("duration"))
    row = ClusterSample.objects.create(
        cluster=cluster, at=now, total_gpus=states.total, allocated=round(states.allocated, 3),
        unallocated=round(states.unallocated, 3), idle=round(states.idle, 3),
        unavailable=round(states.unavailable, 3), free_gpus=fragmentation.free_gpus,
        largest_placeable=fragmentation.largest_placeable,
        stranded={str(k): round(value, 4) for k, value in fragmentation.stranded.items()},
        pending_jobs=demand.jobs, pending_gpus=demand.gpus, pending_allocated_gpus=demand.allocated_gpus,
        running_jobs=sample.running_jobs, ticks=durations["count"] or 0, tick_seconds_mean=durations["mean"] or 0.0,
        tick_seconds_max=durations["worst"] or 0.0,
    )
    prune(cluster, now=now)
    return row


def prune(cluster, *, now: datetime) -> None:
    ClusterSample.objects.filter(cluster=cluster, at__lt=now - timedelta(seconds=cluster.window_seconds)).delete()
    Tick.objects.filter(cluster=cluster, started_at__lt=now - TICK_RETENTION).delete()


def after_tick(cluster, *, now: datetime, duration: float,
               measure: Callable[[], Sample] | None) -> ClusterSample | None:
    """The tick's bookkeeping for the dashboards: histogram always, a sample when one is due (measured only
    then; no sample when `measure` is None, a tick that rolled back)."""
    record_tick_duration(cluster, duration)
    if measure is not None and sample_due(cluster, now):
        return record_sample(cluster, now=now, sample=measure())
    return None

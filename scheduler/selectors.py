"""Reads about jobs for pages and the API."""

from django.db.models import Count, Q, Sum

from scheduler.models import Job


def pending_demand(cluster) -> dict:
    """Pending jobs and the GPUs they ask for, split allocated / unallocated; one query."""
    allocated, unallocated = Q(min_runtime__gt=0), Q(min_runtime=0)
    totals = Job.objects.pending().filter(cluster=cluster).aggregate(
        jobs=Count("id"),
        allocated_gpus=Sum("gpus", filter=allocated, default=0),
        unallocated_gpus=Sum("gpus", filter=unallocated, default=0),
    )
    return {**totals, "gpus": totals["allocated_gpus"] + totals["unallocated_gpus"]}

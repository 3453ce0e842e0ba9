"""Celery entry points. Beat sends `scheduler.tick` every ALLOT_TICK_SECONDS; any worker may run it,
and the leader lock lets only one tick a cluster at a time."""

from celery import shared_task

from scheduler.leader import Leadership
from scheduler.loop import tick_all


@shared_task(name="scheduler.tick")
def tick(clusters: list[str] | None = None) -> dict:
    leadership = Leadership()
    try:
        results = tick_all(leadership, clusters=clusters)
    finally:
        leadership.release()
    return {
        "status": leadership.status,
        "ticks": [{"cluster": r.cluster, "started": r.started, "preempted": r.preempted} for r in results],
    }

"""Celery entry points for the pages' background work: like views, they fetch and call a service.

The what-if keeps its task name, `budgets.tasks.run_what_if` (settings route it to the `simulations` queue);
it lives here because it runs the simulator over the tick's snapshot: it needs jobs, a layer above budgets.
"""

from celery import shared_task

from operations.whatif.workflow import what_if_run


@shared_task(name="budgets.tasks.run_what_if")
def run_what_if(what_if_id: int) -> str | None:
    """Simulate one queued what-if (operations/whatif/workflow.py); returns its status. A failed simulation is recorded
    on the what-if with its error, not raised: the page shows it."""
    done = what_if_run(what_if_id=what_if_id)
    return done.status if done is not None else None

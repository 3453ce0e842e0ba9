"""A decision function for tests/unit/sim/test_parallel.py that a child process imports by name."""

import os

from scheduler.core import schedule

PROBE = "ALLOT_TEST_PARENT_SECRET"


def schedule_unless_the_parents_environment_shows(snapshot, *, now, policy):
    """`schedule`, failing if the process can see the variable the test set in its parent."""
    if PROBE in os.environ:
        raise RuntimeError(f"{PROBE} reached the child process")
    return schedule(snapshot, now=now, policy=policy)

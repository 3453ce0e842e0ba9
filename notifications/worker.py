"""The embedded default's delivery: a thread of `run_scheduler`, beside the tick, never inside it."""

import logging
import threading

from django.db import DatabaseError, close_old_connections

from notifications.services import deliver_due

log = logging.getLogger(__name__)


def start(*, every: float = 5.0, stopping: threading.Event) -> threading.Thread:
    def loop():
        while not stopping.wait(every):
            try:
                deliver_due()
            except DatabaseError as error:  # the database is away or busy: next time
                log.warning("notifications: %s", error)
            finally:
                close_old_connections()

    thread = threading.Thread(target=loop, name="notifications", daemon=True)
    thread.start()
    return thread

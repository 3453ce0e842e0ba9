"""The Celery app: the tick, what-if simulations and reports run here in production.

Queues (config/settings.py): `ticks` for the tick, `simulations` for what-ifs and reports, so a long
simulation never delays a tick; one message per worker process at a time.

Beat has no single point of failure: run `celery -A config beat` on two machines. `LeaderBeat` sends the
schedule only while it holds the beat lock (scheduler/leader.py: a PostgreSQL advisory lock, or a file
lock beside the SQLite file, plus a Redis lease that says who holds it); the others stand by and ask again
every second, so when the sending beat dies its session closes and a standby sends the next tick about a
second later. Even two beats sending at once could not tick twice at once: every tick takes the
scheduler's own leader lock (scheduler/tasks.py).
"""

import os

from celery import Celery
from celery.beat import PersistentScheduler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("allot")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# A standby beat asks for the lock this often (seconds); the leader renews its Redis lease as often.
BEAT_STANDBY_POLL_SECONDS = 1.0


class LeaderBeat(PersistentScheduler):
    """Celery beat's scheduler that only sends while it holds the `beat` leader lock."""

    def __init__(self, *args, **kwargs):
        self.leadership = None
        super().__init__(*args, **kwargs)

    def _leadership(self):
        if self.leadership is None:
            import django

            django.setup()
            from scheduler.leader import Leadership

            self.leadership = Leadership("beat")
        return self.leadership

    def tick(self, *args, **kwargs):
        if not self._leadership().acquire():
            return BEAT_STANDBY_POLL_SECONDS
        return min(super().tick(*args, **kwargs), BEAT_STANDBY_POLL_SECONDS)

    def close(self):
        try:
            super().close()
        finally:
            if self.leadership is not None:
                self.leadership.release()

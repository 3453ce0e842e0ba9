import logging
import signal
import threading
import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import DatabaseError, close_old_connections

from notifications.worker import start as start_delivery
from scheduler.demo_load import DemoLoad
from scheduler.leader import Leadership
from scheduler.loop import tick_all

log = logging.getLogger(__name__)
# A scheduler that does not lead asks for the lock this often (or every interval, if shorter): a standby
# takes over within about a second of the leader's death, whatever the tick interval.
STANDBY_POLL_SECONDS = 1.0


class Command(BaseCommand):
    help = (
        "Run the scheduler loop in this process (the embedded default). Several may run: one leads, "
        "the others stand by and take over when it dies."
    )

    def add_arguments(self, parser):
        parser.add_argument("--interval", type=float, default=None,
                            help=f"seconds between ticks (default {settings.ALLOT_TICK_SECONDS})")
        parser.add_argument("--once", action="store_true", help="tick once and exit")
        parser.add_argument("--cluster", action="append", help="only this cluster (repeatable)")
        parser.add_argument("--demo-load", action="store_true",
                            help="also submit a steady demo workload, with GPU faults now and then (`make run`)")

    def handle(self, *args, interval, once, cluster, demo_load, **options):
        interval = interval or settings.ALLOT_TICK_SECONDS
        leadership = Leadership()
        stopping = False

        def stop(signum, frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        # The embedded default (no broker) delivers notifications from a thread here, beside the tick, never in
        # it; with Redis, Celery beat and the workers do (notifications.deliver).
        delivering = threading.Event()
        if settings.CELERY_TASK_ALWAYS_EAGER and not once:
            start_delivery(stopping=delivering)
        load = None
        if demo_load:
            load = DemoLoad(faults=True)
        last_status = None
        leading = False
        try:
            while not stopping:
                began = time.monotonic()
                # Only the leader submits the demo's workload (its first pass, before it knows, too).
                if load is not None and (leading or last_status is None):
                    try:
                        load.step()
                    except DatabaseError as error:  # the database is away: the tick below says so
                        log.error("demo load: %s", error)
                        close_old_connections()
                results = tick_all(leadership, clusters=cluster)
                leading = leadership.status.startswith("leading")
                if leadership.status != last_status:
                    self.stdout.write(f"scheduler: {leadership.status}")
                    self.stdout.flush()
                    last_status = leadership.status
                for result in results:
                    if result.started or result.preempted:
                        log.info("%s: %d started, %d preempted, %d pending, %d running", result.cluster,
                                 result.started, result.preempted, result.pending, result.running)
                if once:
                    break
                pause = interval if leading else min(interval, STANDBY_POLL_SECONDS)
                time.sleep(max(0.0, pause - (time.monotonic() - began)))
        finally:
            delivering.set()
            leadership.release()

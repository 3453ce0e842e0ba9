import logging
import signal
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from scheduler.leader import Leadership
from scheduler.loop import tick_all

log = logging.getLogger(__name__)


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
        load = None
        if demo_load:
            from scheduler.demo_load import DemoLoad

            load = DemoLoad(faults=True)
        last_status = None
        try:
            while not stopping:
                began = time.monotonic()
                if load is not None:
                    load.step()
                results = tick_all(leadership, clusters=cluster)
                if leadership.status != last_status:
                    self.stdout.write(f"scheduler: {leadership.status}")
                    last_status = leadership.status
                for result in results:
                    if result.started or result.preempted:
                        log.info("%s: %d started, %d preempted, %d pending, %d running", result.cluster,
                                 result.started, result.preempted, result.pending, result.running)
                if once:
                    break
                time.sleep(max(0.0, interval - (time.monotonic() - began)))
        finally:
            leadership.release()

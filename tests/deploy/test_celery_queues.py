"""Celery as production runs it: ticks and simulations on separate queues, limits, and a beat with a standby."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings

from config.celery import app
from scheduler.models import Tick
from tests.processes import celery_worker, database_url

REDIS_URL = os.environ.get("REDIS_URL_FOR_TESTS", "redis://127.0.0.1:6379/15")


def test_ticks_and_simulations_go_to_separate_queues():
    app.loader.import_default_modules()
    assert app.amqp.router.route({}, "scheduler.tick")["queue"].name == "ticks"
    assert app.amqp.router.route({}, "budgets.tasks.run_what_if")["queue"].name == "simulations"
    assert app.conf.worker_prefetch_multiplier == 1


def test_a_what_if_is_acknowledged_late_and_every_task_has_time_limits():
    app.loader.import_default_modules()
    what_if, tick = app.tasks["budgets.tasks.run_what_if"], app.tasks["scheduler.tick"]
    assert what_if.acks_late and what_if.reject_on_worker_lost
    for task in (what_if, tick, app.tasks["budgets.tasks.expire_allocations"]):
        assert 0 < task.soft_time_limit < task.time_limit
    assert not tick.acks_late  # a lost tick is superseded by the next one, never run twice
    assert tick.time_limit < what_if.soft_time_limit


def test_the_tick_expires_rather_than_piles_up_and_the_schedule_is_the_readmes():
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert schedule["scheduler-tick"]["options"]["expires"] <= schedule["scheduler-tick"]["schedule"]
    rows = [line.strip() for line in (Path(settings.BASE_DIR) / "README.md").read_text().splitlines()]
    for name, entry in schedule.items():
        queue = settings.CELERY_TASK_ROUTES[entry["task"]]["queue"]
        row = next((line for line in rows if line.startswith(f"| `{name}` | `{entry['task']}` |")), "")
        assert row.endswith(f"| `{queue}` |"), f"the README's beat schedule has no row for {name} on {queue}"


def _beat(env, tmp_path, name):
    return subprocess.Popen(
        [str(Path(sys.executable).with_name("celery")), "-A", "config", "beat", "--loglevel", "INFO",
         "--schedule", str(tmp_path / f"{name}-schedule")],
        env=env, cwd=settings.BASE_DIR, stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"{name}.log", "wb"),
    )


def _ticks_after(since: float, count: int, timeout: float) -> list[float]:
    deadline = time.monotonic() + timeout
    while True:
        starts = [t.timestamp() for t in Tick.objects.order_by("started_at").values_list("started_at", flat=True)
                  if t.timestamp() > since]
        if len(starts) >= count or time.monotonic() > deadline:
            return starts
        time.sleep(0.2)


@pytest.mark.django_db(transaction=True)
def test_two_beats_send_one_schedule_and_the_standby_takes_over_when_the_leader_is_killed(demo, tmp_path):
    """Measured: ticks at the beat's rate with two beats running; SIGKILL the sending beat; the standby's
    first tick follows within a couple of seconds (it asks for the lock every second)."""
    with celery_worker(REDIS_URL, tmp_path):
        env = {**os.environ, "REDIS_URL": REDIS_URL, "DATABASE_URL": database_url(), "SECRET_KEY": "allot-tests-only",
               "ALLOT_VAR_DIR": str(tmp_path), "ALLOT_TICK_SECONDS": "1"}
        beats = [_beat(env, tmp_path, "beat-a"), _beat(env, tmp_path, "beat-b")]
        try:
            began = time.time()
            assert len(_ticks_after(began, 3, timeout=60)) >= 3, "no ticks from two beats"
            window = time.time()
            time.sleep(6)
            rate = len(_ticks_after(window, 0, timeout=0)) / (time.time() - window)
            assert rate < 1.5, f"{rate:.1f} ticks/s with a 1 s schedule: both beats are sending"

            holder = redis.Redis.from_url(REDIS_URL).get("allot:leader:beat").decode()
            leader = next(b for b in beats if f":{b.pid}:" in holder)
            leader.send_signal(signal.SIGKILL)
            killed = time.time()
            leader.wait(timeout=10)
            time.sleep(0.5)  # a tick the dead beat sent just before may still land
            after = _ticks_after(killed + 0.5, 2, timeout=30)
            assert len(after) >= 2, (tmp_path / "beat-a.log").read_text()[-2000:]
            takeover = after[0] - killed
            print(f"standby beat's first tick {takeover:.2f} s after the leader beat was killed")
            assert takeover < 5
        finally:
            for beat in beats:
                if beat.poll() is None:
                    beat.terminate()
                    beat.wait(timeout=20)

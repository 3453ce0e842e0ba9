"""Redis stopped under a running system: pages and API keep serving, the scheduler goes on under the
database lock alone and says so on every tick record, and it takes its Redis lease back when Redis returns.

Everything runs as in production: gunicorn and `manage.py run_scheduler` as child processes with
REDIS_URL pointing at a redis-server of this test's own, which the test kills and starts again.
"""

import time
from datetime import UTC, datetime

import pytest
import requests
from django.db import connection

from scheduler.models import Job, Tick
from scheduler.services import JobRequest, job_submit
from tests.conftest import api_key, get_user
from tests.faults.support import (
    scheduler,
    set_password_for_children,
    violations,
    wait_until,
    web,
)
from tests.processes import database_url

pytestmark = pytest.mark.django_db(transaction=True)

ALONE = "leading on the database lock alone: Redis unreachable"
LEASE = "allot:leader:scheduler"


class Visitor:
    """A researcher in a browser session and on the API; every call must answer, and soon."""

    def __init__(self, base: str, token: str):
        self.base = base
        self.browser = requests.Session()
        self.api = requests.Session()
        self.api.headers["Authorization"] = f"Token {token}"
        self.slowest = 0.0

    def call(self, session, method, path, expect, **kwargs):
        began = time.monotonic()
        response = session.request(method, self.base + path, timeout=10, allow_redirects=False, **kwargs)
        self.slowest = max(self.slowest, time.monotonic() - began)
        assert response.status_code == expect, (method, path, response.status_code, response.text[:500])
        return response

    def log_in(self):
        self.call(self.browser, "GET", "/login/", 200)
        self.call(self.browser, "POST", "/login/", 302, data={
            "username": "alice", "password": "alice-password",
            "csrfmiddlewaretoken": self.browser.cookies["csrftoken"],
        })

    def use_everything(self):
        assert "faultlab" in self.call(self.browser, "GET", "/clusters/faultlab/queue/", 200).text
        self.call(self.browser, "GET", "/clusters/faultlab/", 200)
        self.call(self.api, "GET", "/api/v1/jobs/?state=pending", 200)
        job = self.call(self.api, "POST", "/api/v1/jobs/", 201, json={
            "cluster": "faultlab", "project": "olmo", "gpus": 2, "min_runtime": 600, "resumable": True,
            "command": "python train.py",
        }).json()
        self.call(self.api, "GET", f"/api/v1/jobs/{job['id']}/", 200)


def latest_tick_after(cluster, moment):
    return Tick.objects.filter(cluster=cluster, started_at__gt=moment).order_by("-started_at", "-id").first()


def test_redis_down_keeps_pages_and_ticks_going_and_leadership_returns_with_it(faultlab, private_redis, tmp_path):
    for number in range(12):
        job_submit(user=get_user("alice"), request=JobRequest(
            cluster="faultlab", project="olmo", gpus=4, min_runtime=600, resumable=True,
            simulated_duration=1200 + 60 * number, command="python train.py"))
    alice = get_user("alice")
    set_password_for_children(alice, "alice-password")
    token = api_key(alice)
    database = database_url()
    server, base = web(database, tmp_path, redis_url=private_redis.url)
    ticker = scheduler(database, tmp_path, interval=0.2, redis_url=private_redis.url, ALLOT_SIMULATION_SPEED=600)
    server.start()
    ticker.start()
    visitor = Visitor(base, token)
    try:
        wait_until(lambda: _answers(base) or not server.alive(), what="gunicorn answers", timeout=60)
        assert server.alive(), server.tail()
        visitor.log_in()

        # Redis up: the scheduler leads with both the database lock and the lease.
        began = datetime.now(UTC)
        tick = wait_until(lambda: latest_tick_after(faultlab, began), what="the scheduler ticks", timeout=60)
        assert tick.leader.endswith(" (leading)"), tick.leader
        holder = tick.leader.split(" ", 1)[0]
        assert (private_redis.get(LEASE) or "").startswith(holder + ":")
        visitor.use_everything()

        # Redis gone: the same scheduler ticks on under the database lock alone, and says so.
        private_redis.stop()
        stopped = datetime.now(UTC)
        tick = wait_until(lambda: (t := latest_tick_after(faultlab, stopped)) and ALONE in t.leader and t,
                          what="a tick under the database lock alone", timeout=30)
        assert tick.leader.startswith(holder + " ("), tick.leader
        # Said on its output too (written when the tick that found Redis gone has returned).
        wait_until(lambda: f"scheduler: {ALONE} (ConnectionError)" in ticker.stdout() or not ticker.alive(),
                   what="the scheduler says it leads on the database lock alone", timeout=10)
        visitor.use_everything()
        # The queue page tells its readers how the scheduler leads.
        assert ALONE in visitor.call(visitor.browser, "GET", "/clusters/faultlab/queue/", 200).text
        ticks_while_down = wait_until(
            lambda: (n := Tick.objects.filter(cluster=faultlab, started_at__gt=stopped).count()) >= 5 and n,
            what="more ticks while Redis is down", timeout=30)

        time.sleep(max(0.0, 6 - (datetime.now(UTC) - stopped).total_seconds()))  # an outage of 6 s at least

        # Redis back (empty, as after a crash): the leader takes its lease again.
        private_redis.start()
        returned = datetime.now(UTC)
        tick = wait_until(lambda: (t := latest_tick_after(faultlab, returned)) and t.leader.endswith(" (leading)")
                          and t, what="the scheduler leads with the lease again", timeout=30)
        assert tick.leader == f"{holder} (leading)"
        wait_until(lambda: (private_redis.get(LEASE) or "").startswith(holder + ":"), what="the lease is back",
                   timeout=10)
        wait_until(lambda: ticker.stdout().rstrip().endswith("scheduler: leading") or not ticker.alive(),
                   what="the scheduler says it leads with the lease again", timeout=10)
        visitor.use_everything()
        assert "scheduler-status" not in visitor.call(visitor.browser, "GET", "/clusters/faultlab/queue/", 200).text
        assert ticker.alive() and server.alive(), ticker.tail() + server.tail()
    finally:
        ticker.stop()
        server.stop()
    # Ticks never paused for the outage: no gap near its 6 s, Redis or not.
    moments = list(Tick.objects.filter(cluster=faultlab).order_by("started_at").values_list("started_at", flat=True))
    gaps = [(later - earlier).total_seconds() for earlier, later in zip(moments, moments[1:], strict=False)]
    assert max(gaps) < 4.0, max(gaps)
    assert Tick.objects.filter(cluster=faultlab, started_at__gt=stopped, started_at__lt=returned).count() >= 10
    assert ticks_while_down >= 5 and visitor.slowest < 5.0, visitor.slowest
    with connection.cursor() as cursor:
        assert violations(cursor) == []
    assert Job.objects.filter(project__name="olmo").count() == 12 + 3  # one submission per round


def _answers(base: str) -> bool:
    try:
        return requests.get(base + "/login/", timeout=2).status_code == 200
    except requests.RequestException:
        return False

"""The scheduler process killed with SIGKILL mid-tick, at random moments, many times.

`manage.py run_scheduler --interval 0.05` runs as a child process on the
test database (SQLite or PostgreSQL, whichever the suite runs on) over a
simulated cluster whose jobs finish in seconds. The test kills it after it
has ticked: every other time at a seeded-random moment, and in between the
moment it is seen inside a write transaction (a SQLite journal on disk, a
PostgreSQL session holding a transaction id). After each kill it checks
every invariant on what the dead process left committed, adds a few
submissions, and starts it again. At the end one scheduler runs until every
job has finished, and no job's work was counted twice.

ALLOT_FAULT_KILLS (default 20) and ALLOT_FAULT_SEED (default 9) change the
number of kills and the moments.
"""

import os
import random
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from scheduler.choices import FINAL_STATES, EventKind, JobState
from scheduler.models import Job, JobEvent, Tick
from scheduler.services import JobRequest, job_submit
from tests.conftest import get_user
from tests.faults.support import job_states, overlapping_ticks, scheduler, violations, wait_until
from tests.processes import database_url

pytestmark = pytest.mark.django_db(transaction=True)

KILLS = int(os.environ.get("ALLOT_FAULT_KILLS", "20"))
SEED = int(os.environ.get("ALLOT_FAULT_SEED", "9"))
LEASE = "allot:leader:scheduler"
STANDBY = "scheduler: standby: another scheduler holds the database lock"
SPEED = 600  # simulated seconds of work per real second: jobs of 5-30 simulated minutes take 0.5-3 s
# (weight, gpus, topology, min_runtime, resumable)
SHAPES = [
    (4, 1, "any", 600, True), (3, 2, "any", 900, True), (3, 4, "any", 1800, True), (2, 8, "any", 3600, True),
    (1, 16, "domain", 3600, True), (3, 4, "any", 0, True), (2, 8, "any", 0, False), (1, 2, "any", 1200, False),
]
MEMBERS = [("alice", "olmo"), ("carol", "tulu")]


def submit(rng: random.Random, count: int) -> int:
    users = {name: get_user(name) for name, _ in MEMBERS}
    for _ in range(count):
        user, project = rng.choice(MEMBERS)
        _, gpus, topology, min_runtime, resumable = rng.choices(SHAPES, weights=[s[0] for s in SHAPES])[0]
        job_submit(user=users[user], request=JobRequest(
            cluster="faultlab", project=project, gpus=gpus, topology=topology, min_runtime=min_runtime,
            resumable=resumable, simulated_duration=rng.randrange(300, 1800, 60), command="python train.py",
        ))
    return count


def in_write_transaction() -> bool:
    """The scheduler is inside a transaction that has written something (and not committed yet)."""
    if connection.vendor == "sqlite":
        return os.path.exists(f"{connection.settings_dict['NAME']}-journal")
    with connection.cursor() as cursor:
        cursor.execute("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL)")
        return cursor.fetchone()[0]


def kill_inside_a_write(child, *, within: float = 2.0) -> bool:
    """SIGKILL the moment the scheduler is seen writing; True if it was (else killed at the end of `within`)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if in_write_transaction():
            child.kill()
            return True
        time.sleep(0.001)
    child.kill()
    return False


def interrupted_transactions() -> int:
    """Write transactions the dead scheduler left open: a hot SQLite journal, or PostgreSQL's rollback count."""
    if connection.vendor == "sqlite":
        journal = Path(f"{connection.settings_dict['NAME']}-journal")
        return int(journal.exists() and journal.stat().st_size > 0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def run_seconds(job: Job) -> float:
    """Wall seconds the job ran, from its start events to the events that ended each run."""
    total, started = 0.0, None
    for kind, at in job.events.order_by("at", "id").values_list("kind", "at"):
        if kind == EventKind.START:
            started = at
        elif started is not None and kind in (EventKind.FINISH, EventKind.REQUEUE, EventKind.STOP, EventKind.FAIL):
            total += (at - started).total_seconds()
            started = None
    return total


def test_the_scheduler_killed_mid_tick_many_times_loses_nothing_and_double_books_nothing(
    faultlab, private_redis, tmp_path
):
    rng = random.Random(SEED)
    # With Redis, as in production: each dead scheduler leaves its lease behind, and its successor
    # (holding the database lock) takes it over instead of waiting the lease out.
    child = scheduler(database_url(), tmp_path, interval=0.05, redis_url=private_redis.url,
                      ALLOT_SIMULATION_SPEED=SPEED)
    submitted = submit(rng, 40)
    sqlite = connection.vendor == "sqlite"
    interrupted, rollbacks_before = 0, interrupted_transactions()
    moments, caught_writing = [], 0
    began = time.monotonic()
    try:
        for kill in range(KILLS):
            ticks_before = Tick.objects.filter(cluster=faultlab).count()
            child.start()
            wait_until(lambda before=ticks_before: Tick.objects.filter(cluster=faultlab).count() > before
                       or not child.alive(),
                       what=f"the scheduler ticks after start {kill + 1}", timeout=60)
            assert child.alive(), child.tail()
            if kill % 2:
                # Half the kills fall the moment the scheduler is seen inside a write transaction.
                moment = "in a write"
                caught_writing += kill_inside_a_write(child)
            else:
                # The others at a random moment: between ticks, mid-snapshot, mid-decision, mid-write.
                moment = round(rng.uniform(0.0, 0.4), 2)
                time.sleep(moment)
                child.kill()
            moments.append(moment)
            if sqlite:
                interrupted += interrupted_transactions()
            # What the dead scheduler left committed is consistent before anyone repairs it.
            with connection.cursor() as cursor:
                broken = violations(cursor)
            assert broken == [], f"after kill {kill + 1} ({moment} s after a tick):\n" + "\n".join(broken)
            assert Job.objects.count() == submitted, "a job went missing"
            submitted += submit(rng, 4)
        if not sqlite:
            interrupted = interrupted_transactions() - rollbacks_before

        # One last start: every job finishes, none lost, none failed.
        kills_took = time.monotonic() - began
        child.start()
        wait_until(lambda: not Job.objects.exclude(state__in=FINAL_STATES).exists() or not child.alive(),
                   what="every job has finished", timeout=150, every=0.5)
        assert child.alive(), child.tail()
        finish_took = time.monotonic() - began - kills_took
    finally:
        child.stop()
    with connection.cursor() as cursor:
        assert violations(cursor) == []
        states = job_states(cursor)
    assert Job.objects.count() == submitted
    # Only a job that is neither resumable nor protected may end preempted; nothing fails.
    assert set(states) <= {JobState.COMPLETED, JobState.PREEMPTED}, states
    assert not Job.objects.filter(state=JobState.PREEMPTED).exclude(resumable=False).exists()
    # No run's work was counted twice: a job finished only after running long enough, in wall time.
    for job in Job.objects.filter(state=JobState.COMPLETED):
        assert job.simulated_duration <= SPEED * run_seconds(job) + 0.01, (job, run_seconds(job))
    # Every start of the scheduler ticked (checked above), and the ticks are spread over the run.
    ticks = Tick.objects.filter(cluster=faultlab)
    leaders = {leader.split(" ", 1)[0] for leader in ticks.values_list("leader", flat=True)}
    assert len(leaders) == child.starts  # every start ticked, under its own name
    assert not ticks.exclude(leader__endswith=" (leading)").exists()
    span = ticks.order_by("-started_at").first().started_at - ticks.order_by("started_at").first().started_at
    assert span > timedelta(seconds=KILLS * 0.2)
    preemptions = JobEvent.objects.filter(kind=EventKind.PREEMPT).count()
    # The targeted kills did land inside write transactions (most of them; a commit can win the race).
    assert caught_writing >= KILLS // 2 // 2, (caught_writing, moments)
    print(f"\n{KILLS} kills on {connection.vendor} at {moments} (s after a tick); {caught_writing} of "
          f"{KILLS // 2} targeted kills seen inside a write; {interrupted} interrupted write transaction(s); "
          f"{ticks.count()} ticks; kills took {kills_took:.0f} s, the finish {finish_took:.0f} s; "
          f"{submitted} jobs: {states}; {preemptions} preemptions; {child.starts} starts")


def test_a_standby_takes_over_from_a_killed_leader_within_seconds_and_two_never_tick_at_once(
    faultlab, private_redis, tmp_path
):
    """Two schedulers, as in production: one leads, the other stands by; the leader is killed three times."""
    submit(random.Random(SEED), 30)
    database = database_url()
    pair = {name: scheduler(database, tmp_path, name=name, interval=0.2, redis_url=private_redis.url,
                            ALLOT_SIMULATION_SPEED=SPEED) for name in ("a", "b")}

    def standing_by(child, times):
        return child.stdout().count(STANDBY) >= times

    def last_tick():
        return Tick.objects.filter(cluster=faultlab).order_by("-started_at", "-id").first()

    takeovers = []
    try:
        pair["a"].start()
        wait_until(lambda: last_tick() or not pair["a"].alive(), what="a ticks", timeout=60)
        pair["b"].start()
        wait_until(lambda: standing_by(pair["b"], 1), what="b stands by", timeout=60)
        for _ in range(3):
            leader = last_tick().leader.split(" ", 1)[0]
            (victim,) = [child for child in pair.values() if leader.endswith(f":{child.pid}")]
            (standby,) = [child for child in pair.values() if child is not victim]
            victim.kill()
            killed = timezone.now()
            tick = wait_until(
                lambda since=killed, child=standby: Tick.objects.filter(
                    cluster=faultlab, started_at__gt=since, leader__contains=f":{child.pid} ").first()
                or not child.alive(),
                what=f"{standby.name} takes over", timeout=30)
            assert standby.alive(), standby.tail()
            takeovers.append((tick.started_at - killed).total_seconds())
            # It holds the lease the dead leader left behind, without waiting for the lease to run out.
            assert tick.leader.endswith(" (leading)"), tick.leader
            wait_until(lambda pid=standby.pid: f":{pid}:" in (private_redis.get(LEASE) or ""),
                       what="the lease moves to the new leader", timeout=10)
            assert "took the Redis lease over from" in standby.stderr(), standby.tail()
            before = victim.stdout().count(STANDBY)
            victim.start()  # back as the standby
            wait_until(lambda child=victim, n=before + 1: standing_by(child, n) or not child.alive(),
                       what=f"{victim.name} stands by again", timeout=60)
            assert victim.alive(), victim.tail()
    finally:
        for child in pair.values():
            child.stop()
    # A standby asks for the lock every second: it ticks a second or so after the leader dies.
    assert max(takeovers) < 5.0, takeovers
    ticks = list(Tick.objects.filter(cluster=faultlab).order_by("started_at", "id"))
    assert overlapping_ticks([(tick.leader, tick.started_at, tick.duration) for tick in ticks]) == []
    assert len({tick.leader.split(" ", 1)[0] for tick in ticks}) == 4  # a, b, then each of them again
    with connection.cursor() as cursor:
        assert violations(cursor) == []
    print(f"\ntake-over after the leader's SIGKILL on {connection.vendor}: {[round(t, 2) for t in takeovers]} s; "
          f"{len(ticks)} ticks, none overlapping")

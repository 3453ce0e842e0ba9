"""PostgreSQL restarted, and crashed for a while, during ticks: the scheduler loop recovers by itself.

The shared PostgreSQL serves other suites, so this test makes a cluster of
its own (initdb on a temporary folder, a free port, run as the postgres user
when the test runs as root), migrates it, loads a simulated cluster and a
queue, and runs two `manage.py run_scheduler` against it, a leader and a
standby. It does not depend on the suite's database: it runs the same in the
SQLite and PostgreSQL passes.
"""

import time
from datetime import UTC, datetime

import yaml

from tests.faults.support import (
    CLUSTER,
    ORG,
    job_states,
    manage,
    overlapping_ticks,
    scheduler,
    violations,
    wait_until,
)

SPEED = 600
STANDBY = "standby: another scheduler holds the database lock"
SUBMIT = """
from django.contrib.auth import get_user_model
from budgets.loaders import load_org_file
from scheduler.services import JobRequest, job_submit
from topology.loaders import load_cluster_file
load_cluster_file({cluster!r})
load_org_file({org!r})
users = get_user_model().objects
for number in range(40):
    user, project = (("alice", "olmo"), ("carol", "tulu"))[number % 2]
    job_submit(user=users.get(username=user), request=JobRequest(
        cluster="faultlab", project=project, gpus=(1, 2, 4, 8)[number % 4], min_runtime=(0, 900)[number % 3 > 0],
        resumable=True, simulated_duration=600 + 120 * (number % 10), command="python train.py"))
"""


def test_the_scheduler_loop_recovers_when_postgresql_restarts_under_it(private_postgres, tmp_path):
    with private_postgres.connect() as admin:
        admin.execute("CREATE DATABASE allot")
    url = private_postgres.url("allot")
    manage(url, "migrate", "--no-input", "-v", "0")
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    (tmp_path / "org.yaml").write_text(yaml.safe_dump(ORG))
    manage(url, "shell", "-c", SUBMIT.format(cluster=str(tmp_path / "cluster.yaml"), org=str(tmp_path / "org.yaml")))

    def query(sql, *params):
        try:
            with private_postgres.connect("allot") as conn:
                return conn.execute(sql, params).fetchall()
        except Exception:  # noqa: BLE001 - the server is restarting: no answer yet
            return None

    def ticks_since(moment):
        rows = query("SELECT COUNT(*) FROM scheduler_tick WHERE started_at > %s", moment)
        return rows[0][0] if rows else 0

    # A leader and a standby, as in production: both lose their sessions at each restart.
    pair = [scheduler(url, tmp_path, name=name, interval=0.1, ALLOT_SIMULATION_SPEED=SPEED)
            for name in ("first", "second")]

    def all_alive():
        return all(child.alive() for child in pair)

    def tails():
        return "\n".join(child.tail() for child in pair)

    def one_leads_one_stands_by():
        """The last status each has printed: one leads, the other stands by."""
        last = sorted(next((line for line in reversed(child.stdout().splitlines()) if line.startswith("scheduler: ")),
                           "") for child in pair)
        return last == ["scheduler: leading", f"scheduler: {STANDBY}"]

    pair[0].start()
    try:
        wait_until(lambda: ticks_since(datetime(2000, 1, 1, tzinfo=UTC)) >= 5 or not pair[0].alive(),
                   what="the scheduler ticks", timeout=60)
        pair[1].start()
        wait_until(lambda: one_leads_one_stands_by() or not all_alive(), what="the second stands by", timeout=60)
        assert all_alive(), tails()

        # 1. A fast restart (pg_ctl restart -m fast): every session, the leader's lock among them, is cut.
        private_postgres.restart()
        back = datetime.now(UTC)
        wait_until(lambda: ticks_since(back) >= 3 or not all_alive(), what="ticks resume after the restart",
                   timeout=60)
        assert all_alive(), tails()

        # 2. Crashed (immediate shutdown: no checkpoint, crash recovery at the next start) and down for
        #    three seconds: the loops wait it out, saying so, and carry on: one leads again, the other stands by.
        private_postgres.stop(mode="immediate")
        time.sleep(3)
        assert all_alive(), tails()
        private_postgres.start()
        back = datetime.now(UTC)
        wait_until(lambda: ticks_since(back) >= 3 or not all_alive(), what="ticks resume after the outage",
                   timeout=60)
        assert all_alive(), tails()
        output = "".join(child.stdout() for child in pair)
        assert "scheduler: paused: PostgreSQL unreachable" in output, tails()
        wait_until(lambda: one_leads_one_stands_by() or not all_alive(), what="one leads and one stands by again",
                   timeout=30)

        with private_postgres.connect("allot") as conn, conn.cursor() as cursor:
            assert violations(cursor) == []
        wait_until(lambda: (query("SELECT COUNT(*) FROM scheduler_job WHERE state NOT IN ('completed')")
                            or [[1]])[0][0] == 0 or not all_alive(),
                   what="every job has finished", timeout=120, every=0.5)
        assert all_alive(), tails()
    finally:
        for child in pair:
            child.stop()
    with private_postgres.connect("allot") as conn, conn.cursor() as cursor:
        assert violations(cursor) == []
        assert job_states(cursor) == {"completed": 40}
        cursor.execute("SELECT leader, started_at, duration FROM scheduler_tick ORDER BY started_at, id")
        assert overlapping_ticks(cursor.fetchall()) == []

"""The production kit (deploy/): its systemd units verify, and its one entrypoint starts Allot on this machine
against the real PostgreSQL and Redis — migrate, load, web, beat and a ticks worker — until /readyz says ready."""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis
import requests
import yaml
from django.conf import settings

from tests.packaging.venvs import free_port

ROOT = Path(settings.BASE_DIR)
DEPLOY = ROOT / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
# The PostgreSQL and Redis that CI starts (.ci/run); the test makes its own database and uses its own Redis db.
POSTGRES_ADMIN_URL = os.environ.get("ALLOT_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
REDIS_URL = re.sub(r"/\d+$", "/13", os.environ.get("REDIS_URL_FOR_TESTS", "redis://127.0.0.1:6379/15"))


def test_there_is_a_unit_for_every_process():
    names = {unit.name for unit in UNITS}
    assert {"allot-web.service", "allot-beat@.service", "allot-worker-ticks.service",
            "allot-worker-simulations.service", "allot-scheduler@.service", "allot-agent.service"} <= names


@pytest.mark.parametrize("unit", UNITS, ids=lambda unit: unit.name)
def test_each_unit_verifies(unit, tmp_path):
    """`systemd-analyze verify`, with /opt/allot pointing at this checkout (the units' paths must exist)."""
    text = unit.read_text()
    opt = tmp_path / "opt-allot"
    opt.mkdir()
    (opt / "deploy").symlink_to(DEPLOY)
    (opt / ".venv").symlink_to(Path(sys.executable).parent.parent)
    name = unit.name.replace("@.", "@a.")  # a template verifies as one of its instances
    (tmp_path / name).write_text(text.replace("/opt/allot", str(opt)))
    analyze = shutil.which("systemd-analyze")
    if analyze is None:  # not a systemd machine: the unit must at least parse as one
        sections = re.findall(r"^\[(\w+)\]$", text, flags=re.M)
        assert sections[:2] == ["Unit", "Service"] and "ExecStart=" in text
        return
    done = subprocess.run([analyze, "verify", str(tmp_path / name)], capture_output=True, text=True, timeout=60)
    problems = [line for line in (done.stdout + done.stderr).splitlines()
                if str(tmp_path) in line or name in line]
    assert done.returncode == 0 and not problems, done.stdout + done.stderr


def test_the_compose_file_runs_every_role_from_the_one_image():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "web", "beat-a", "beat-b", "worker-ticks", "worker-simulations"} <= set(services)
    roles = {name: service["command"][0] for name, service in services.items() if "build" in service}
    assert roles == {"web": "web", "beat-a": "beat", "beat-b": "beat", "worker-ticks": "worker-ticks",
                     "worker-simulations": "worker-simulations"}
    entrypoint = (DEPLOY / "entrypoint.sh").read_text()
    for role in set(roles.values()):
        assert f"\n  {role})" in entrypoint
    assert 'ENTRYPOINT ["/opt/allot/deploy/entrypoint.sh"]' in (DEPLOY / "Dockerfile").read_text()


@pytest.fixture
def database():
    name = f"allot_entrypoint_{os.getpid()}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    parts = urlsplit(POSTGRES_ADMIN_URL)
    yield parts._replace(path=f"/{name}").geturl()
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_the_entrypoint_starts_a_serving_ready_deployment(database, tmp_path):
    broker = redis.Redis.from_url(REDIS_URL)
    broker.flushdb()
    port = free_port()
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": str(tmp_path),
        "ALLOT_MANAGE": f"{sys.executable} {ROOT / 'manage.py'}", "DATABASE_URL": database, "REDIS_URL": REDIS_URL,
        "SECRET_KEY": "entrypoint-test", "ALLOWED_HOSTS": "127.0.0.1", "ALLOT_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "1", "ALLOT_VAR_DIR": str(tmp_path), "ALLOT_STATIC_ROOT": str(tmp_path / "static"),
        "ALLOT_TICK_SECONDS": "2", "LOG_LEVEL": "WARNING",
    }
    entrypoint = str(DEPLOY / "entrypoint.sh")

    def once(*args):
        done = subprocess.run([entrypoint, *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    assert "database and Redis reachable" in once("migrate").stderr
    once("manage", "demo")
    processes = {}
    try:
        for role, args in {"web": [], "beat": ["--schedule", str(tmp_path / "beat-a")], "worker-ticks": []}.items():
            processes[role] = subprocess.Popen([entrypoint, role, *args], env=env, cwd=tmp_path,
                                               stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"{role}.log", "wb"))
        deadline = time.monotonic() + 180
        ready = None
        while time.monotonic() < deadline:
            for role, process in processes.items():
                assert process.poll() is None, f"{role} exited: {(tmp_path / f'{role}.log').read_text()[-3000:]}"
            try:
                ready = requests.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
                if ready.status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(1)
        assert ready is not None and ready.status_code == 200, (ready.text if ready is not None else "no answer",
                                                                 (tmp_path / "worker-ticks.log").read_text()[-2000:])
        assert ready.json()["checks"] == {"database": "ok", "migrations": "ok", "scheduler": "ok", "broker": "ok"}
        page = requests.get(f"http://127.0.0.1:{port}/login/", timeout=10)
        assert page.status_code == 200 and "<form" in page.text
        # The entrypoint exec'd gunicorn: the process systemd or docker watches is the server itself.
        assert "gunicorn" in Path(f"/proc/{processes['web'].pid}/cmdline").read_bytes().decode(errors="replace")
        assert (tmp_path / "static" / "staticfiles.json").exists()
    finally:
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        broker.flushdb()

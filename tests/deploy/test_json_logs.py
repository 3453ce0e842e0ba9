"""ALLOT_LOG_FORMAT=json: one JSON object a line, with the tick, cluster, job and host as fields."""

import io
import json
import logging
import os
import subprocess
import sys

import pytest

from config.logs import ContextFilter, JsonFormatter
from scheduler.tick import run_tick
from tests.factories import make_job


@pytest.fixture
def json_lines():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("scheduler")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logger.removeHandler(handler)
    logger.setLevel(previous)


@pytest.mark.django_db
def test_a_tick_logs_each_start_with_its_tick_cluster_job_and_host(demo, json_lines):
    from scheduler.leader import Leadership
    from scheduler.loop import tick_all

    job = make_job(gpus=8, min_runtime=3600, state="pending")
    leadership = Leadership()
    try:
        tick_all(leadership)
    finally:
        leadership.release()
    started = [line for line in json_lines() if line["message"].startswith(f"job {job.pk} started")]
    assert len(started) == 1
    (line,) = started
    assert line["job"] == job.pk
    assert line["cluster"] == "gb200-east"
    assert len(line["tick"]) == 12
    assert line["host"] and line["host"] in line["message"]
    assert line["level"] == "INFO" and line["logger"] == "scheduler.tick"


@pytest.mark.django_db
def test_outside_a_tick_there_is_no_tick_field(demo, json_lines):
    make_job(gpus=8, min_runtime=3600, state="pending")
    run_tick(demo)
    assert all("tick" not in line for line in json_lines())


def test_the_setting_chooses_the_format_and_refuses_others():
    def configured(value):
        env = {**os.environ, "DEBUG": "1", "ALLOT_LOG_FORMAT": value, "DJANGO_SETTINGS_MODULE": "config.settings"}
        return subprocess.run(
            [sys.executable, "-c", "import django; django.setup(); import logging; logging.getLogger('x').warning("
             "'hello'); from django.conf import settings; print(settings.LOGGING['handlers']['console']['formatter'])"],
            env=env, capture_output=True, text=True)

    done = configured("json")
    assert done.stdout.strip() == "json"
    assert json.loads(done.stderr.strip().splitlines()[-1])["message"] == "hello"
    refused = configured("xml")
    assert refused.returncode != 0 and "ALLOT_LOG_FORMAT must be plain or json" in refused.stderr

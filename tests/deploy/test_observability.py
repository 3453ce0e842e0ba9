"""What ships for Prometheus and Grafana (deploy/) reads what /metrics serves, and promtool accepts all of it."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from django.conf import settings

from scheduler.tick import run_tick
from tests.factories import make_job
from topology.models import Host, HostEvent

DEPLOY = Path(settings.BASE_DIR) / "deploy"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"  # Debian's `prometheus` (make install-test)


def promtool(*args, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    assert Path(PROMTOOL).exists(), "promtool is missing: `make install-test` installs Debian's prometheus"
    return subprocess.run([PROMTOOL, *args], input=stdin, capture_output=True, cwd=DEPLOY / "prometheus",
                          timeout=120)


@pytest.fixture
def scrape(demo, client):
    make_job(gpus=8, min_runtime=3600, on_hosts=["hgx-01-h01"])
    make_job(project="tulu", user="carol", gpus=4, min_runtime=0, on_hosts=["nvl72-01-h01"])
    make_job(gpus=16, min_runtime=7200, state="pending")
    HostEvent.objects.create(host=Host.objects.get(name="hgx-02-h01"), kind=HostEvent.Kind.XID, code=79,
                             actor="agent")
    run_tick(demo)
    response = client.get("/metrics")
    assert response.status_code == 200
    return response.content


def exposed_names(text: str) -> set[str]:
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M):
        names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"} if kind == "histogram" else {name}
    return names


def used_names(expression: str) -> set[str]:
    return set(re.findall(r"\ballot_[a-z_]+", expression))


@pytest.mark.django_db
def test_promtool_accepts_the_metrics(scrape):
    checked = promtool("check", "metrics", stdin=scrape)
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()


def test_promtool_accepts_the_rules_and_their_tests_pass():
    checked = promtool("check", "rules", "rules.yml")
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    tested = promtool("test", "rules", "rules_test.yml")
    assert tested.returncode == 0, tested.stdout.decode() + tested.stderr.decode()
    rules = (DEPLOY / "prometheus" / "rules.yml").read_text()
    for alert in ("AllotNoTick", "AllotHostDown", "AllotDrainStuck", "AllotQueueWaitHigh"):
        assert f"alert: {alert}" in rules
        assert f"alertname: {alert}" in (DEPLOY / "prometheus" / "rules_test.yml").read_text()


@pytest.mark.django_db
def test_every_metric_the_dashboard_and_the_alerts_use_exists(scrape):
    exposed = exposed_names(scrape.decode())
    dashboard = json.loads((DEPLOY / "grafana" / "allot.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    expressions += [variable["definition"] for variable in dashboard["templating"]["list"] if "definition" in variable]
    expressions.append((DEPLOY / "prometheus" / "rules.yml").read_text())
    used = set().union(*map(used_names, expressions))
    assert used - exposed == set()
    # The panels of the cluster page, and what the issue asked Grafana to rebuild.
    for metric in ("allot_unit_gpus_in_use", "allot_unit_entitled_gpus", "allot_unit_usage_ratio",
                   "allot_pending_gpus_by_reason", "allot_job_wait_seconds_bucket", "allot_job_starts_total",
                   "allot_job_ends_total", "allot_preemptions_total", "allot_tick_duration_seconds_bucket",
                   "allot_build_info", "allot_job_gpu_info", "allot_domain_free_gpus", "allot_stranded_ratio"):
        assert metric in used, f"no panel shows {metric}"
    titles = {panel["title"] for panel in dashboard["panels"]}
    assert len(titles) == len(dashboard["panels"])

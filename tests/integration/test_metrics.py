"""`/metrics`: Prometheus text that Prometheus' own parser reads, with numbers that agree with the pages."""

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from scheduler.choices import EventKind
from scheduler.history import record_tick_duration
from scheduler.models import JobEvent, Tick
from scheduler.selectors import cluster_measures
from tests.factories import make_job
from topology.choices import HostState
from topology.models import Host, HostEvent

pytestmark = pytest.mark.django_db


def scrape(client, **headers):
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return {family.name: family for family in text_string_to_metric_families(response.content.decode())}


def one(family, name=None, **labels):
    matches = [s.value for s in family.samples
               if (name is None or s.name == name) and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(matches) == 1, (family.name, labels, matches)
    return matches[0]


@pytest.fixture
def busy(demo):
    make_job(gpus=8, min_runtime=3600, on_hosts=["hgx-01-h01"])
    make_job(project="tulu", user="carol", gpus=4, min_runtime=0, on_hosts=["nvl72-01-h01"])
    make_job(gpus=1, milli=250, min_runtime=600, gpu_ids=["hgx-02-h01:0"])
    make_job(gpus=16, min_runtime=7200, state="pending")
    make_job(gpus=2, min_runtime=7200, state="pending")
    make_job(project="tulu", user="carol", gpus=4, min_runtime=0, state="pending")
    Host.objects.get(name="hgx-03-h01").set_state(HostState.DRAINING, actor="olga", reason="fan")
    return demo


def test_it_needs_no_login_and_prometheus_parses_it(busy, client):
    families = scrape(client)
    assert {
        "allot_gpus", "allot_pending_jobs", "allot_pending_gpus", "allot_running_jobs", "allot_tick_duration_seconds",
        "allot_preemptions", "allot_unit_usage_ratio", "allot_host_state", "allot_hosts", "allot_xid_events",
        "allot_last_tick_timestamp_seconds", "allot_stranded_ratio", "allot_largest_placeable_gpus",
        "allot_host_last_heartbeat_timestamp_seconds",
    } <= set(families)
    assert families["allot_preemptions"].type == "counter"
    assert families["allot_xid_events"].type == "counter"
    assert families["allot_tick_duration_seconds"].type == "histogram"
    assert families["allot_gpus"].type == "gauge"


def test_gpus_by_state_agree_with_the_dashboards_definition(busy, client):
    gpus = scrape(client)["allot_gpus"]
    states = cluster_measures(busy).states
    assert one(gpus, cluster="gb200-east", state="allocated") == pytest.approx(states.allocated) == 8.25
    assert one(gpus, cluster="gb200-east", state="unallocated") == pytest.approx(states.unallocated) == 4
    assert one(gpus, cluster="gb200-east", state="idle") == pytest.approx(states.idle)
    assert one(gpus, cluster="gb200-east", state="unavailable") == pytest.approx(states.unavailable)
    # 352 GPUs: the failed tray's 4 and the draining server's 8 are unavailable.
    assert states.unavailable == 12
    assert sum(s.value for s in gpus.samples) == pytest.approx(352)


def test_pending_jobs_and_gpus_by_project_and_contract(busy, client):
    families = scrape(client)
    assert one(families["allot_pending_jobs"], project="olmo", allocation="allocated") == 2
    assert one(families["allot_pending_gpus"], project="olmo", allocation="allocated") == 18
    assert one(families["allot_pending_gpus"], project="tulu", allocation="unallocated") == 4
    assert one(families["allot_running_jobs"], project="olmo") == 2


def test_tick_durations_form_a_cumulative_histogram(busy, client):
    for seconds in (0.004, 0.03, 0.03, 0.2, 12.0):
        record_tick_duration(busy, seconds)
    histogram = scrape(client)["allot_tick_duration_seconds"]
    buckets = {s.labels["le"]: s.value for s in histogram.samples if s.name.endswith("_bucket")}
    assert buckets["0.005"] == 1 and buckets["0.05"] == 3 and buckets["0.25"] == 4 and buckets["10.0"] == 4
    assert buckets["+Inf"] == 5
    assert one(histogram, "allot_tick_duration_seconds_count") == 5
    assert one(histogram, "allot_tick_duration_seconds_sum") == pytest.approx(12.264)


def test_preemptions_are_counted_by_cause(busy, client):
    job = make_job(gpus=1, min_runtime=0)
    for cause in ("job:12", "job:13", "drain:hgx-03-h01", "down:hgx-04-h01", "defrag", "max_runtime"):
        JobEvent.objects.create(job=job, kind=EventKind.PREEMPT, cause=cause, actor="system:scheduler")
    preemptions = scrape(client)["allot_preemptions"]
    counts = {s.labels["cause"]: s.value for s in preemptions.samples if s.name == "allot_preemptions_total"}
    assert counts == {"job": 2, "drain": 1, "down": 1, "defrag": 1, "max_runtime": 1}


def test_unit_ratios_come_from_the_last_tick(busy, client):
    now = timezone.now()
    Tick.objects.create(cluster=busy, started_at=now - timedelta(seconds=10), duration=0.1, unit_ratios={"olmo": 9})
    Tick.objects.create(cluster=busy, started_at=now, duration=0.1, unit_ratios={"olmo": 0.4, "nlp": 0.25})
    families = scrape(client)
    assert one(families["allot_unit_usage_ratio"], unit="olmo") == 0.4
    assert one(families["allot_unit_usage_ratio"], unit="nlp") == 0.25
    assert one(families["allot_last_tick_timestamp_seconds"], cluster="gb200-east") == pytest.approx(now.timestamp())


def test_host_states_and_xids(busy, client):
    host = Host.objects.get(name="nvl72-02-h03")
    for code in (79, 79, 48):
        HostEvent.objects.create(host=host, kind=HostEvent.Kind.XID, code=code, actor="system:agent",
                                 detail=f"XID {code} on GPU 0")
    families = scrape(client)
    state = families["allot_host_state"]
    assert one(state, host="hgx-03-h01", state="draining") == 1
    assert one(state, host="hgx-03-h01", state="up") == 0
    assert one(state, host="nvl72-03-h07", state="down") == 1
    hosts = families["allot_hosts"]
    assert one(hosts, state="up") == 78 and one(hosts, state="draining") == 1 and one(hosts, state="down") == 1
    xids = {(s.labels["host"], s.labels["xid"]): s.value for s in families["allot_xid_events"].samples
            if s.name == "allot_xid_events_total"}
    assert xids == {("nvl72-02-h03", "48"): 1, ("nvl72-02-h03", "79"): 2}


def test_a_token_can_close_it(busy, client, settings):
    settings.METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert "allot_gpus" in scrape(client, HTTP_AUTHORIZATION="Bearer s3cret")


def test_a_scrape_costs_the_same_few_queries_whatever_the_number_of_jobs(busy, client, django_assert_max_num_queries):
    for _ in range(30):
        make_job(gpus=1, min_runtime=600, state="pending")
    with django_assert_max_num_queries(12):
        client.get("/metrics")


def test_the_metrics_token_is_read_from_allot_metrics_token():
    """`ALLOT_METRICS_TOKEN` (documented in the README) puts /metrics behind a bearer token."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "DEBUG": "1", "ALLOT_METRICS_TOKEN": "scrape-me", "DJANGO_SETTINGS_MODULE": "config.settings"}
    env.pop("METRICS_TOKEN", None)
    out = subprocess.run([sys.executable, "-c", "from django.conf import settings; print(settings.METRICS_TOKEN)"],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "scrape-me"

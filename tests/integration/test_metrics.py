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
    # Per scrape: a few grouped queries per family and per cluster, none per job, host or unit.
    with django_assert_max_num_queries(24):
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


def test_per_unit_gpus_in_use_and_entitled_roll_up_the_tree(busy, client):
    families = scrape(client)
    in_use, entitled = families["allot_unit_gpus_in_use"], families["allot_unit_entitled_gpus"]
    assert one(in_use, cluster="gb200-east", unit="olmo", allocation="allocated") == 8.25
    assert one(in_use, cluster="gb200-east", unit="tulu", allocation="unallocated") == 4
    assert one(in_use, cluster="gb200-east", unit="nlp", allocation="allocated") == 8.25
    assert one(in_use, cluster="gb200-east", unit="nlp", allocation="unallocated") == 4
    assert one(in_use, cluster="gb200-east", unit="molmo", allocation="allocated") == 0
    healthy = busy.schedulable_gpus()
    assert one(entitled, cluster="gb200-east", unit="nlp") == pytest.approx(0.6 * healthy, abs=0.001)
    assert one(entitled, cluster="gb200-east", unit="olmo") == pytest.approx(0.6 * 0.55 * healthy, abs=0.001)


def test_pending_by_reason_kind_after_a_tick(busy, client):
    from scheduler.tick import run_tick

    make_job(gpus=4096, min_runtime=7200, state="pending")  # more than the cluster has: it never fits
    run_tick(busy)
    families = scrape(client)
    jobs, gpus = families["allot_pending_jobs_by_reason"], families["allot_pending_gpus_by_reason"]
    assert one(jobs, cluster="gb200-east", reason="never_fits") == 1
    assert one(gpus, cluster="gb200-east", reason="never_fits") == 4096
    assert sum(s.value for s in jobs.samples) == sum(s.value for s in families["allot_pending_jobs"].samples)
    assert {s.labels["reason"] for s in jobs.samples} <= {
        "preempting", "preempted_leaving", "defragmenting", "never_fits", "unallocated", "no_allocation", "entitled",
        "reservation", "fair_share", "no_room"}


def test_waits_starts_and_ends_are_cumulative(busy, client):
    now = timezone.now()
    waited = make_job(gpus=1, min_runtime=600, on_hosts=["hgx-02-h01"], started=now)
    waited.submitted_at = now - timedelta(seconds=45)
    waited.save(update_fields=["submitted_at"])
    JobEvent.objects.create(job=waited, kind=EventKind.START, actor="scheduler")
    make_job(gpus=1, min_runtime=600, state="completed")
    make_job(gpus=1, min_runtime=600, state="failed")
    families = scrape(client)
    wait = families["allot_job_wait_seconds"]
    assert wait.type == "histogram"
    assert one(wait, "allot_job_wait_seconds_bucket", le="30", **{"class": "allocated"}, priority="normal") == 2
    assert one(wait, "allot_job_wait_seconds_bucket", le="60", **{"class": "allocated"}, priority="normal") == 3
    assert one(wait, "allot_job_wait_seconds_count", **{"class": "allocated"}, priority="normal") == 3
    assert one(wait, "allot_job_wait_seconds_count", **{"class": "unallocated"}, priority="normal") == 1
    assert one(wait, "allot_job_wait_seconds_sum", **{"class": "allocated"}, priority="normal") == pytest.approx(
        45, abs=2)
    assert one(families["allot_job_starts"], cluster="gb200-east") == 1
    ends = families["allot_job_ends"]
    assert ends.type == "counter"
    assert one(ends, outcome="completed") == 1
    assert one(ends, outcome="failed") == 1
    assert one(ends, outcome="cancelled") == 0


def test_each_gpu_a_live_job_holds_is_one_series_to_join_with_dcgm(busy, client):
    from topology.models import Gpu

    Gpu.objects.filter(host__name="hgx-01-h01", index=0).update(uuid="GPU-5fd4c8a2-0000-0000-0000-000000000000")
    info = scrape(client)["allot_job_gpu_info"]
    assert len(info.samples) == 8 + 4 + 1
    sample = next(s for s in info.samples if s.labels["UUID"].startswith("GPU-5fd4c8a2"))
    assert sample.labels["Hostname"] == "hgx-01-h01"
    assert sample.labels["gpu"] == "0"
    assert sample.labels["project"] == "olmo"
    assert sample.value == 1


def test_build_info(client, db):
    import django

    info = scrape(client)["allot_build_info"]
    (sample,) = info.samples
    assert sample.name == "allot_build_info"
    assert sample.labels["django"] == django.get_version()
    assert sample.labels["version"]

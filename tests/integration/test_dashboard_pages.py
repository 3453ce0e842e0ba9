"""The operations pages render real data, escape what people typed, and cost a fixed number of queries."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.choices import EventKind
from scheduler.models import JobEvent, Tick
from scheduler.services import job_end_run
from scheduler.tick import run_tick
from tests.conftest import get_user
from tests.factories import make_job
from topology.choices import HostState
from topology.loaders import apply_cluster
from topology.models import Host
from topology.spec import parse_cluster

pytestmark = pytest.mark.django_db

PAGES = [
    "/clusters/gb200-east/", "/clusters/gb200-east/dashboard.json", "/clusters/gb200-east/domains/nvl72-01/",
    "/hosts/nvl72-01-h01/", "/repairs/", "/clusters/gb200-east/queue/",
]


@pytest.mark.parametrize("path", PAGES)
def test_they_need_a_login(demo, client, path):
    response = client.get(path)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_dashboard_shows_the_cluster_now(demo, client):
    make_job(gpus=8, min_runtime=3600, on_hosts=["hgx-01-h01"])
    make_job(project="tulu", user="carol", gpus=4, min_runtime=0, on_hosts=["nvl72-01-h01"])
    make_job(gpus=64, min_runtime=7200, state="pending", topology="domain")
    client.force_login(get_user("pat"))
    html = client.get("/clusters/gb200-east/").content.decode()
    assert 'data-testid="occupancy">3.4 %' in html  # 12 of 348 healthy GPUs
    assert "8 GPUs allocated" not in html and ">8</div><div class=\"label\">GPUs allocated (charged)" in html
    # Free whole GPUs per domain: nvl72-01 has 68, nvl72-02 72 — the largest placeable job is 72.
    assert 'data-testid="largest-placeable">72<' in html
    assert "1</div><div class=\"label\">pending jobs asking 64 GPUs (64 allocated)" in html
    assert html.count('class="card domain-card"') == 12
    assert "XID 79 (GPU has fallen off the bus)" in html  # the health policy
    # What a preemption costs and what bounds it, from the cluster's policy (the demo's defaults).
    assert "5m per restart, for jobs that give none" in html
    assert "up to 16h; an unallocated job waits 5m after its first preemption, doubling up to 1h" in html
    assert "waits up to 30m for its victim's declared checkpoint" in html
    assert 'src="/static/plotly/plotly.min.js"' in html and 'src="/static/js/dashboard.js"' in html
    # htmx asks for the live part alone.
    part = client.get("/clusters/gb200-east/", HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in part and 'data-testid="cluster-now"' in part


def test_the_dashboard_data_for_each_range(demo, client, settings):
    settings.ALLOT_SAMPLE_SECONDS = 60
    now = timezone.now()
    for minutes in range(0, 50, 5):
        run_tick(demo, now=now - timedelta(minutes=minutes))
    client.force_login(get_user("pat"))
    data = client.get("/clusters/gb200-east/dashboard.json?range=1h").json()
    assert data["range_seconds"] == 3600
    samples = data["samples"]
    assert len(samples["x"]) == 10 and samples["x"] == sorted(samples["x"])
    assert set(samples["stranded"]) == {"8", "16", "32", "72"}
    assert samples["healthy"][-1] == 348 and samples["unavailable"][-1] == 4
    assert {row["domain"] for row in data["domains"]} >= {"nvl72-01", "hgx-08"}
    assert {row["project"] for row in data["consumption"]} == {"olmo", "tulu", "safety", "molmo", "pixmo"}
    assert client.get("/clusters/gb200-east/dashboard.json?range=window").json()["range_seconds"] == 7 * 86400
    assert client.get("/clusters/gb200-east/dashboard.json?range=bogus").json()["range_seconds"] == 86400


def test_the_rack_marks_hosts_held_for_a_head_of_line_job_and_names_each_gpus_job(demo, client):
    job = make_job(gpus=4, min_runtime=3600, on_hosts=["nvl72-02-h01"], name="pretrain")
    waiting = make_job(gpus=72, min_runtime=3600, state="pending", topology="domain")
    Tick.objects.create(cluster=demo, started_at=timezone.now(), duration=0.1, reservations=[{
        "job": waiting.pk, "domain": "nvl72-02", "hosts": ["nvl72-02-h01", "nvl72-02-h02"],
        "expected_start": (timezone.now() + timedelta(hours=1)).isoformat(), "reason": "held until 1h",
    }])
    client.force_login(get_user("olga"))
    html = client.get("/clusters/gb200-east/domains/nvl72-02/").content.decode()
    assert html.count('data-state="reserved"') == 4  # h02's four idle GPUs; h01's are in use
    assert 'data-gpu="nvl72-02-h01:0" data-state="allocated"' in html
    assert f"job {job.pk} pretrain (olmo, alice, allocated, protected until" in html
    assert f"reserved for job {waiting.pk} (expected to start" in html
    assert 'data-testid="reservations"' in html and "held until 1h" in html
    assert "reserved <strong>4</strong>" in html
    jobs_here = html.split('data-testid="rack-jobs"')[1].split("</table>")[0]
    assert f'data-job="{job.pk}"' in jobs_here and "olmo, alice" in jobs_here
    part = client.get("/clusters/gb200-east/domains/nvl72-02/", HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in part and 'data-testid="rack"' in part


def test_the_queue_page_says_when_a_reservation_is_expected_to_start_in_local_time(demo, client):
    waiting = make_job(gpus=72, min_runtime=3600, state="pending", topology="domain")
    start = timezone.now() + timedelta(hours=1, seconds=30)
    Tick.objects.create(cluster=demo, started_at=timezone.now(), duration=0.1, reservations=[{
        "job": waiting.pk, "domain": "nvl72-02", "hosts": ["nvl72-02-h01"], "expected_start": start.isoformat(),
        "reason": "held until 1h",
    }])
    client.force_login(get_user("alice"))
    html = client.get("/clusters/gb200-east/queue/").content.decode()
    assert f"<td>{timezone.localtime(start):%H:%M} (in 1h)</td>" in html


def test_the_repairs_page_groups_hosts_out_of_service(demo, client):
    make_job(gpus=4, min_runtime=3600, on_hosts=["nvl72-02-h01"])
    Host.objects.get(name="nvl72-02-h01").set_state(HostState.DRAINING, actor="olga", reason="NVLink errors")
    Host.objects.get(name="hgx-05-h01").set_state(HostState.DRAINED, actor="system:health", reason="XID 48 on GPU 2")
    Host.objects.get(name="hgx-06-h01").set_state(HostState.CORDONED, actor="olga", reason="firmware")
    client.force_login(get_user("olga"))
    html = client.get("/repairs/").content.decode()
    needs, draining, cordoned = (html.split(f'data-testid="{name}"')[1].split("</table>")[0]
                                 for name in ("needs-repair", "draining", "cordoned"))
    assert "hgx-05-h01" in needs and "nvl72-03-h07" in needs and "XID 48 on GPU 2" in needs
    assert "nvl72-02-h01" in draining and "1 job left" in draining and "NVLink errors" in draining
    assert "hgx-06-h01" in cordoned and "firmware" in cordoned
    # On-call sees the hosts waiting for repair counted in the navigation.
    assert '<span class="badge" title="2 hosts drained or down, waiting for repair">2</span>' in html
    client.force_login(get_user("alice"))
    assert 'waiting for repair">' not in client.get("/repairs/").content.decode()


def test_the_host_page_shows_jobs_with_their_protection_and_xids_with_their_meaning(demo, client):
    job = make_job(gpus=2, min_runtime=3600, on_hosts=["nvl72-01-h01"])
    host = Host.objects.get(name="nvl72-01-h01")
    from topology.models import HostEvent

    HostEvent.objects.create(host=host, kind="xid", code=79, actor="system:agent", detail="XID 79 on GPU 3")
    client.force_login(get_user("bob"))
    html = client.get("/hosts/nvl72-01-h01/").content.decode()
    assert f'data-job="{job.pk}"' in html and "allocated, 1h protected" in html
    assert "at its minimum runtime" in html
    assert 'data-testid="xid-meanings"' in html and "GPU has fallen off the bus" in html
    assert "the GPU is unreachable over PCIe: drain and repair" in html
    assert 'id="host-timeline-data"' in html


def test_the_queue_explains_its_order_per_unit(demo, client):
    now = timezone.now().replace(microsecond=0) + timedelta(minutes=1)  # the shares hold from their loading
    # Over the 7-day window nlp used 20 % of its 60 % of the 348 schedulable GPUs (olmo: 72 GPUs for 97.5 h),
    # multimodal 50 % of its 40 % (molmo: 72 GPUs for 162.5 h).
    for project, user, hours in (("olmo", "alice", 97.5), ("molmo", "dan", 162.5)):
        ran = make_job(project=project, user=user, gpus=72, on_hosts=[f"nvl72-01-h{h:02d}" for h in range(1, 19)],
                       started=now - timedelta(hours=hours + 1))
        job_end_run(job=ran, outcome="exited", exit_code=0, at=now - timedelta(hours=1), actor="test")
    # Waiting jobs no domain can hold: they keep their places, and the tick explains the order.
    first = make_job(gpus=100, min_runtime=3600, state="pending", topology="domain", name="olmo-big")
    make_job(project="molmo", user="dan", gpus=100, min_runtime=3600, state="pending", topology="domain")
    make_job(project="tulu", user="carol", gpus=100, min_runtime=0, state="pending", topology="domain")
    run_tick(demo, now=now)
    make_job(project="pixmo", user="erin", gpus=1, min_runtime=600, state="pending")
    client.force_login(get_user("alice"))
    html = client.get("/clusters/gb200-east/queue/").content.decode()
    order = html.split('data-testid="order"')[1].split("</table>")[0]
    assert order.index('data-project="olmo"') < order.index('data-project="molmo"') < order.index(
        'data-project="tulu"') < order.index('data-project="pixmo"')
    assert "first: its units are the least served of those with allocated jobs waiting" in order
    assert "nlp has used 20 % of its budget, multimodal 50 %: the less-served sibling goes first" in order
    assert "only unallocated jobs (minimum runtime 0) wait here" in order
    assert "submitted since the last tick: placed at the next one" in order
    pending = html.split('data-testid="pending"')[1].split("</table>")[0]
    assert "nlp 20 % › olmo 36 %" in pending
    assert f'<tr data-job="{first.pk}" class="mine">' in pending


def test_the_job_page_tells_its_story(demo, client):
    job = make_job(gpus=8, min_runtime=3600, on_hosts=["hgx-01-h01"], name="<b>bold</b>")
    JobEvent.objects.create(job=job, kind=EventKind.START, actor="system:scheduler",
                            detail=" ".join(f"hgx-01-h01:{i}" for i in range(8)), cause="best fit")
    JobEvent.objects.create(job=job, kind=EventKind.PREEMPT, actor="system:scheduler", cause="job:4242",
                            detail="preempted by job 4242 of project vision")
    JobEvent.objects.create(job=job, kind=EventKind.PREEMPT, actor="system:scheduler", cause="drain:hgx-01-h01",
                            detail="host hgx-01-h01 is draining")
    client.force_login(get_user("alice"))
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "8 GPUs on hgx-01-h01" in html
    assert 'for <a href="/jobs/4242/">job 4242</a>' in html
    assert 'drain of <a href="/hosts/hgx-01-h01/">hgx-01-h01</a>' in html
    assert '<a href="/hosts/hgx-01-h01/">hgx-01-h01</a>:0-7' in html
    assert "<b>bold</b>" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html


def test_names_people_typed_are_escaped_everywhere(demo, client):
    make_job(gpus=4, min_runtime=3600, on_hosts=["nvl72-01-h01"], name="<script>x()</script>")
    make_job(gpus=4, min_runtime=3600, state="pending", name="<script>y()</script>")
    Host.objects.get(name="nvl72-01-h02").set_state(HostState.CORDONED, actor="olga", reason="<img src=x>")
    client.force_login(get_user("olga"))
    for path in ("/clusters/gb200-east/queue/", "/clusters/gb200-east/domains/nvl72-01/", "/hosts/nvl72-01-h01/",
                 "/hosts/nvl72-01-h02/", "/repairs/", "/clusters/gb200-east/"):
        html = client.get(path).content.decode()
        assert "<script>x()" not in html and "<script>y()" not in html and "<img src=x>" not in html, path


# ---------------------------------------------------------------- queries do not grow


def queries(client, path) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(path).status_code == 200
    return len(captured)


def add_jobs(count, *, on, first=0):
    """`count` running 1-GPU jobs on the GPUs of `on` (from the `first`-th), and as many pending ones."""
    for index in range(first, first + count):
        make_job(gpus=1, min_runtime=3600, gpu_ids=[f"{on[index % len(on)]}:{index // len(on)}"])
        make_job(gpus=2, min_runtime=600, state="pending", queue_position=index + 1,
                 pending_reason="needs 2 GPUs; largest free is 1")


@pytest.mark.parametrize("path", [
    "/clusters/gb200-east/", "/clusters/gb200-east/dashboard.json", "/clusters/gb200-east/domains/nvl72-01/",
    "/hosts/nvl72-01-h01/", "/clusters/gb200-east/queue/", "/repairs/", "/metrics",
])
def test_queries_per_page_do_not_grow_with_jobs(demo, client, path):
    client.force_login(get_user("olga"))
    hosts = [f"nvl72-01-h{n:02d}" for n in range(1, 5)]
    add_jobs(3, on=hosts)
    Host.objects.get(name="nvl72-01-h01").set_state(HostState.DRAINING, actor="olga", reason="test")
    few = queries(client, path)
    add_jobs(12, on=hosts, first=3)
    assert queries(client, path) == few
    assert few <= 25


def test_queries_per_page_do_not_grow_with_hosts(demo_org_units, client):
    def spec(name, racks):
        return {"name": name, "policy": {"executor": "simulated"},
                "domains": [{"name": f"{name}-r{{:02d}}", "count": racks, "hosts": 18, "gpus_per_host": 4,
                             "gpu_type": "GB200"}]}

    apply_cluster(parse_cluster(spec("small", 1)))
    apply_cluster(parse_cluster(spec("large", 6)))
    from django.contrib.auth.models import Group

    olga = get_user("alice")
    olga.groups.add(Group.objects.get_or_create(name="oncall")[0])
    client.force_login(olga)
    for page in ("/clusters/{}/", "/clusters/{}/dashboard.json", "/clusters/{}/queue/"):
        assert queries(client, page.format("large")) == queries(client, page.format("small")), page

"""Database queries per request do not grow with the number of jobs (the load a cluster puts on the server).

These are the hot paths of bench/load.py: the agent heartbeat (every host,
every few seconds), and the queue page, jobs list and job detail that
researchers poll. Every page has its own check as well, in
tests/integration/test_dashboard_pages.py.
"""

import itertools

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.models import JobProcess
from tests.conftest import get_user
from tests.factories import make_job
from topology.models import AgentToken, Host

pytestmark = pytest.mark.django_db

HGX = [f"hgx-{n:02d}-h01" for n in range(1, 9)]
RACK = [f"nvl72-01-h{n:02d}" for n in range(1, 19)]


@pytest.fixture
def agent_cluster(demo):
    demo.executor = "agent"
    demo.save()
    return demo


def run_on(host: str, *, gpus: int = 1, first_gpu: int = 0, run_state=JobProcess.State.RUNNING):
    """A running job with its process on `host`, as the tick and a heartbeat leave it."""
    job = make_job(gpus=gpus, gpu_ids=[f"{host}:{first_gpu + i}" for i in range(gpus)])
    JobProcess.objects.create(job=job, host=Host.objects.get(name=host), run=0, rank=0, state=run_state, pid=4000)
    return job


def fill_other_hosts(jobs_per_host: int, *, first_gpu: int = 0):
    """Running jobs and pending ones elsewhere in the cluster: what the heartbeat of one host must not see."""
    for host in RACK:
        for index in range(first_gpu, first_gpu + jobs_per_host):
            run_on(host, first_gpu=index)
    for index in range(jobs_per_host * 10):
        make_job(gpus=4, min_runtime=600, state="pending", queue_position=index + 1)


STEPS = itertools.count(1)


def heartbeat_queries(api, host: str, jobs) -> int:
    """Queries of one heartbeat from `host` reporting `jobs` running, each with new output since the last."""
    token = AgentToken.for_host(Host.objects.get(name=host))
    api.credentials(HTTP_AUTHORIZATION=f"Agent {token.key}")
    step = next(STEPS)
    body = {
        "host": host, "gpus": [{"index": i, "health": "ok"} for i in range(8)],
        "processes": [{"job": job.pk, "run": 0, "rank": 0, "state": "running", "pid": 4000,
                       "output_tail": f"step {step}\n"} for job in jobs],
    }
    with CaptureQueriesContext(connection) as captured:
        response = api.post("/api/v1/agent/heartbeat/", body, format="json")
    assert response.status_code == 200, response.content
    assert len(response.json()["assignments"]) == len(jobs)
    return len(captured)


def test_a_heartbeat_costs_the_same_whatever_runs_on_other_hosts(agent_cluster, api):
    mine = [run_on(HGX[0], gpus=2, first_gpu=2 * i) for i in range(2)]
    fill_other_hosts(1)
    few = heartbeat_queries(api, HGX[0], mine)
    fill_other_hosts(3, first_gpu=1)  # 18 → 72 running jobs elsewhere, 10 → 40 pending
    assert heartbeat_queries(api, HGX[0], mine) == few
    assert few <= 24


def test_a_heartbeat_costs_the_same_for_one_running_process_or_eight(agent_cluster, api,
                                                                    django_assert_max_num_queries):
    """Processes that run on (the common case) are read together and their output written in one update."""
    one_job = [run_on(HGX[1], first_gpu=0)]
    eight_jobs = [run_on(HGX[2], first_gpu=i) for i in range(8)]
    heartbeat_queries(api, HGX[1], one_job)
    heartbeat_queries(api, HGX[2], eight_jobs)
    one = heartbeat_queries(api, HGX[1], one_job)
    assert heartbeat_queries(api, HGX[2], eight_jobs) == one <= 14
    token = AgentToken.for_host(Host.objects.get(name=HGX[3]))
    api.credentials(HTTP_AUTHORIZATION=f"Agent {token.key}")
    with django_assert_max_num_queries(10):  # an idle host: the common case on a busy cluster's quiet hosts
        assert api.post("/api/v1/agent/heartbeat/", {"host": HGX[3]}, format="json").status_code == 200


def list_queries(api, path: str) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as captured:
        response = api.get(path)
    assert response.status_code == 200, response.content
    return len(captured), len(response.json()["results"])


@pytest.mark.parametrize("path", [
    "/api/v1/jobs/?state=pending", "/api/v1/jobs/?state=running", "/api/v1/jobs/", "/api/v1/jobs/?mine=1",
    "/api/v1/jobs/?cluster=gb200-east&project=olmo",
])
def test_the_jobs_list_costs_the_same_for_5_jobs_or_60(demo, api, path, django_assert_max_num_queries):
    api.as_user(get_user("alice"))
    for index in range(5):
        run_on(RACK[index])
        make_job(gpus=2, min_runtime=600, state="pending", queue_position=index + 1)
    few, listed_few = list_queries(api, path)
    for index in range(5, 60):
        run_on(RACK[index % 18], first_gpu=index // 18)
        make_job(gpus=2, min_runtime=600, state="pending", queue_position=index + 1)
    with django_assert_max_num_queries(few):
        many, listed_many = list_queries(api, path)
    assert listed_many > listed_few
    assert many == few <= 12


def test_the_job_detail_costs_the_same_however_long_its_history(demo, api, django_assert_max_num_queries):
    from scheduler.models import JobEvent

    api.as_user(get_user("alice"))
    job = run_on(RACK[0], gpus=4)
    few, _ = detail_queries(api, job)
    for number in range(40):
        JobEvent.objects.create(job=job, kind="checkpoint", actor="agent:test", detail=f"step {number}")
    for index in range(30):
        run_on(RACK[1 + index % 17], first_gpu=index // 17)
    with django_assert_max_num_queries(few):
        many, events = detail_queries(api, job)
    assert events > 40 and many == few <= 10


def detail_queries(api, job) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as captured:
        response = api.get(f"/api/v1/jobs/{job.pk}/")
    assert response.status_code == 200, response.content
    return len(captured), len(response.json()["events"])


def test_the_queue_page_researchers_poll_costs_the_same_for_5_jobs_or_60(demo, client, django_assert_max_num_queries):
    """The page researchers keep open (tests/integration/test_dashboard_pages.py has every page, as on-call)."""
    client.force_login(get_user("alice"))
    for index in range(5):
        run_on(RACK[index])
        make_job(gpus=2, min_runtime=600, state="pending", queue_position=index + 1)
    with CaptureQueriesContext(connection) as captured:
        assert client.get("/clusters/gb200-east/queue/").status_code == 200
    few = len(captured)
    for index in range(5, 60):
        run_on(RACK[index % 18], first_gpu=index // 18)
        make_job(gpus=2, min_runtime=600, state="pending", queue_position=index + 1)
    with django_assert_max_num_queries(few):
        html = client.get("/clusters/gb200-east/queue/").content.decode()
    assert html.count('href="/jobs/') >= 60 and few <= 25

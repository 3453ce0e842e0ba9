"""What the agent work shows in Chromium: the host page says how its agent runs jobs and marks the GPU a
health event names; the job page says why a job failed and whom and where it ran as."""

import re

import pytest
from django.utils import timezone

from scheduler.models import Job, JobProcess
from tests.factories import make_job
from topology.models import Host, HostEvent

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_host_page_shows_the_agent_and_marks_the_gpu_an_xid_names(demo, visit):
    demo.executor = "agent"
    demo.save()
    host = Host.objects.get(name="hgx-01-h01")
    Host.objects.filter(pk=host.pk).update(agent_mode="root", containment="v1", last_heartbeat_at=timezone.now(),
                                           containment_note="freezer, pids, memory, devices")
    event = HostEvent.objects.create(host=host, kind="xid", code=79, gpu=3, actor="system:agent",
                                     detail="XID 79 on GPU 3: GPU has fallen off the bus")
    visit.login("olga")
    visit.goto("/hosts/hgx-01-h01/")
    agent = visit.page.get_by_test_id("host-agent").inner_text()
    assert agent == "runs each job as its submitter's account; containment cgroup v1 (freezer, pids, memory, devices)"
    cells = visit.page.get_by_test_id("gpu-health").all_inner_texts()
    at = timezone.localtime(event.at).strftime("%H:%M")
    assert cells == ["ok", "ok", "ok", f"XID 79 at {at}", "ok", "ok", "ok", "ok"]
    visit.shot("host-agent-and-gpu-mark")
    assert visit.console_errors == []


def test_the_job_page_says_why_it_failed_and_how_it_ran(demo, visit):
    demo.executor = "agent"
    demo.save()
    job = make_job(gpus=1, state="failed", user="alice")
    reason = "no such user on hgx-01-h01: asmith"
    Job.objects.filter(pk=job.pk).update(failure_reason=reason, workdir="/data/alice/run", env={"WANDB_MODE": "x"},
                                         ended_at=timezone.now())
    JobProcess.objects.create(job=job, host=Host.objects.get(name="hgx-01-h01"), run=0, rank=0, state="exited",
                              error=reason)
    visit.login("alice")
    visit.goto(f"/jobs/{job.pk}/")
    assert visit.page.get_by_test_id("failure-reason").inner_text() == reason
    assert re.fullmatch(r"alice in /data/alice/run; its own variables: WANDB_MODE",
                        visit.page.get_by_test_id("runs-as").inner_text())
    assert visit.page.get_by_test_id("process-error").inner_text() == reason
    visit.shot("job-failure-reason")
    assert visit.console_errors == []

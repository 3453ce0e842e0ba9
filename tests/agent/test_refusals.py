"""Jobs an agent must not run, a host a job's output must not take down, tokens that stop working.

Real agents as root against the live server; the failure reason is read where a user reads it: the API,
the CLI (`allot show`) and the job page.
"""

import io
import json
import re
from contextlib import redirect_stdout

import pytest
from django.core.management import call_command

from accounts.services import token_create
from client import cli
from scheduler.models import Job, JobProcess
from tests.agent.conftest import HOST
from tests.conftest import get_user
from topology.choices import HostState
from topology.models import AgentToken, Host

pytestmark = pytest.mark.django_db(transaction=True)


def ended(lab, job, state="failed") -> Job:
    lab.wait_for(lambda: Job.objects.get(pk=job.pk).state == state, what=f"job {job.pk} is {state}")
    return Job.objects.get(pk=job.pk)


def shown_by_cli(lab, job, username, monkeypatch) -> str:
    _, key = token_create(user=get_user(username), name="test")
    monkeypatch.setenv("ALLOT_TOKEN", key)
    monkeypatch.setenv("ALLOT_SERVER", lab.server)
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["show", str(job.pk)]) == 0
    return out.getvalue()


def test_a_job_whose_account_is_missing_on_the_host_fails_at_once_with_the_reason(make_lab, client, monkeypatch):
    lab = make_lab(extra_users={"gus": "nosuchaccount"})
    job = lab.submit("echo should-not-run", user="gus")
    job = ended(lab, job)
    reason = f"no such user on {HOST}: nosuchaccount"
    assert job.failure_reason == reason and job.exit_code is None
    assert JobProcess.objects.get(job=job).error == reason
    assert job.events.get(kind="fail").detail == f"failed: {reason}"
    client.force_login(get_user("gus"))
    api = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert api["failure_reason"] == reason and api["output"][0]["error"] == reason
    assert reason in client.get(f"/jobs/{job.pk}/").content.decode()
    assert re.search(rf"^Why it failed +{reason}$", shown_by_cli(lab, job, "gus", monkeypatch), re.M)


def test_a_root_job_on_a_cluster_that_does_not_allow_it_is_refused(make_lab):
    lab = make_lab(extra_users={"rooty": "root"})
    job = ended(lab, lab.submit("id -u > /tmp/allot-should-not-exist", user="rooty"))
    assert job.failure_reason == (f"refused on {HOST}: the job would run as root (root, uid 0) and cluster rootlab "
                                  "does not allow root jobs (policy allow_root_jobs)")


def test_a_root_job_runs_where_the_cluster_allows_it(make_lab):
    lab = make_lab(allow_root_jobs=True, extra_users={"rooty": "root"})
    job = ended(lab, lab.submit("id -u", user="rooty"), state="completed")
    assert JobProcess.objects.get(job=job).output_tail == "0\n"


def test_a_single_user_agent_as_root_is_refused_unless_the_cluster_allows_root_jobs(make_lab):
    lab = make_lab(start=())
    lab.start_agent(HOST, "--single-user")
    lab.wait_for(lambda: "does not allow root jobs" in lab.log(), what="the agent is told why", tick=False)
    host = Host.objects.get(name=HOST)
    assert host.state == HostState.DOWN and host.last_heartbeat_at is None
    assert "a single-user agent running as root would run every job on node-01-h01 as root" in lab.log()


def test_nul_and_escape_sequences_in_output_keep_the_host_up_and_reach_the_page_cleaned(make_lab, client):
    lab = make_lab()
    noisy = lab.program("noisy.py", r"""
import sys, time
out = sys.stdout.buffer
out.write(b"before\x00nul \x1b[31mred\x1b[0m \x1b]0;title\x07bell\a back\x08 \xff\xfe invalid\ttab\r\n")
out.flush()
time.sleep(3)
out.write(b"x" * 20000 + b"\nlast line\n")
out.flush()
time.sleep(60)
""")
    job = lab.submit(f"/usr/bin/python3 {noisy}")
    other = lab.submit("echo other job runs; sleep 60")

    def tail(marker):
        process = JobProcess.objects.filter(job=job).first()
        return process.output_tail if process and marker in process.output_tail else None

    text = lab.wait_for(lambda: tail("before"), what="the noisy job's output arrives")
    assert text == "before\ufffdnul red bell back \ufffd\ufffd invalid\ttab\n"
    text = lab.wait_for(lambda: tail("last line"), what="its long output arrives")
    assert len(text) == 8000 and text.endswith("x\nlast line\n")
    first_beat = Host.objects.get(name=HOST).last_heartbeat_at
    lab.wait_for(lambda: Host.objects.get(name=HOST).last_heartbeat_at > first_beat, what="heartbeats go on")
    assert Host.objects.get(name=HOST).state == HostState.UP
    assert Job.objects.get(pk=other.pk).state == "running"
    client.force_login(get_user("ann"))
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "last line" in page and "\x00" not in page and "\x1b" not in page


def test_token_rotation_locks_the_old_token_out(make_lab):
    lab = make_lab()
    old = lab.tokens[HOST]
    out = io.StringIO()
    call_command("agent_token", HOST, "--rotate", "--reason", "test rotation", stdout=out)
    new = out.getvalue().strip()
    assert re.fullmatch(r"[0-9a-f]{64}", new) and new != old
    lab.wait_for(lambda: "401" in lab.log() or "revoked agent token" in lab.log(), what="the old token is refused",
                 tick=False)
    assert AgentToken.find(old) is None and AgentToken.find(new).host.name == HOST
    # Only hashes are stored, and the change is in the host's history.
    stored = json.dumps(list(AgentToken.objects.values()), default=str)
    assert old not in stored and new not in stored
    assert Host.objects.get(name=HOST).events.filter(detail__contains="issued, the previous one revoked").exists()
    # Without --rotate the command will not issue a second token (the first cannot be shown again).
    with pytest.raises(Exception, match="already has a token"):
        call_command("agent_token", HOST, stdout=io.StringIO())
    # The agent with the new token is let in again.
    lab.stop_agent(HOST)
    seen = Host.objects.get(name=HOST).last_heartbeat_at
    lab.start_agent(HOST, token=new)
    lab.wait_for(lambda: Host.objects.get(name=HOST).last_heartbeat_at > seen, what="the new token works")

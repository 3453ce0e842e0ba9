"""Real node agents killed with SIGKILL and started again, and agents whose clocks are wrong.

The contract (README, "Agents"): restarting an agent does not stop its jobs,
it adopts them again; a host silent for the heartbeat timeout goes down, its
resumable jobs are requeued and resume from their checkpoint, the others
fail with that reason, and whatever the host still runs of them is stopped
when its agent returns. The server keeps time by its own clock: an agent's
clock off by half the timeout changes nothing.

As in tests/integration/test_agents_end_to_end.py, `allot-agent` processes
(single-user test-rig agents) serve hosts of fake GPUs against the live server
and the test drives the ticks.
The job below writes its own checkpoints to shared storage (the test's marks
folder) and touches $ALLOT_CHECKPOINT_FILE after each one.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from django.utils import timezone

from budgets.loaders import load_org_file
from scheduler.choices import EventKind, JobState
from scheduler.models import Job
from scheduler.services import JobRequest, job_submit
from scheduler.tick import run_tick
from tests.agent_rig import remove_cgroups, rig_agent, run_cgroup_parent
from tests.conftest import get_user
from tests.integration.test_agents_end_to_end import ME
from topology.choices import HostState
from topology.loaders import load_cluster_file
from topology.models import Host, HostEvent

pytestmark = pytest.mark.django_db(transaction=True)

# argv: seconds to run, seconds between checkpoints (0: none), exit code.
PROGRAM = """
import json, os, signal, sys, time
marks = os.environ["MARKS"]
job, run = os.environ["ALLOT_JOB_ID"], os.environ["ALLOT_RESTARTS"]
real_time = getattr(time, "unskewed_time", time.time)  # the test's clock, whatever this host's says
shared = os.path.join(marks, f"state-{job}")
def note(**facts):
    with open(os.path.join(marks, f"job-{job}-run-{run}"), "a") as handle:
        handle.write(json.dumps({**facts, "at": real_time()}) + "\\n")
def on_term(signum, frame):
    note(event="SIGTERM")
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
seconds, every, code = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
step = int(open(shared).read()) if os.path.exists(shared) else 0
note(event="start", pid=os.getpid(), resumed_at_step=step)
began = time.monotonic()
while time.monotonic() - began < seconds:
    time.sleep(every or seconds)
    if every:
        step += 1
        # Written whole or not at all: an orphaned run may still checkpoint while a new run reads it.
        with open(f"{shared}.{os.getpid()}", "w") as handle:
            handle.write(str(step))
        os.replace(f"{shared}.{os.getpid()}", shared)
        with open(os.environ["ALLOT_CHECKPOINT_FILE"], "w"):
            pass
        os.utime(os.environ["ALLOT_CHECKPOINT_FILE"], (time.time(), time.time()))  # this host's clock
        note(event="checkpoint", step=step)
note(event="done")
sys.exit(code)
"""
# A host whose clock is off: time.time and datetime.now shifted by ALLOT_CLOCK_SKEW seconds in the agent,
# and by its host's entry in skews.json in the jobs it starts (which get nothing of the agent's environment:
# they find this module through their own PYTHONPATH, and their host in ALLOT_HOST), so the file times a job
# sets are on its host's clock.
SITECUSTOMIZE = """
import datetime, json, os, time
skew = float(os.environ.get("ALLOT_CLOCK_SKEW") or 0)
if not skew and os.environ.get("ALLOT_HOST"):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "skews.json")) as handle:
        skew = float(json.load(handle).get(os.environ["ALLOT_HOST"], 0))
if skew:
    _time, _time_ns = time.time, time.time_ns
    time.unskewed_time = _time
    time.time = lambda: _time() + skew
    time.time_ns = lambda: _time_ns() + int(skew * 1e9)

    class SkewedDateTime(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return super().now(tz) + datetime.timedelta(seconds=skew)

        @classmethod
        def utcnow(cls):
            return super().utcnow() + datetime.timedelta(seconds=skew)

    datetime.datetime = SkewedDateTime
"""
HOSTS = ("node-01-h01", "node-02-h01", "node-03-h01")


class Lab:
    def __init__(self, cluster, directory, server):
        self.cluster, self.dir, self.server = cluster, directory, server
        self.agents: dict[str, subprocess.Popen] = {}

    def start_agent(self, host, *, skew: float = 0):
        skews_file = self.dir / "skew" / "skews.json"
        skews = json.loads(skews_file.read_text()) if skews_file.exists() else {}
        skews_file.write_text(json.dumps({**skews, host: skew}))
        env = {**os.environ, "ALLOT_CLOCK_SKEW": str(skew),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(self.dir / "skew"), os.environ.get("PYTHONPATH")]))}
        self.agents[host] = subprocess.Popen(
            rig_agent(self.server, host, self.dir, "--log-level", "INFO"),
            env=env, stdout=subprocess.DEVNULL, stderr=open(self.dir / f"{host}.log", "ab"),
        )

    def kill_agent(self, host):
        self.agents[host].send_signal(signal.SIGKILL)
        self.agents[host].wait()

    def agent_log(self, host) -> str:
        return (self.dir / f"{host}.log").read_text(errors="replace")

    def wait_for(self, condition, *, what, timeout=30.0):
        """Tick every half second until `condition()` holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run_tick(self.cluster)
            if condition():
                return
            time.sleep(0.5)
        logs = "\n".join(f"--- {host}:\n{self.agent_log(host)[-2000:]}" for host in self.agents)
        raise AssertionError(f"timed out waiting until {what}\n{logs}")

    def submit(self, *, gpus=2, seconds=8.0, every=0.5, exit_code=0, resumable=True, min_runtime=3600):
        return job_submit(user=get_user("alice"), request=JobRequest(
            cluster="lab", project="olmo", gpus=gpus, min_runtime=min_runtime, resumable=resumable,
            command=f"{sys.executable} {self.dir / 'job.py'} {seconds} {every} {exit_code}",
            env={"MARKS": str(self.dir / "marks"), "PYTHONPATH": str(self.dir / "skew")},
        ))

    def marks(self, job, run=0) -> list[dict]:
        path = self.dir / "marks" / f"job-{job.pk}-run-{run}"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def events(self, job, run=0) -> list[str]:
        return [mark["event"] for mark in self.marks(job, run)]


def make_lab(tmp_path, server_url, *, heartbeat_timeout: str) -> Lab:
    spec = {
        "name": "lab",
        "policy": {"tick": "1s", "grace_period": "3s", "unallocated_grace": "2s",
                   "heartbeat_timeout": heartbeat_timeout, "allow_root_jobs": os.geteuid() == 0},
        "domains": [{"name": "node-{:02d}", "count": len(HOSTS), "hosts": 1, "gpus_per_host": 4,
                     "gpu_type": "H100"}],
    }
    org = {"users": [{"username": "alice", "password": "alice-password", "posix_user": ME}],
           "units": [{"name": "olmo", "members": ["alice"], "share": {"lab": 100}}]}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "org.yaml").write_text(yaml.safe_dump(org))
    cluster, _ = load_cluster_file(tmp_path / "cluster.yaml")
    load_org_file(tmp_path / "org.yaml")
    for folder in ("marks", "skew"):
        (tmp_path / folder).mkdir()
    (tmp_path / "skew" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (tmp_path / "job.py").write_text(PROGRAM)
    return Lab(cluster, tmp_path, server_url)


@pytest.fixture
def lab_factory(tmp_path, live_server):
    labs = []

    def factory(*, heartbeat_timeout="6s", skews=None):
        lab = make_lab(tmp_path, live_server.url, heartbeat_timeout=heartbeat_timeout)
        for host in HOSTS:
            lab.start_agent(host, skew=(skews or {}).get(host, 0))
        lab.wait_for(lambda: Host.objects.filter(state=HostState.UP).count() == len(HOSTS),
                     what="every agent registers")
        labs.append(lab)
        return lab

    yield factory
    for lab in labs:
        for process in lab.agents.values():
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=10)
    listed = subprocess.run(["pgrep", "-f", str(tmp_path / "job.py")], capture_output=True, text=True).stdout
    for pid in listed.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    remove_cgroups(run_cgroup_parent())


def refreshed(job) -> Job:
    job.refresh_from_db()
    return job


def host_of(job) -> str:
    (host,) = {a.gpu.host.name for a in job.assignments.filter(released_at__isnull=True).select_related("gpu__host")}
    return host


def test_an_agent_killed_and_back_within_the_timeout_adopts_its_jobs_which_run_on_and_end_as_they_should(
    lab_factory,
):
    lab = lab_factory(heartbeat_timeout="6s")
    good = lab.submit(gpus=2, seconds=6, every=1)
    bad = lab.submit(gpus=2, seconds=6, every=1, exit_code=3)
    brief = lab.submit(gpus=2, seconds=2.5, every=0, exit_code=5)  # ends while no agent watches it
    jobs = (good, bad, brief)
    lab.wait_for(lambda: all(refreshed(job).state == JobState.RUNNING for job in jobs), what="the jobs run")
    hosts = {host_of(job) for job in jobs}
    pids = {job.pk: lab.marks(job)[0]["pid"] for job in jobs}

    for host in hosts:
        lab.kill_agent(host)
    killed = time.monotonic()
    deadline = killed + 4.0  # well inside the 6 s timeout
    while "done" not in lab.events(brief) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "done" in lab.events(brief), lab.events(brief)
    time.sleep(max(0.0, killed + 1.5 - time.monotonic()))
    for host in hosts:
        lab.start_agent(host)
    lab.wait_for(lambda: all(refreshed(job).state not in (JobState.RUNNING, JobState.STARTING) for job in jobs),
                 what="the jobs end", timeout=40)

    logs = "".join(lab.agent_log(host) for host in hosts)
    for job in (good, bad):
        assert f"adopted job {job.pk} rank 0" in logs
    for host in hosts:
        assert not HostEvent.objects.filter(host__name=host, kind=HostEvent.Kind.HEARTBEAT_LOST).exists()
        assert Host.objects.get(name=host).state == HostState.UP
    # The same processes ran to their end: one run each, no requeue, no second start.
    for job in (good, bad):
        assert (job.restarts, job.preemptions) == (0, 0)
        events = lab.events(job)
        assert events[0] == "start" and events[-1] == "done" and set(events[1:-1]) == {"checkpoint"}, events
        assert lab.marks(job)[0]["pid"] == pids[job.pk] and not lab.marks(job, run=1)
        assert not job.events.filter(kind__in=[EventKind.PREEMPT, EventKind.REQUEUE]).exists()
    # Their exit codes came through although the new agent is not their parent.
    assert (good.state, good.exit_code) == (JobState.COMPLETED, 0)
    assert (bad.state, bad.exit_code) == (JobState.FAILED, 3)
    assert "exit code 3" in bad.events.get(kind=EventKind.FAIL).detail
    assert good.last_checkpoint_at is not None
    # The job that ended while its agent was away: its exit came through with the adoption, and it was
    # not started a second time (the server still counted it running until the new agent told).
    assert (brief.state, brief.exit_code, brief.restarts) == (JobState.FAILED, 5, 0)
    assert lab.events(brief) == ["start", "done"] and lab.marks(brief)[0]["pid"] == pids[brief.pk]
    assert "exit code 5" in brief.events.get(kind=EventKind.FAIL).detail
    assert f"job {brief.pk} rank 0 ended while no agent watched (exit code 5)" in logs


def test_an_agent_back_after_the_timeout_finds_its_host_was_down_and_its_orphans_are_stopped(lab_factory):
    lab = lab_factory(heartbeat_timeout="4s")
    resumable = lab.submit(gpus=2, seconds=10, every=0.5)
    fragile = lab.submit(gpus=2, seconds=10, every=0.5, resumable=False)
    lab.wait_for(lambda: len(lab.marks(resumable)) >= 3 and len(lab.marks(fragile)) >= 3,
                 what="both jobs run and checkpoint")
    hosts = {host_of(resumable), host_of(fragile)}
    assert len(hosts) < len(HOSTS), "the resumable job needs a host to go to"
    lab.wait_for(lambda: refreshed(resumable).last_checkpoint_at is not None, what="a checkpoint is recorded")
    checkpointed = resumable.last_checkpoint_at

    for host in hosts:
        lab.kill_agent(host)
    lab.wait_for(lambda: all(Host.objects.get(name=h).state == HostState.DOWN for h in hosts),
                 what="the silent hosts go down", timeout=20)
    # The resumable job is requeued and resumes elsewhere from its checkpoint; the other fails, saying why.
    lab.wait_for(lambda: lab.marks(resumable, run=1), what="the resumable job runs again", timeout=30)
    resumed = lab.marks(resumable, run=1)[0]
    assert resumed["resumed_at_step"] >= 2
    assert host_of(refreshed(resumable)) not in hosts and resumable.restarts == 1
    assert resumable.events.filter(kind=EventKind.REQUEUE).exists()
    assert checkpointed <= resumable.last_checkpoint_at
    assert (refreshed(fragile).state, fragile.restarts) == (JobState.FAILED, 0)
    (down_host,) = {host_of_run(fragile)}
    lost = fragile.events.get(kind=EventKind.PREEMPT)
    assert lost.cause == f"down:{down_host}" and f"host {down_host} is down" in lost.detail
    assert f"down:{down_host}" in fragile.events.get(kind=EventKind.FAIL).detail
    assert Host.objects.get(name=down_host).state_reason.startswith("no heartbeat for")

    # The agents return: they adopt what still runs of the old runs, the hosts come back, and the server
    # has those orphans stopped at once; the resumable job's new run goes on and finishes.
    for host in hosts:
        lab.start_agent(host)
    lab.wait_for(lambda: "SIGTERM" in lab.events(resumable) and "SIGTERM" in lab.events(fragile),
                 what="the orphans of the old runs are stopped", timeout=20)
    assert all(Host.objects.get(name=h).state == HostState.UP for h in hosts)
    assert "done" not in lab.events(fragile)
    lab.wait_for(lambda: refreshed(resumable).state == JobState.COMPLETED, what="the resumed job completes",
                 timeout=40)
    assert "done" in lab.events(resumable, run=1) and resumable.restarts == 1
    assert refreshed(fragile).state == JobState.FAILED


def host_of_run(job) -> str:
    (host,) = {p.host.name for p in job.processes.filter(run=0).select_related("host")}
    return host


def test_agent_clocks_off_by_half_the_heartbeat_timeout_change_nothing(lab_factory):
    # Host 1 runs 10 s ahead of the server, host 2 10 s behind; the timeout is 20 s.
    lab = lab_factory(heartbeat_timeout="20s", skews={HOSTS[0]: 10.0, HOSTS[1]: -10.0})
    Host.objects.get(name=HOSTS[2]).set_state(HostState.CORDONED, actor="test", reason="keep the jobs on 1 and 2")
    jobs = [lab.submit(gpus=4, seconds=7, every=1.5) for _ in range(2)]
    lab.wait_for(lambda: all(refreshed(job).state == JobState.RUNNING for job in jobs), what="both jobs run")
    assert {host_of(job) for job in jobs} == {HOSTS[0], HOSTS[1]}
    deadline = time.monotonic() + 40
    while not all(refreshed(job).state == JobState.COMPLETED for job in jobs):
        assert time.monotonic() < deadline, [refreshed(job).state for job in jobs]
        run_tick(lab.cluster)
        now = timezone.now()
        for job in jobs:
            # Never in the future of the server's clock.
            assert job.last_checkpoint_at is None or job.last_checkpoint_at <= now, (job.last_checkpoint_at, now)
        time.sleep(0.5)

    assert not HostEvent.objects.filter(kind=HostEvent.Kind.HEARTBEAT_LOST).exists()
    assert Host.objects.filter(state=HostState.UP).count() == len(HOSTS) - 1  # the cordoned one aside
    for job in jobs:
        assert (job.restarts, job.preemptions, job.exit_code) == (0, 0, 0)
        # The last checkpoint is recorded at the moment it happened (in the server's clock), not 10 s off:
        # the agent tells file times in the server's clock.
        last = [mark for mark in lab.marks(job) if mark["event"] == "checkpoint"][-1]
        assert abs(job.last_checkpoint_at.timestamp() - last["at"]) < 2.0, (
            host_of_run(job), job.last_checkpoint_at, last["at"])

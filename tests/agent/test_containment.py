"""Each rank in its own cgroup: stopped whole, its exit told only when the cgroup is empty, its memory
request its limit. Real agents as root on this machine's cgroup hierarchy (v2 or v1)."""

import os
import time
from pathlib import Path

import pytest

from client.cgroups import detect
from scheduler.models import Job, JobProcess
from scheduler.services import job_cancel
from scheduler.tick import run_tick
from tests.agent.conftest import HOST, PYTHON
from tests.conftest import get_user

pytestmark = pytest.mark.django_db(transaction=True)

# Leaves two processes behind that no process group or session of the job holds: one in a new session
# (setsid) and one double-forked, both ignoring SIGTERM; their pids go to the marks folder.
ESCAPER = """
import os, signal, sys, time
marks = sys.argv[1]
def escape(name, new_session):
    if os.fork() == 0:
        if new_session:
            os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            with open(os.path.join(marks, name), "w") as handle:
                handle.write(str(os.getpid()))
            while True:
                time.sleep(0.2)
        os._exit(0)
    os.wait()
escape("setsid", True)
escape("double-fork", False)
print("escaped", flush=True)
time.sleep(float(sys.argv[2]))
"""


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def escaped_pids(marks: Path) -> list[int]:
    pids = [int((marks / name).read_text()) for name in ("setsid", "double-fork") if (marks / name).exists()]
    return pids if len(pids) == 2 else []


def marks_dir(lab, account) -> Path:
    path = lab.base / f"marks-{account.name}"
    path.mkdir(exist_ok=True)
    os.chown(path, account.uid, account.gid)
    return path


def test_a_stopped_job_is_stopped_whole_and_its_exit_told_only_when_its_cgroup_is_empty(make_lab, accounts):
    lab = make_lab()
    marks = marks_dir(lab, accounts[0])
    job = lab.submit(f"{PYTHON} {lab.program('escape.py', ESCAPER)} {marks} 600")
    pids = lab.wait_for(lambda: escaped_pids(marks), what="the job leaves two processes behind")
    assert all(alive(pid) for pid in pids)
    # One left the job's session (and process group), the other its parent: neither left its cgroup.
    process = lab.wait_for(lambda: JobProcess.objects.filter(job=job, pid__isnull=False).first(),
                           what="the agent reports the job's pid")
    setsid, double_forked = pids
    assert os.getsid(setsid) != os.getsid(process.pid) and os.getpgid(setsid) != os.getpgid(process.pid)
    parent = int(Path(f"/proc/{double_forked}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert parent != process.pid
    containment = detect(host=HOST, privileged=True, parent=lab.cgroup_parent)
    group = containment.group(f"job-{job.pk}-run-0-rank-0")
    assert set(pids) <= set(group.pids())

    cancelled_at = time.monotonic()
    job_cancel(job=job, actor=get_user("ann"), reason="test")
    seen_alive_after_term = False
    while Job.objects.get(pk=job.pk).state != "cancelled":
        assert time.monotonic() - cancelled_at < 30, lab.log()[-3000:]
        run_tick(lab.cluster)
        seen_alive_after_term |= all(alive(pid) for pid in pids)
        time.sleep(0.2)
    # They ignored SIGTERM, so they lived through the grace period; the exit came only after SIGKILL took them.
    assert seen_alive_after_term
    assert not any(alive(pid) for pid in pids)
    assert time.monotonic() - cancelled_at >= lab.cluster.grace_period_seconds * 0.9
    assert not group.exists(), "the agent removes the rank's cgroup once it is empty"
    process.refresh_from_db()
    assert process.state == "exited"


def test_what_a_finished_command_leaves_behind_is_killed_before_the_job_completes(make_lab, accounts):
    lab = make_lab()
    marks = marks_dir(lab, accounts[0])
    job = lab.submit(f"{PYTHON} {lab.program('escape.py', ESCAPER)} {marks} 0")
    lab.wait_for(lambda: Job.objects.get(pk=job.pk).state == "completed", what="the job completes")
    pids = escaped_pids(marks)
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)
    assert Job.objects.get(pk=job.pk).exit_code == 0


def test_a_job_over_its_memory_request_is_oom_killed_and_reported_so(make_lab, accounts):
    lab = make_lab()
    if not detect(host=HOST, privileged=True).limits_memory:
        pytest.skip("no memory controller on this machine")
    hog = lab.program("hog.py", """
chunks = []
for step in range(48):  # 48 × 64 MiB = 3 GiB, against a 1 GiB request
    chunks.append(bytearray(64 * 1024 * 1024))
    print("allocated", (step + 1) * 64, "MiB", flush=True)
print("survived")
""")
    job = lab.submit(f"{PYTHON} {hog}", memory_gib=1)
    lab.wait_for(lambda: Job.objects.get(pk=job.pk).state == "failed", what="the job fails", timeout=60)
    job.refresh_from_db()
    process = JobProcess.objects.get(job=job)
    assert "survived" not in process.output_tail and "allocated 960 MiB" in process.output_tail
    assert job.failure_reason == (f"rank 0 out of memory on {HOST}: killed by the kernel at its memory limit of "
                                  "1024 MiB")
    assert process.error == job.failure_reason and job.exit_code == 137
    assert job.events.get(kind="fail").detail == f"failed: {job.failure_reason}, exit code 137"

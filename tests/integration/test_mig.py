"""MIG through the database: constraints, the tick's writer, the snapshot and the cluster file.

The demo cluster's hgx-08-h01 (H100, outside the fast lane) gets GPUs in MIG
mode; jobs go through `job_submit` and `run_tick` as in production.
"""

import pytest
import yaml
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from scheduler import core
from scheduler.choices import JobState
from scheduler.models import GpuAssignment, Job
from scheduler.services import JobRequest, job_cancel, job_end_run, job_submit
from scheduler.snapshot import build_snapshot
from scheduler.tick import apply_decisions, run_tick
from tests.conftest import DEMO, get_user
from tests.factories import make_job
from topology.loaders import load_cluster_file
from topology.models import Gpu, Host, HostEvent, MigInstance
from topology.spec import LoadError, parse_cluster

pytestmark = pytest.mark.django_db

HOST = "hgx-08-h01"


def enable_mig(*indices: int, host: str = HOST) -> None:
    Gpu.objects.filter(host__name=host, index__in=indices).update(mig_enabled=True)


def submit_mig(profile: str, *, user="alice", project="olmo", min_runtime=3600, **fields) -> Job:
    return job_submit(user=get_user(user), request=JobRequest(
        cluster="gb200-east", project=project, gpus=1, min_runtime=min_runtime, resumable=True,
        command="python serve.py", mig_profile=profile, **fields,
    ))


def layout(index: int, host: str = HOST) -> tuple:
    return Gpu.objects.get(host__name=host, index=index).mig_layout()


def instance_of(job: Job) -> tuple[str, int, int]:
    assignment = job.assignments.select_related("gpu", "mig_instance").get(released_at__isnull=True)
    return assignment.gpu.index, assignment.mig_instance.profile, assignment.mig_instance.start


# ---------------------------------------------------------------- the database's own rules


def test_no_instance_is_held_by_two_live_jobs(demo):
    enable_mig(0)
    gpu = Gpu.objects.get(host__name=HOST, index=0)
    instance = MigInstance.objects.create(gpu=gpu, profile="3g.40gb", start=0)
    first = make_job(gpus=1, mig_profile="3g.40gb")
    second = make_job(gpus=1, mig_profile="3g.40gb", project="tulu", user="carol")
    GpuAssignment.objects.create(job=first, gpu=gpu, milli=428, mig_instance=instance)
    with pytest.raises(IntegrityError), transaction.atomic():
        GpuAssignment.objects.create(job=second, gpu=gpu, milli=428, mig_instance=instance)
    # Released, the instance can be held again; the history stays.
    GpuAssignment.objects.filter(job=first).update(released_at=timezone.now())
    GpuAssignment.objects.create(job=second, gpu=gpu, milli=428, mig_instance=instance)
    assert instance.assignments.count() == 2


def test_live_instances_of_a_gpu_never_share_a_start_slot_and_follow_the_geometry(demo):
    gpu = Gpu.objects.get(host__name=HOST, index=0)
    first = MigInstance.objects.create(gpu=gpu, profile="1g.10gb", start=3)
    with pytest.raises(IntegrityError), transaction.atomic():
        MigInstance.objects.create(gpu=gpu, profile="2g.20gb", start=3)
    for profile, start in (("5g.50gb", 0), ("1g.10gb", 7)):
        with pytest.raises(IntegrityError), transaction.atomic():
            MigInstance.objects.create(gpu=gpu, profile=profile, start=start)
    MigInstance.objects.filter(pk=first.pk).update(destroyed_at=timezone.now())
    MigInstance.objects.create(gpu=gpu, profile="2g.20gb", start=3)


def test_a_mig_job_is_one_whole_gpu_request(demo):
    for fields in ({"gpus": 2}, {"milli": 500}):
        with pytest.raises(IntegrityError), transaction.atomic():
            make_job(mig_profile="1g.10gb", **fields)


def test_instances_never_commit_more_than_the_gpus_seven_compute_slices(demo):
    gpu = Gpu.objects.get(host__name=HOST, index=0)
    Gpu.objects.filter(pk=gpu.pk).update(allocated_milli=7 * 142)  # seven 1g instances
    with pytest.raises(IntegrityError), transaction.atomic():
        Gpu.objects.filter(pk=gpu.pk).update(allocated_milli=F("allocated_milli") + 142)


# ---------------------------------------------------------------- the tick


def test_a_tick_lays_out_an_empty_mig_gpu_for_the_demand_and_starts_every_job_on_it(demo):
    enable_mig(0)
    jobs = [submit_mig("1g.10gb") for _ in range(3)] + [submit_mig("3g.40gb")]
    result = run_tick(demo)
    assert result.started == 4 and not result.skipped
    assert layout(0) == (("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2), ("3g.40gb", 4))
    held = sorted(instance_of(job) for job in jobs)
    assert held == [(0, "1g.10gb", 0), (0, "1g.10gb", 1), (0, "1g.10gb", 2), (0, "3g.40gb", 4)]
    gpu = Gpu.objects.get(host__name=HOST, index=0)
    assert gpu.allocated_milli == 3 * 142 + 428
    for job in jobs:
        job.refresh_from_db()
        assert job.state == JobState.RUNNING
        start = job.events.get(kind="start")
        assert start.detail.startswith(f"{HOST}:0/") and start.cause.startswith("MIG:")
    event = HostEvent.objects.filter(host__name=HOST, kind="inventory").latest("at")
    assert "GPU 0 MIG layout: 1g.10gb@0, 1g.10gb@1, 1g.10gb@2, 3g.40gb@4 (was (no instances))" in event.detail
    # No other GPU of the cluster was touched: whole-GPU capacity stays whole.
    assert not GpuAssignment.objects.exclude(gpu=gpu).exists()


def test_the_snapshot_carries_mig_gpus_and_who_holds_each_instance(demo):
    enable_mig(0, 1)
    job = submit_mig("2g.20gb")
    run_tick(demo)
    snapshot = build_snapshot(demo).snapshot
    host = next(h for h in snapshot.topology.hosts if h.name == HOST)
    assert host.mig == (core.MigGpu(f"{HOST}:0", (("2g.20gb", 4),)), core.MigGpu(f"{HOST}:1", ()))
    (running,) = snapshot.running
    assert (running.id, running.mig_profile, running.mig_start, running.gpu_milli) == (str(job.pk), "2g.20gb", 4, 285)


def test_an_ended_jobs_instance_is_reused_and_a_gpu_with_jobs_is_never_repartitioned(demo):
    enable_mig(0)
    first, second = submit_mig("4g.40gb"), submit_mig("1g.10gb")
    run_tick(demo)
    assert layout(0) == (("4g.40gb", 0), ("1g.10gb", 6))
    job_end_run(job=first, outcome="exited", exit_code=0, at=timezone.now(), actor="test")
    # A 7g.80gb cannot start: the GPU still runs the 1g job, so its layout stays.
    big = submit_mig("7g.80gb")
    run_tick(demo)
    big.refresh_from_db()
    assert big.state == JobState.PENDING and "needs a 7g.80gb MIG instance" in big.pending_reason
    assert layout(0) == (("4g.40gb", 0), ("1g.10gb", 6))
    # The idle 4g instance serves the next 4g job as it is.
    again = submit_mig("4g.40gb", project="tulu", user="carol")
    run_tick(demo)
    assert instance_of(again) == (0, "4g.40gb", 0)
    # Once the GPU is empty it is laid out anew for the 7g job; the old instances are kept as history.
    for job in (second, again):
        job_end_run(job=job, outcome="exited", exit_code=0, at=timezone.now(), actor="test")
    run_tick(demo)
    assert instance_of(big) == (0, "7g.80gb", 0) and layout(0) == (("7g.80gb", 0),)
    assert MigInstance.objects.filter(gpu__host__name=HOST, destroyed_at__isnull=False).count() == 2


def test_the_writer_refuses_to_destroy_an_instance_a_job_holds(demo):
    enable_mig(0)
    job = submit_mig("1g.10gb")
    run_tick(demo)
    tick_input = build_snapshot(demo)
    decisions = core.Decisions(mig_layouts=(core.MigLayout(f"{HOST}:0", (("7g.80gb", 0),), "a bad decision"),))
    with pytest.raises(IntegrityError):
        apply_decisions(demo, tick_input, decisions)
    assert instance_of(job) == (0, "1g.10gb", 6)


def test_whole_gpu_jobs_and_fractions_never_land_on_mig_gpus(demo):
    enable_mig(*range(8))
    whole = job_submit(user=get_user("alice"), request=JobRequest(
        cluster="gb200-east", project="olmo", gpus=8, min_runtime=3600, resumable=True, command="x",
        gpu_type="H100"))
    half = job_submit(user=get_user("alice"), request=JobRequest(
        cluster="gb200-east", project="olmo", gpus=1, gpu_milli=500, min_runtime=3600, resumable=True,
        command="x", gpu_type="H100"))
    run_tick(demo)
    for job in (whole, half):
        assert not job.assignments.filter(gpu__host__name=HOST).exists()


def test_a_cancelled_mig_job_frees_its_instance(demo):
    enable_mig(0)
    job = submit_mig("1g.10gb", min_runtime=0)
    run_tick(demo)
    job_cancel(job=job, actor=get_user("alice"))
    run_tick(demo)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert Gpu.objects.get(host__name=HOST, index=0).allocated_milli == 0
    assert layout(0) == (("1g.10gb", 6),)  # idle, kept for the next one


# ---------------------------------------------------------------- the cluster file

CLUSTER = {
    "name": "lab",
    "policy": {"executor": "simulated"},
    "domains": [
        {"name": "a100-{:02d}", "count": 2, "hosts": 1, "gpus_per_host": 4, "gpu_type": "A100", "mig": [0, 1]},
        {"name": "h100-{:02d}", "count": 1, "hosts": 1, "gpus_per_host": 8, "gpu_type": "H100"},
    ],
    "mig_hosts": {"h100-01-h01": True},
}


def load(tmp_path, data) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    load_cluster_file(path)


def mig_map() -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for host, index in Gpu.objects.filter(mig_enabled=True).order_by("host__name", "index").values_list(
            "host__name", "index"):
        found.setdefault(host, []).append(index)
    return found


def test_the_cluster_file_marks_gpus_and_hosts_mig_enabled(db, tmp_path):
    load(tmp_path, CLUSTER)
    assert mig_map() == {"a100-01-h01": [0, 1], "a100-02-h01": [0, 1], "h100-01-h01": list(range(8))}
    # Loading again changes nothing; a changed file moves GPUs in and out of MIG mode.
    load(tmp_path, CLUSTER)
    changed = {**CLUSTER, "mig_hosts": {"a100-02-h01": [3]}}
    load(tmp_path, changed)
    assert mig_map() == {"a100-01-h01": [0, 1], "a100-02-h01": [3]}


@pytest.mark.parametrize(("change", "message"), [
    ({"mig": [0, 4]}, "domains[0] (a100-{:02d}).mig: GPU indices 4 are not between 0 and 3"),
    ({"mig": "yes"}, "domains[0] (a100-{:02d}).mig: 'yes' must be true (every GPU in MIG mode) or a list"),
    ({"mig": [1, 1]}, "domains[0] (a100-{:02d}).mig: a GPU index is listed twice"),
    ({"gpu_type": "GB200", "mig": True}, "domains[0] (a100-{:02d}).mig: MIG follows the 80 GB A100/H100 geometry"),
])
def test_a_bad_mig_entry_is_refused_naming_the_field(db, change, message):
    data = {**CLUSTER, "domains": [{**CLUSTER["domains"][0], **change}, CLUSTER["domains"][1]]}
    with pytest.raises(LoadError) as error:
        parse_cluster(data)
    assert any(problem.startswith(message) for problem in error.value.problems), error.value.problems


def test_mig_hosts_must_name_hosts_of_the_cluster(db):
    with pytest.raises(LoadError) as error:
        parse_cluster({**CLUSTER, "mig_hosts": {"nowhere-h01": True}})
    assert "mig_hosts.nowhere-h01: not a host of this cluster" in error.value.problems


def test_mig_mode_does_not_change_under_a_running_job(demo, tmp_path):
    data = yaml.safe_load((DEMO / "cluster.yaml").read_text())
    make_job(gpus=1, gpu_ids=[f"{HOST}:2"])
    data["mig_hosts"] = {HOST: [2, 3]}
    with pytest.raises(LoadError) as error:
        load(tmp_path, data)
    assert f"host {HOST} GPU 2 runs a job; its MIG mode cannot change until it is drained" in error.value.problems
    assert mig_map() == {}


def test_leaving_mig_mode_destroys_the_idle_instances(demo, tmp_path):
    data = yaml.safe_load((DEMO / "cluster.yaml").read_text())
    data["mig_hosts"] = {HOST: [0]}
    load(tmp_path, data)
    MigInstance.objects.create(gpu=Gpu.objects.get(host__name=HOST, index=0), profile="7g.80gb", start=0)
    del data["mig_hosts"]
    load(tmp_path, data)
    assert mig_map() == {} and layout(0) == ()
    assert Host.objects.get(name=HOST).gpus.filter(mig_enabled=True).count() == 0


# ---------------------------------------------------------------- pages


def test_the_host_rack_job_and_queue_pages_show_mig(demo, client):
    enable_mig(0, 1)
    job = submit_mig("3g.40gb")
    run_tick(demo)
    client.force_login(get_user("alice"))
    host_page = client.get(f"/hosts/{HOST}/").content.decode()
    assert f"MIG mode: 3g.40gb@{instance_of(job)[2]} " in host_page and f"/jobs/{job.pk}/" in host_page
    assert "no instances yet" in host_page  # GPU 1: in MIG mode, not laid out yet
    rack = client.get("/clusters/gb200-east/domains/hgx-08/").content.decode()
    assert f'data-mig="3g.40gb@{instance_of(job)[2]} job {job.pk}"' in rack and 'data-mig="no instances yet"' in rack
    job_page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'as a <span data-testid="mig-profile">3g.40gb</span> MIG instance' in job_page
    assert f"{HOST}:0/3g.40gb@" in job_page
    queue = client.get("/clusters/gb200-east/queue/").content.decode()
    assert "MIG 3g.40gb" in queue


def test_the_simulator_reads_a_cluster_file_with_mig_gpus_and_keeps_whole_jobs_off_them(db):
    from scheduler.sim.engine import simulate
    from scheduler.sim.inputs import load
    from scheduler.sim.policies import decision_function
    from scheduler.sim.workload import SimJob

    cluster, units = load(CLUSTER, {"units": [{"name": "olmo", "share": {"lab": 100}}]})
    mig_gpus = {m.gpu for h in cluster.topology.hosts for m in h.mig}
    assert len(mig_gpus) == 12  # 2 + 2 A100s, 8 H100s
    jobs = [SimJob(f"j{i}", i, "olmo", 2, 600, True, 3600, seq=i) for i in range(4)]
    result = simulate(cluster, units, jobs, decide=decision_function("allot"), policy_name="allot")
    starts = [e for e in result.events if e[2] == "start"]
    assert len(starts) == 4
    assert not {gpu for event in starts for gpu in event[3].split()} & mig_gpus

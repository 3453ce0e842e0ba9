"""The budget what-if: inputs from the live database, both simulations, the cache, the task, the page and its rules.

The state is `tests.scenarios.busy_week` on the demo: a week of finished runs, three running jobs, a queue.
alice (member of olmo) asks for olmo 55 % → 80 % of nlp; pat (manager of nlp) decides.
"""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.utils import timezone

from budgets.choices import RequestStatus, WhatIfStatus
from budgets.models import BudgetRequest, Unit, WhatIf
from budgets.services import budget_request_create, budget_request_deny
from operations.tasks import run_what_if
from operations.whatif import (
    DEFAULT_DURATION,
    HORIZON,
    QUEUED,
    REPLAYED,
    RUNNING,
    build_inputs,
    simulate_both,
    what_if_request,
    what_if_submit,
)
from scheduler.models import Job
from tests.conftest import get_user
from tests.factories import make_job
from tests.scenarios import busy_week, finished_job
from topology.models import Cluster

pytestmark = pytest.mark.django_db

HOUR = 3600
# A fixed moment, so the cache's hour and every offset are known: after the demo's shares begin (when it loads).
NOW = (datetime.now(UTC) + timedelta(days=1)).replace(hour=12, minute=30, second=0, microsecond=0)


@pytest.fixture
def clock():
    with time_machine.travel(NOW, tick=False):
        yield NOW


@pytest.fixture
def week(demo, clock):
    busy_week(clock)
    return clock


@pytest.fixture
def ask(demo):
    def make(share=80, unit="olmo", username="alice"):
        return budget_request_create(user=get_user(username), unit=Unit.objects.get(name=unit),
                                     cluster=Cluster.objects.get(), share=share, justification="long-context runs")
    return make


def by_id(inputs):
    return by_id_of(inputs.jobs)


def by_id_of(jobs):
    return {job.id: job for job in jobs}


def unit_row(results, name):
    return next(row for row in results["units"] if row["unit"] == name)


def without_wall_time(results):
    return {**results, "cluster": {side: {k: v for k, v in values.items() if k != "wall_seconds"}
                                   for side, values in results["cluster"].items()}}


# ---------------------------------------------------------------- inputs


def test_it_replays_the_last_weeks_submissions_a_week_later_with_what_they_ran(week, ask):
    inputs = build_inputs(ask(), share=Decimal(80), now=week)
    jobs = by_id(inputs)
    replayed = sorted((job for job in jobs.values() if job.id.startswith(REPLAYED)), key=lambda j: j.submit)
    assert len(replayed) == Job.objects.filter(submitted_at__gte=week - timedelta(days=7)).count() == 36
    first = Job.objects.filter(project__name="olmo", state="completed").order_by("submitted_at").first()
    copy = jobs[f"{REPLAYED}{first.pk}"]
    # Submitted 6 days 2 h 5 min ago: it arrives 6 days 2 h 5 min after the start of the simulated week.
    assert copy.submit == (first.submitted_at - (week - timedelta(days=7))).total_seconds() == (HOUR * 22 - 300)
    assert (copy.project, copy.gpus, copy.min_runtime, copy.resumable, copy.duration) == ("olmo", 8, 3600, True,
                                                                                          3 * HOUR)
    assert all(0 <= job.submit < HORIZON for job in replayed)
    # The control run: the same arrivals 5 minutes later (within the week); the queue as it is.
    control = by_id_of(inputs.control_jobs)
    assert control[copy.id].submit == copy.submit + 300 and control[copy.id].duration == copy.duration
    assert {job.id for job in inputs.control_jobs} == set(jobs)
    # A job still waiting runs its maximum runtime; one without runs its project's median finished duration.
    waiting = Job.objects.filter(project__name="tulu", state="pending").order_by("pk").first()
    assert jobs[f"{REPLAYED}{waiting.pk}"].duration == 2 * HOUR
    olmo_waiting = Job.objects.filter(project__name="olmo", state="pending").order_by("pk").first()
    assert jobs[f"{REPLAYED}{olmo_waiting.pk}"].duration == 8 * HOUR
    arrivals = inputs.assumptions["arrivals"]
    assert (arrivals["submitted"], arrivals["replayable"], arrivals["replayed"]) == (36, 36, 36)


def test_it_starts_from_the_running_jobs_and_the_queue(week, ask):
    inputs = build_inputs(ask(), share=Decimal(80), now=week)
    runs = {run.job.id: run for run in inputs.initial.running}
    olmo = Job.objects.get(project__name="olmo", state="running")
    run = runs[f"{RUNNING}{olmo.pk}"]
    assert run.start == -HOUR and len(run.gpu_ids) == 32 and run.gpu_ids[0] == "nvl72-01-h01:0"
    assert run.job.duration == 12 * HOUR  # its maximum runtime, counted from its start
    assert run.job.submit == -2 * HOUR and run.job.min_runtime == 3600
    molmo = Job.objects.get(project__name="molmo", state="running")
    # No maximum runtime: molmo's finished jobs ran 6 h, it has run 3: 3 h left.
    assert runs[f"{RUNNING}{molmo.pk}"].job.duration == 6 * HOUR
    queued = [job for job in inputs.jobs if job.id.startswith(QUEUED)]
    assert len(queued) == Job.objects.filter(state="pending").count() == 9
    first = min(queued, key=lambda job: job.submit)
    assert first.submit == -50 * 60 and first.project == "olmo" and first.gpus == 16  # its real submit time
    assert inputs.assumptions["running_jobs"] == 3 and inputs.assumptions["pending_jobs"] == 9


def test_a_running_job_past_its_estimate_needs_one_more(demo, clock, ask):
    finished_job(project="tulu", gpus=8, on_hosts=["hgx-03-h01"], started=clock - timedelta(days=1), hours=2)
    long = make_job(project="tulu", gpus=8, on_hosts=["hgx-01-h01"], started=clock - timedelta(hours=5))
    inputs = build_inputs(ask(unit="olmo"), share=Decimal(80), now=clock)
    run = next(run for run in inputs.initial.running if run.job.id == f"{RUNNING}{long.pk}")
    assert run.job.duration == 5 * HOUR + 2 * HOUR


def test_it_uses_the_default_duration_when_nothing_has_finished(demo, clock, ask):
    make_job(project="olmo", gpus=8, submitted_at=clock - timedelta(minutes=1))
    inputs = build_inputs(ask(), share=Decimal(80), now=clock)
    assert {job.duration for job in inputs.jobs} == {DEFAULT_DURATION}
    assert inputs.assumptions["durations"]["default"] == 2  # queued and replayed


def test_only_the_requesting_units_share_changes(week, ask):
    inputs = build_inputs(ask(), share=Decimal("80.5"), now=week)
    before = {unit.name: unit.share for unit in inputs.without}
    after = {unit.name: unit.share for unit in inputs.with_change}
    assert before["olmo"] == 55 and after["olmo"] == 80.5
    assert {k: v for k, v in before.items() if k != "olmo"} == {k: v for k, v in after.items() if k != "olmo"}
    assert inputs.affected == (("olmo", "requesting"), ("safety", "sibling"), ("tulu", "sibling"), ("nlp", "parent"))
    assert inputs.assumptions["shares"]["children_total_with"] == 125.5
    assert any("over 100 %" in note for note in inputs.assumptions["notes"])


def test_the_windows_ended_runs_are_the_usage_history(week, ask):
    inputs = build_inputs(ask(), share=Decimal(80), now=week)
    history = inputs.initial.history
    assert len(history) == 24  # 6 days × 4 projects
    olmo = sorted((i for i in history if i.project == "olmo"), key=lambda i: i.start)
    assert (olmo[0].gpus, olmo[0].start, olmo[0].end, olmo[0].allocated) == (
        8, -(6 * 24 + 2) * HOUR, -(6 * 24 - 1) * HOUR, True)
    assert all(unit.allocated_usage == 0 for unit in inputs.without)  # it slides out as the week goes on


def test_every_arrival_and_every_pending_job_is_replayed_however_many(week, ask):
    """No thinning: a week of 1,200 more submissions, all still waiting, is replayed whole, each as it was."""
    cluster, olmo, alice = Cluster.objects.get(), Unit.objects.get(name="olmo"), get_user("alice")
    Job.objects.bulk_create([
        Job(cluster=cluster, project=olmo, user=alice, gpus=1, min_runtime=600, resumable=True, max_runtime=1800,
            submitted_at=week - timedelta(days=6, seconds=-n * 300))
        for n in range(1200)
    ])
    inputs = build_inputs(ask(), share=Decimal(80), now=week)
    arrivals = inputs.assumptions["arrivals"]
    assert arrivals["replayable"] == arrivals["replayed"] == 1236
    assert inputs.assumptions["pending_jobs"] == 1209 and inputs.assumptions["pending_jobs_left_out"] == 0
    assert sum(job.id.startswith(QUEUED) for job in inputs.jobs) == 1209
    replayed = [job for job in inputs.jobs if job.id.startswith(REPLAYED) and job.gpus == 1]
    assert len(replayed) == 1200 and {job.duration for job in replayed} == {1800}
    assert not any("replayed (" in note or "oldest" in note for note in inputs.assumptions["notes"])


# ---------------------------------------------------------------- results


def test_a_larger_share_raises_the_entitlement_and_lowers_the_usage_ratio(week, ask):
    inputs = build_inputs(ask(), share=Decimal(80), now=week)
    results = simulate_both(inputs)
    olmo = unit_row(results, "olmo")
    assert olmo["without"]["share"] == 55 and olmo["with"]["share"] == 80
    assert olmo["with"]["entitled_gpu_hours"] == pytest.approx(olmo["without"]["entitled_gpu_hours"] * 80 / 55,
                                                               rel=1e-3)
    assert olmo["without"]["used_gpu_hours"] > 0 and olmo["without"]["wait_p90"] is not None
    assert olmo["with"]["usage_ratio"] < olmo["without"]["usage_ratio"]
    # Siblings and parent keep their entitlement (the siblings keep their shares).
    for name in ("tulu", "safety", "nlp"):
        row = unit_row(results, name)
        assert row["with"]["entitled_gpu_hours"] == row["without"]["entitled_gpu_hours"]
        assert row["without"]["usage_ratio"] is not None
    cluster = results["cluster"]
    assert 0 < cluster["without"]["occupancy"] <= 1 and 0 < cluster["with"]["occupancy"] <= 1
    # The control run: the side without the change again, arrivals 5 minutes later.
    assert results["control_shift_seconds"] == 300
    assert all(value >= 0 for row in results["units"] for value in row["noise"].values() if value is not None)


def test_on_a_full_cluster_the_larger_share_moves_gpu_hours_from_the_siblings(demo, clock, ask):
    """Everyone queues more than the cluster holds for the whole week. With olmo at 90 % of nlp instead of 55 %
    (nlp's children then hold 135 %), olmo gets more of nlp's GPU-hours and its siblings fewer; nlp as a whole
    gets the same, so every child of nlp ends at a lower usage ratio."""
    for project, user in (("olmo", "alice"), ("tulu", "carol"), ("safety", "erin"), ("molmo", "dan")):
        for n in range(40):  # 40 × 32 GPUs × 24 h: half the cluster's week, for each of the four
            make_job(project=project, user=user, gpus=32, max_runtime=24 * HOUR,
                     submitted_at=clock - timedelta(minutes=60 - n))
    results = simulate_both(build_inputs(ask(share=90), share=Decimal(90), now=clock), control=False)
    olmo, nlp = unit_row(results, "olmo"), unit_row(results, "nlp")
    assert olmo["with"]["used_gpu_hours"] > olmo["without"]["used_gpu_hours"] * 1.15
    for sibling in ("tulu", "safety"):
        row = unit_row(results, sibling)
        assert row["with"]["used_gpu_hours"] < row["without"]["used_gpu_hours"] * 0.85
        assert row["with"]["usage_ratio"] < row["without"]["usage_ratio"]
    assert olmo["with"]["usage_ratio"] < olmo["without"]["usage_ratio"]
    assert nlp["with"]["used_gpu_hours"] == pytest.approx(nlp["without"]["used_gpu_hours"], rel=0.02)
    assert results["cluster"]["without"]["occupancy"] > 0.8


def test_same_database_same_results(week, ask):
    budget_request = ask()
    first = simulate_both(build_inputs(budget_request, share=Decimal(80), now=week))
    second = simulate_both(build_inputs(budget_request, share=Decimal(80), now=week))
    assert without_wall_time(first) == without_wall_time(second)


# ---------------------------------------------------------------- workflow: cache, task, failures


def test_a_click_runs_it_in_process_and_records_who_and_why(week, ask):
    budget_request = ask()
    found, created = what_if_submit(budget_request=budget_request, user=get_user("pat"))
    assert created and found.status == WhatIfStatus.DONE
    assert found.requested_by.username == "pat" and found.share_percent == Decimal(80)
    assert [(entry["status"], entry["actor"]) for entry in found.log] == [
        ("queued", "pat"), ("running", "system:what-if"), ("done", "system:what-if")]
    assert found.started_at == found.finished_at == week  # the clock stands still in this test
    assert found.assumptions["snapshot_at"] == week.isoformat() and found.assumptions["horizon_days"] == 7
    assert [row["unit"] for row in found.results["units"]] == ["olmo", "safety", "tulu", "nlp"]
    assert found.snapshot_hour == week.replace(minute=0) and found.state_key.startswith(f"80.00|{week:%Y%m%d}T12|")


def test_a_second_click_in_the_same_state_shows_the_cached_result(week, ask):
    budget_request = ask()
    first, _ = what_if_submit(budget_request=budget_request, user=get_user("pat"))
    again, created = what_if_submit(budget_request=budget_request, user=get_user("alice"))
    assert (again.pk, created) == (first.pk, False) and WhatIf.objects.count() == 1
    forced, created = what_if_submit(budget_request=budget_request, user=get_user("pat"), force=True)
    assert created and forced.pk != first.pk and forced.status == "done"
    other_share, created = what_if_submit(budget_request=budget_request, user=get_user("pat"), share="70")
    assert created and other_share.share_percent == 70
    with time_machine.travel(week + timedelta(hours=1), tick=False):  # a new hour: a new snapshot
        _, created = what_if_submit(budget_request=budget_request, user=get_user("pat"))
    assert created


def test_a_share_change_elsewhere_invalidates_the_cache(week, ask):
    from budgets.services import allocation_set_shares

    budget_request = ask()
    what_if_submit(budget_request=budget_request, user=get_user("pat"))
    allocation_set_shares(parent=Unit.objects.get(name="multimodal"), cluster=Cluster.objects.get(),
                          shares={Unit.objects.get(name="pixmo"): 25}, actor=get_user("mia"), reason="relabel")
    _, created = what_if_submit(budget_request=budget_request, user=get_user("pat"))
    assert created


def test_one_on_its_way_is_shown_not_run_twice_and_a_lost_one_is_failed(week, ask):
    budget_request = ask()
    queued, created = what_if_request(budget_request=budget_request, user=get_user("pat"))
    assert created and queued.status == "queued"
    same, created = what_if_request(budget_request=budget_request, user=get_user("pat"), force=True)
    assert (same.pk, created) == (queued.pk, False)
    with time_machine.travel(week + timedelta(minutes=20), tick=False):  # no worker ever took it
        fresh, created = what_if_request(budget_request=budget_request, user=get_user("pat"))
    queued.refresh_from_db()
    assert created and fresh.pk != queued.pk
    assert queued.status == "failed" and "no worker took it" in queued.error
    assert queued.log[-1]["actor"] == "pat" and queued.log[-1]["reason"] == "found still waiting when asked again"


def test_the_task_claims_a_what_if_once(week, ask):
    queued, _ = what_if_request(budget_request=ask(), user=get_user("pat"))
    assert run_what_if(queued.pk) == "done"
    assert run_what_if(queued.pk) == "done"  # already done: nothing runs twice
    queued.refresh_from_db()
    assert [entry["status"] for entry in queued.log] == ["queued", "running", "done"]
    assert run_what_if(10**9) is None


def test_a_failed_simulation_is_recorded_with_its_error(week, ask, monkeypatch):
    def broken(inputs):
        raise RuntimeError("the core refused the snapshot")

    monkeypatch.setattr("operations.whatif.workflow.simulate_both", broken)
    found, created = what_if_submit(budget_request=ask(), user=get_user("pat"))
    assert created and found.status == "failed"
    assert found.error == "RuntimeError: the core refused the snapshot"
    assert found.log[-1]["reason"] == "the simulation failed" and found.assumptions["running_jobs"] == 3
    # A failed run is not a cached result: the next click tries again.
    monkeypatch.undo()
    again, created = what_if_submit(budget_request=found.budget_request, user=get_user("pat"))
    assert created and again.status == "done"


def test_a_broker_that_is_down_fails_the_what_if_instead_of_the_page(week, ask, monkeypatch):
    def down(*args, **kwargs):
        raise ConnectionError("Error 111 connecting to redis:6379. Connection refused.")

    monkeypatch.setattr(run_what_if, "delay", down)
    found, created = what_if_submit(budget_request=ask(), user=get_user("pat"))
    assert created and found.status == "failed" and "could not be queued" in found.error
    assert found.log[-1]["actor"] == "system:queue"


def test_only_an_open_request_gets_a_new_what_if(week, ask):
    budget_request = ask()
    what_if_submit(budget_request=budget_request, user=get_user("pat"))
    budget_request_deny(request=budget_request, decider=get_user("pat"), comment="not this quarter")
    budget_request = BudgetRequest.objects.get(pk=budget_request.pk)
    assert budget_request.status == RequestStatus.DENIED
    with pytest.raises(ValidationError) as refused:
        what_if_submit(budget_request=budget_request, user=get_user("pat"), force=True)
    assert f"request #{budget_request.pk} is denied" in refused.value.message_dict["status"][0]


@pytest.mark.parametrize("share, message", [
    ("abc", "'abc' is not a percentage"), ("101", "must be between 0 and 100"), ("1.234", "more than two decimals"),
])
def test_a_bad_share_is_refused_naming_the_field(demo, ask, share, message):
    with pytest.raises(ValidationError) as refused:
        what_if_request(budget_request=ask(), user=get_user("pat"), share=share)
    assert message in refused.value.message_dict["share"][0]


# ---------------------------------------------------------------- the page


def post_what_if(client, budget_request, **data):
    return client.post(f"/budgets/requests/{budget_request.pk}/what-if/", data)


def test_the_manager_runs_it_from_the_request_page_and_sees_both_sides(week, ask, client):
    budget_request = ask()
    client.force_login(get_user("pat"))
    page = client.get(f"/budgets/requests/{budget_request.pk}/").content.decode()
    assert 'data-testid="what-if-form"' in page and 'data-status="none"' in page and 'value="80' in page
    response = post_what_if(client, budget_request)
    assert response.status_code == 302 and response["Location"] == f"/budgets/requests/{budget_request.pk}/#what-if"
    page = client.get(response["Location"]).content.decode()
    assert 'data-testid="what-if-status" data-status="done"' in page
    for unit in ("olmo", "tulu", "safety", "nlp"):
        assert f'<tr data-unit="{unit}"' in page
    assert page.count('data-testid="ratio-without"') == page.count('data-testid="ratio-with"') == 4
    assert "What it assumed" in page and "arrive again 7 days later" in page
    # Clicking again in the same state shows the same result.
    response = post_what_if(client, budget_request)
    assert WhatIf.objects.count() == 1
    assert "is for the cluster as it is now" in client.get(response["Location"]).content.decode()


def test_those_who_see_the_request_may_run_it_and_nobody_else(week, ask, client):
    budget_request = ask()
    # lee manages olmo: sees its requests (and gets the result alice's run left for this hour).
    for username, posted, shown in (("alice", 302, 200), ("dan", 404, 404), ("mia", 404, 404), ("lee", 302, 200)):
        client.force_login(get_user(username))
        assert post_what_if(client, budget_request).status_code == posted, username
        assert client.get(f"/budgets/requests/{budget_request.pk}/what-if/").status_code == shown, username
    assert WhatIf.objects.get().requested_by.username == "alice"


def test_the_section_polls_while_a_run_is_on_its_way(week, ask, client):
    budget_request = ask()
    what_if_request(budget_request=budget_request, user=get_user("pat"))
    client.force_login(get_user("pat"))
    section = client.get(f"/budgets/requests/{budget_request.pk}/what-if/").content.decode()
    assert section.lstrip().startswith('<section class="card what-if"')
    assert f'hx-get="/budgets/requests/{budget_request.pk}/what-if/" hx-trigger="every 2s"' in section
    assert 'data-status="queued"' in section
    run_what_if(WhatIf.objects.get().pk)
    section = client.get(f"/budgets/requests/{budget_request.pk}/what-if/").content.decode()
    assert "hx-get" not in section and 'data-status="done"' in section


def test_a_failure_shows_its_error_on_the_page_not_a_500(week, ask, client, monkeypatch):
    monkeypatch.setattr("operations.whatif.workflow.simulate_both", lambda inputs: 1 / 0)
    budget_request = ask()
    client.force_login(get_user("pat"))
    response = post_what_if(client, budget_request)
    page = client.get(response["Location"]).content.decode()
    assert 'data-status="failed"' in page and "ZeroDivisionError: division by zero" in page


def test_a_bad_share_on_the_page_is_a_400_naming_the_field(week, ask, client):
    budget_request = ask()
    client.force_login(get_user("pat"))
    response = post_what_if(client, budget_request, share="250")
    assert response.status_code == 400
    assert "Ensure this value is less than or equal to 100" in response.content.decode()
    assert WhatIf.objects.count() == 0


def test_a_decided_request_keeps_its_last_result_but_runs_no_new_one(week, ask, client):
    budget_request = ask()
    what_if_submit(budget_request=budget_request, user=get_user("pat"))
    budget_request_deny(request=budget_request, decider=get_user("pat"), comment="not this quarter")
    client.force_login(get_user("pat"))
    page = client.get(f"/budgets/requests/{budget_request.pk}/").content.decode()
    assert 'data-status="done"' in page and 'data-testid="what-if-form"' not in page
    response = post_what_if(client, budget_request, force="1")
    assert response.status_code == 400 and "is denied: the what-if compares a change still to be decided" in \
        response.content.decode()


def test_a_difference_no_larger_than_the_control_runs_is_marked_as_chance(demo, ask, client):
    budget_request = ask()

    def side(ratio, wait):
        return {"share": 55.0, "usage_ratio": ratio, "wait_p90": wait, "used_gpu_hours": 1.0,
                "entitled_gpu_hours": 2.0, "jobs": 3}

    WhatIf.objects.create(
        budget_request=budget_request, requested_by=get_user("pat"), share_percent=80, status="done",
        snapshot_hour=timezone.now(), state_key="x",
        results={"units": [
            {"unit": "olmo", "role": "requesting", "without": side(0.8, 3600.0), "with": side(0.6, 3700.0),
             "noise": {"usage_ratio": 0.05, "wait_p90": 600.0}},
        ], "cluster": {"without": {"occupancy": 0.9, "wait_p90": 10.0}, "with": {"occupancy": 0.9, "wait_p90": 10.0}}},
    )
    client.force_login(get_user("pat"))
    page = client.get(f"/budgets/requests/{budget_request.pk}/").content.decode()
    row = page[page.index('<tr data-unit="olmo"'):]
    row = row[:row.index("</tr>")]
    ratio_cell = row[row.index('data-testid="ratio-with"'):row.index('data-testid="wait-without"')]
    wait_cell = row[row.index('data-testid="wait-with"'):]
    assert "≈" not in ratio_cell and ">60 %" in ratio_cell  # 20 points apart, noise 5: a real difference
    assert "≈" in wait_cell and "moves it by 10 min" in wait_cell  # 100 s apart, noise 10 min: chance

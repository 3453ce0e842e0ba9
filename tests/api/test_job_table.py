"""The job table (scheduler/core/jobspec.py) is wired everywhere: every field of it is taken by the API, the
Submit page, `allot submit` and, for a column, the workload file, and read back as given; none of them takes a
field the table does not have. A new row that one of them does not take fails here."""

import csv
import io
import json
from collections import Counter
from datetime import UTC, datetime

import pytest

from client import cli
from operations.whatif import readers
from scheduler.api.serializers import JobSubmitSerializer
from scheduler.core import jobspec
from scheduler.core.durations import format_duration
from scheduler.core.jobspec import BOOL, CHOICE, INT, MAP, NAME, SECONDS
from scheduler.core.model import PendingJob
from scheduler.models import Job
from scheduler.sim.workload import AS_IS, COLUMNS, SimJob, parse_workload_text, workload_rows
from scheduler.views import SUBMIT_FIELDS
from tests.conftest import get_user
from topology.models import Gpu

# What the demo takes where a value made from the kind alone would be refused (a GPU type it has, a path).
KNOWN = {"cluster": "gb200-east", "project": "olmo", "gpu_type": "H100", "workdir": "/data/run",
         "mig_profile": "1g.10gb"}


def sample(spec: jobspec.JobField):
    """A value the field takes, not its default (where it has another), from its kind and bounds."""
    if spec.name in KNOWN:
        return KNOWN[spec.name]
    if spec.kind in (INT, SECONDS):
        lowest = spec.lowest or 0
        return lowest + 1 if lowest == spec.default else lowest
    if spec.kind == BOOL:
        return True if spec.required else not spec.default
    if spec.kind == CHOICE:
        return next(value for value in spec.values if value != spec.default)
    if spec.kind == MAP:
        return {"WALK": "1"}
    return f"walk-{spec.name}"[: spec.max_length]


def typed(spec: jobspec.JobField, value) -> str:
    """The value as a person types it on the Submit page or the command line."""
    if spec.kind == SECONDS:
        return format_duration(value)
    if spec.kind == MAP:
        return "\n".join(f"{name}={text}" for name, text in value.items())
    return "on" if value is True else str(value)


def stored(job: Job, spec: jobspec.JobField):
    value = getattr(job, spec.name)
    return value.name if spec.kind == NAME else value


@pytest.fixture
def mig_demo(demo):
    Gpu.objects.filter(host__name="hgx-08-h01", index=0).update(mig_enabled=True)  # for mig_profile's sample
    return demo


BASE = {"cluster": "gb200-east", "project": "olmo", "gpus": 1, "min_runtime": 0, "resumable": False,
        "command": "python walk.py"}


@pytest.mark.django_db
@pytest.mark.parametrize("spec", jobspec.SUBMIT, ids=lambda spec: spec.name)
def test_the_api_takes_every_field_and_returns_it(mig_demo, api, spec):
    value = sample(spec)
    response = api.as_user(get_user("alice")).post("/api/v1/jobs/", {**BASE, spec.name: value}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()[spec.name] == value
    assert stored(Job.objects.get(), spec) == value


@pytest.mark.django_db
@pytest.mark.parametrize("spec", [spec for spec in jobspec.SUBMIT if spec.label], ids=lambda spec: spec.name)
def test_the_submit_page_takes_every_field_it_shows(mig_demo, client, spec):
    client.force_login(get_user("alice"))
    value = sample(spec)
    form = {**{key: typed(jobspec.FIELD[key], base) for key, base in BASE.items() if base is not False},
            spec.name: typed(spec, value)}
    response = client.post("/jobs/new/", form)
    assert response.status_code == 302, response.context["errors"]
    assert stored(Job.objects.get(), spec) == value
    page = client.get("/jobs/new/", {"from": Job.objects.get().pk}).content.decode()
    assert f'name="{spec.name}"' in page


def test_every_field_of_the_api_is_on_the_submit_page_and_in_allot_submit():
    assert [spec.name for spec in jobspec.SUBMIT] == list(SUBMIT_FIELDS)
    assert all(spec.label and spec.cli for spec in jobspec.SUBMIT)


@pytest.mark.parametrize("spec", [spec for spec in jobspec.SUBMIT if spec.cli], ids=lambda spec: spec.name)
def test_allot_submit_takes_every_field_and_sends_it(monkeypatch, capsys, tmp_path, spec):
    sent = {}

    class Server:
        def post(self, path, body):
            sent.update(body)
            return {"id": 1}

    monkeypatch.setattr(cli, "client_from_config", lambda args: Server())
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    value = sample(spec)
    argv = ["submit", "--json", "--cluster", "gb200-east", "--project", "olmo", "--gpus", "1", "--min-runtime", "0"]
    if spec.kind == BOOL:
        argv.append(spec.cli[0])
    elif spec.cli[0] != "--":
        argv += [spec.cli[0], typed(spec, value)]
    argv += ["--", value if spec.name == "command" else "python walk.py"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out) == {"id": 1}
    assert sent[spec.name] == value


def test_allot_submit_offers_no_option_outside_the_table():
    parser = cli.build_parser()
    submit = next(action for action in parser._actions if action.dest == "command_name").choices["submit"]
    offered = {option for action in submit._actions for option in action.option_strings}
    own = {"-h", "--help", "--server", "--token", "--json", "--parsable"}
    assert offered - own == {option for spec in jobspec.SUBMIT for option in spec.cli if option != "--"}


def test_the_api_takes_no_field_outside_the_table():
    assert list(JobSubmitSerializer().fields) == [spec.name for spec in jobspec.SUBMIT]


HEADER = ["job_id", "submit", "project", "gpus", "min_runtime", "resumable", "duration"]
ROW = ["w", "0", "olmo", "1", "0", "0", "60"]


@pytest.mark.parametrize("spec", [spec for spec in jobspec.FIELDS if spec.column], ids=lambda spec: spec.column)
def test_the_workload_file_takes_every_column_and_writes_it_back(spec):
    value = sample(spec)
    text = "1" if value is True else str(value)
    row = dict(zip(HEADER, ROW, strict=True)) | {spec.column: text}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerows([list(row), list(row.values())])
    (job,) = parse_workload_text(out.getvalue())
    assert workload_rows([job])[1][COLUMNS.index(spec.column)] == text
    if spec.name in AS_IS:
        assert getattr(job, spec.name) == value


def test_the_workload_file_has_no_column_outside_the_table_and_the_core_s_fields_are_columns():
    assert COLUMNS == jobspec.WORKLOAD_COLUMNS
    assert set(COLUMNS) == {spec.column for spec in jobspec.FIELDS if spec.column}
    assert all(spec.column for spec in jobspec.FIELDS if spec.as_is)
    assert set(AS_IS) == {spec.name for spec in jobspec.FIELDS if spec.as_is}


def test_the_what_if_simulates_queued_and_replayed_jobs_with_every_field_the_core_takes():
    """What the core reads of a job reaches the what-if's simulation (a job's own restart_overhead did not)."""
    asked = {name: sample(jobspec.FIELD[name]) for name in jobspec.as_is(PendingJob, SimJob)}
    pending = PendingJob(**asked, id="7", project="olmo", submit_time=100.0, seq=7)
    queued = readers._queued(pending, zero=0.0, durations=readers.Durations({}), sources=Counter())
    since = datetime(2026, 12, 1, tzinfo=UTC)
    row = {**asked, "pk": 8, "project__name": "olmo", "user__username": "alice", "gpu_type": "", "priority": "low",
           "submitted_at": since}
    (replayed,) = readers._replayed([(row, 60.0, "default")], since=since)
    for name, value in asked.items():
        assert getattr(queued, name) == getattr(replayed, name) == value, name

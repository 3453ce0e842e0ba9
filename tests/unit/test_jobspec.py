"""The job table (scheduler/core/jobspec.py) agrees with what it describes: the Job model's fields and
constraints, the core's job classes and policy, the choices the app offers; and its checks name the limit."""

import pytest
from django.core.management import call_command
from django.core.validators import MaxValueValidator, MinValueValidator

from scheduler.choices import Priority, Topology
from scheduler.core import jobspec
from scheduler.core.jobspec import CHOICE, MAP, NAME, REQUIRED, TEXT
from scheduler.core.mig import PROFILES
from scheduler.core.model import PendingJob, Policy, RunningJob
from scheduler.models import Job

STORED = [spec for spec in jobspec.SUBMIT if spec.kind != NAME]


@pytest.mark.parametrize("spec", STORED, ids=lambda spec: spec.name)
def test_the_model_stores_each_field_as_the_table_bounds_it(spec):
    field = Job._meta.get_field(spec.name)
    assert field.null == spec.nullable
    if spec.kind in (TEXT, MAP):
        assert field.blank
    if spec.kind == TEXT and field.get_internal_type() == "CharField":
        assert field.max_length == spec.max_length
    if spec.kind == CHOICE:
        assert list(field.choices) == list(spec.choices)
    if spec.default not in (REQUIRED, None) and field.has_default():
        assert field.default == spec.default
    declared = field._validators  # the field's own, not the database's range
    bounds = {type(validator): validator.limit_value for validator in declared
              if isinstance(validator, MinValueValidator | MaxValueValidator)}
    if bounds:
        assert bounds == {MinValueValidator: spec.lowest, MaxValueValidator: spec.maximum}


def test_the_model_s_check_constraints_hold_the_table_s_numbers():
    constraint = next(c for c in Job._meta.constraints if c.name.endswith("gpu_milli_range"))
    milli = jobspec.FIELD["gpu_milli"]
    assert sorted(constraint.condition.children) == [
        ("gpu_milli__gte", milli.minimum), ("gpu_milli__lte", milli.maximum)]


@pytest.mark.django_db
def test_the_model_and_its_migrations_agree():
    call_command("makemigrations", "scheduler", "--check", "--dry-run", verbosity=0)


def test_the_core_s_job_classes_have_every_field_they_take_as_is():
    for spec in jobspec.FIELDS:
        if spec.as_is:
            assert spec.name in PendingJob.__dataclass_fields__, spec.name
    assert set(jobspec.as_is(RunningJob)) <= set(jobspec.as_is(PendingJob))


def test_the_table_s_choices_and_policy_fields_are_the_app_s():
    assert jobspec.FIELD["topology"].choices == tuple(Topology.choices)
    assert jobspec.FIELD["priority"].values == tuple(Priority.values) == tuple(jobspec.PRIORITIES)
    assert jobspec.FIELD["mig_profile"].values == tuple(PROFILES)
    for spec in jobspec.FIELDS:
        assert not spec.from_policy or hasattr(Policy(), spec.from_policy), spec.name
        assert spec.kind in (jobspec.INT, jobspec.SECONDS, jobspec.BOOL, CHOICE, TEXT, NAME, MAP), spec.name
    assert len({spec.name for spec in jobspec.FIELDS}) == len(jobspec.FIELDS)


@pytest.mark.parametrize(("name", "value", "problem"), [
    ("gpus", 0, "must be at least 1; got 0"),
    ("gpus", 1_000_001, "must be at most 1000000; got 1000001"),
    ("min_runtime", -5, "must be at least 0 seconds; got -5"),
    ("restart_overhead", 86401, "must be at most 86400 seconds (1d); got 86401"),
    ("max_runtime", 0, "must be at least 1 second; got 0"),
    ("max_runtime", None, None),
    ("gpus", None, "required"),
    ("gpus", "8", "must be a whole number; got '8'"),
    ("topology", "ring", "must be one of any, domain, preferred"),
    ("name", "n" * 201, "must be at most 200 characters"),
    ("resumable", "yes", "must be true or false; got 'yes'"),
    ("cpus", 4, None),
])
def test_a_value_out_of_the_table_s_bounds_is_named_with_the_limit(name, value, problem):
    assert jobspec.problem(jobspec.FIELD[name], value) == problem


def test_also_asked_lists_what_a_page_does_not_show_and_is_not_the_default():
    values = {"gpus": 8, "priority": "high", "restart_overhead": 600, "cpus": 0, "max_runtime": None}
    assert jobspec.also_asked(values, shown={"gpus"}) == [("Restart overhead", "10m"),
                                                          ("Priority in the project", "high")]

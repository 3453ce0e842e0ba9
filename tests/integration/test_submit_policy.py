"""Finding 11: a cluster says who may submit (`submit: all | allocated | [unit, ...]`), enforced with a 403."""

import pytest
import yaml

from budgets.models import Membership, Unit
from scheduler.models import Job
from tests.conftest import DEMO, get_user
from topology.loaders import apply_cluster
from topology.models import Cluster
from topology.spec import LoadError, parse_cluster

pytestmark = pytest.mark.django_db


def with_submit(rule):
    data = yaml.safe_load((DEMO / "cluster.yaml").read_text())
    data["policy"]["submit"] = rule
    return apply_cluster(parse_cluster(data))[0]


@pytest.fixture
def scratch(demo):
    """A project with no share of the cluster, dan a member."""
    unit = Unit.objects.create(name="scratch", parent=Unit.objects.get(name="multimodal"))
    Membership.objects.create(user=get_user("dan"), unit=unit, role="member")
    return unit


def submit(api, user, project, min_runtime=0):
    return api.as_user(get_user(user)).post("/api/v1/jobs/", {
        "cluster": "gb200-east", "project": project, "gpus": 1, "min_runtime": min_runtime, "resumable": True,
        "command": "python train.py"}, format="json")


def test_by_default_every_project_may_submit(scratch, api):
    assert Cluster.objects.get().submit_policy == "all"
    assert submit(api, "dan", "scratch").status_code == 201


def test_allocated_takes_only_units_with_a_share(scratch, api):
    with_submit("allocated")
    refused = submit(api, "dan", "scratch")
    assert refused.status_code == 403
    assert "`submit: allocated`" in refused.json()["detail"] and "scratch has none" in refused.json()["detail"]
    assert submit(api, "dan", "molmo").status_code == 201
    assert list(Job.objects.values_list("project__name", flat=True)) == ["molmo"]


def test_a_list_takes_those_units_and_the_units_under_them(scratch, api):
    with_submit(["nlp", "pixmo"])
    assert submit(api, "alice", "olmo", min_runtime=3600).status_code == 201  # under nlp
    assert submit(api, "dan", "pixmo").status_code == 201
    refused = submit(api, "dan", "molmo")
    assert refused.status_code == 403 and "`submit: [nlp, pixmo]`" in refused.json()["detail"]
    # Back to the default when the file says nothing.
    data = yaml.safe_load((DEMO / "cluster.yaml").read_text())
    apply_cluster(parse_cluster(data))
    assert submit(api, "dan", "molmo").status_code == 201


@pytest.mark.parametrize("rule", ["everyone", [], [1, 2], ["ol mo"], {"units": ["olmo"]}])
def test_a_bad_rule_in_the_cluster_file_is_refused_with_its_place(demo, rule):
    with pytest.raises(LoadError) as refused:
        with_submit(rule)
    assert "policy.submit" in str(refused.value)

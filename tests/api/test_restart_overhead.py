"""A job's restart overhead (issue 18): optional on submission, checked at the boundary, given to the core; the
cluster policy's default when a job gives none."""

import pytest
import yaml

from scheduler.models import Job
from scheduler.snapshot import build_snapshot
from tests.conftest import get_user
from topology.loaders import LoadError, load_cluster_file
from topology.models import Cluster

pytestmark = pytest.mark.django_db

GOOD = {
    "cluster": "gb200-east", "project": "olmo", "gpus": 8, "min_runtime": 7200, "resumable": True,
    "command": "python train.py", "topology": "any",
}


def submit(api, **changes):
    return api.as_user(get_user("alice")).post("/api/v1/jobs/", {**GOOD, **changes}, format="json")


@pytest.mark.parametrize(("value", "message"), [
    (86401, "less than or equal to 86400"), (-1, "greater than or equal to 0"), ("soon", "valid integer"),
])
def test_a_restart_overhead_out_of_range_is_a_400_naming_the_field_and_the_limit(demo, api, value, message):
    response = submit(api, restart_overhead=value)
    assert response.status_code == 400
    assert message in " ".join(response.json()["restart_overhead"])
    assert not Job.objects.exists()


def test_the_job_s_restart_overhead_is_kept_shown_and_given_to_the_core(demo, api):
    own = submit(api, restart_overhead=1200).json()
    default = submit(api).json()
    assert (own["restart_overhead"], default["restart_overhead"]) == (1200, None)
    tick_input = build_snapshot(Cluster.objects.get(name="gb200-east"))
    by_id = {job.id: job for job in tick_input.snapshot.pending}
    assert by_id[str(own["id"])].restart_overhead == 1200
    assert by_id[str(default["id"])].restart_overhead is None


def test_the_cluster_policy_gives_the_default_restart_overhead(tmp_path):
    spec = {"name": "c1", "policy": {"restart_overhead": "10m"},
            "domains": [{"name": "hgx-{:02d}", "count": 1, "hosts": 1, "gpus_per_host": 8, "gpu_type": "H100"}]}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(spec))
    load_cluster_file(path)
    cluster = Cluster.objects.get(name="c1")
    assert cluster.scheduling_policy().restart_overhead == 600
    spec["policy"] = {}
    path.write_text(yaml.safe_dump(spec))
    load_cluster_file(path)
    cluster.refresh_from_db()
    assert cluster.scheduling_policy().restart_overhead == 300
    spec["policy"] = {"restart_overhead": "soon"}
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(LoadError, match="policy.restart_overhead"):
        load_cluster_file(path)

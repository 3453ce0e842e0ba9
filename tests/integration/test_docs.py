"""The README's links stay inside the repository, and docs/formats.md says what the code accepts."""

import re
from pathlib import Path

import pytest
import yaml

from budgets.spec import UNIT_KEYS, USER_KEYS, parse_org
from scheduler.api.serializers import JobSerializer
from scheduler.core import jobspec
from topology.health import EVENT_KEYS
from topology.spec import DOMAIN_KEYS, POLICY_FIELDS, parse_cluster

ROOT = Path(__file__).resolve().parents[2]
FORMATS = (ROOT / "docs" / "formats.md").read_text()
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in path.read_text().splitlines() if line.startswith("#")}


def test_every_readme_link_into_the_repository_resolves_and_none_leaves_it():
    readme = (ROOT / "README.md").read_text()
    assert "../shared/FORMATS" not in readme and "../shared/DESIGN" not in readme
    local = [target for target in LINK.findall(readme) if not target.startswith(("http://", "https://"))]
    assert local, "the README links its docs"
    for target in local:
        path, _, anchor = target.partition("#")
        assert not path.startswith(".."), target
        file = ROOT / path
        assert file.exists(), target
        if anchor:
            assert anchor in anchors(file), target
    # Every DESIGN section the README cites is in the shipped design.
    cited = set(re.findall(r"DESIGN §(\d+)", readme))
    shipped = set(re.findall(r"^## (\d+)\.", (ROOT / "docs" / "design.md").read_text(), re.M))
    assert cited and cited <= shipped


def _example(title: str) -> dict:
    section = FORMATS.split(title, 1)[1]
    return yaml.safe_load(section.split("```yaml", 1)[1].split("```", 1)[0])


def test_the_documented_cluster_file_loads_with_every_key_the_loader_knows(db):
    example = _example("## Cluster spec")
    spec = parse_cluster(example)
    assert spec.name == "gb200-east"
    assert set(example["policy"]) == set(POLICY_FIELDS)
    assert set(example["health"]) == {"xid", "heartbeat_lost", *EVENT_KEYS}
    assert set(example["domains"][0]) == DOMAIN_KEYS


def test_the_documented_org_file_parses_and_every_key_is_described():
    example = _example("## Org spec")
    # The example's users list is partial (people already in the database are not repeated): check it alone.
    users = parse_org({"users": example["users"], "units": [{"name": "x"}]}, clusters=set()).users
    assert [user.posix_user for user in users] == [None, "ssmith"]
    spec = parse_org({"units": example["units"]}, clusters={"gb200-east"})
    assert {unit.name for unit in spec.units} == {"nlp", "olmo", "tulu", "vision"}
    for key in USER_KEYS | UNIT_KEYS:
        assert f"`{key}`" in FORMATS, key
    assert "--overwrite" in FORMATS


@pytest.mark.parametrize("field", JobSerializer.Meta.fields)
def test_every_job_field_the_api_returns_is_documented(field):
    rest = FORMATS.split("## REST API", 1)[1]
    assert re.search(rf"\b{field}\b", rest), field


@pytest.mark.parametrize("spec", jobspec.SUBMIT, ids=lambda spec: spec.name)
def test_every_field_a_job_is_submitted_with_is_documented(spec):
    body = next(line for line in FORMATS.splitlines() if line.startswith("| `POST /api/v1/jobs/`"))
    assert re.search(rf"\b{spec.name}\b", body), spec.name


@pytest.mark.parametrize("column", jobspec.WORKLOAD_COLUMNS)
def test_every_workload_column_is_documented(column):
    table = FORMATS.split("## Workload (CSV)", 1)[1].split("\n## ", 1)[0]
    assert f"`{column}`" in table, column


@pytest.mark.parametrize("status", ["400", "401", "403", "404", "409", "413", "415", "429"])
def test_every_error_answer_is_documented(status):
    assert status in FORMATS.split("## REST API", 1)[1]

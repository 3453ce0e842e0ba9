from pathlib import Path

import pytest
import yaml
from django.db import connection

from tests.faults.support import CLUSTER, ORG, PrivatePostgres, PrivateRedis


@pytest.fixture
def faultlab(tmp_path, transactional_db):
    """The small simulated cluster and its two projects, loaded through the real loaders."""
    from budgets.loaders import load_org_file
    from topology.loaders import load_cluster_file

    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    (tmp_path / "org.yaml").write_text(yaml.safe_dump(ORG))
    cluster, _ = load_cluster_file(tmp_path / "cluster.yaml")
    load_org_file(tmp_path / "org.yaml")
    yield cluster
    # The schedulers this test started are gone: their file lock beside the SQLite test database goes too.
    if connection.vendor == "sqlite":
        Path(f"{connection.settings_dict['NAME']}.scheduler.lock").unlink(missing_ok=True)


@pytest.fixture
def private_redis(tmp_path):
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def private_postgres():
    server = PrivatePostgres()
    try:
        server.start()
        yield server
    finally:
        server.destroy()

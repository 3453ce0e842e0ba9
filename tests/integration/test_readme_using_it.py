"""The README's "Using it" section, followed literally: its shell block is run by bash, as a new user would
paste it, against a live server on a fresh database with the demo loaded. The one change: the server's URL
(the test server listens on a port of its own)."""

import os
import re
import subprocess

import pytest

from accounts.models import ApiToken
from scheduler.models import Job
from tests.conftest import REPO

pytestmark = pytest.mark.django_db(transaction=True)
README_URL = "http://127.0.0.1:8000"


def using_it_block() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Using it\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def test_the_readme_s_using_it_runs_as_written(demo, live_server, tmp_path):
    script = using_it_block()
    assert script.count(README_URL) == 1
    env = {key: value for key, value in os.environ.items() if not key.startswith("ALLOT_")}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"), ALLOT_PASSWORD="allot-demo",
               COLUMNS="120", TZ="UTC")
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script.replace(README_URL, live_server.url)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out, err = result.stdout, result.stderr
    assert result.returncode == 0, (out, err)
    job = Job.objects.get()
    assert (job.user.username, job.cluster.name, job.project.name) == ("alice", "gb200-east", "olmo")
    assert (job.min_runtime, job.max_runtime, job.resumable, job.command) == (7200, 86400, True, "python train.py")
    assert f"Logged in to {live_server.url} as alice" in out and "Defaults: project olmo." in out
    assert re.search(rf"^{job.pk} +gb200-east +olmo +alice +pending", out, re.M)  # allot queue --mine
    assert "allocated, protected for 2h, resumable, max 1d" in out  # allot show
    assert f"job {job.pk} (pending): no output yet" in err  # allot logs, before it ran
    assert f"Cancelled job {job.pk}." in out and job.state == "cancelled"
    assert re.search(rf"^{job.pk} +- +gb200-east +olmo +alice +cancelled", out, re.M)  # allot history
    assert re.search(r"^gb200-east +olmo +- +0\.0 +0\.0 +[\d,.]+ +0\.0%$", out, re.M)  # allot usage
    assert re.search(r"^nvl72-03-h07 +gb200-east .* down ", out, re.M)  # allot hosts --state down
    assert "Logged out (token revoked on" in out
    assert not ApiToken.objects.filter(user=job.user, revoked_at__isnull=True).exists()

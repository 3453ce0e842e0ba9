"""allot-client (packaging/client) installs alone, with its real dependencies, and brings no Django or Plotly."""

import json
import subprocess
import sys

import pytest

from tests.packaging.venvs import ROOT, build_wheel, clean_env, fresh_venv, pip_install


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("client-package")
    wheel = build_wheel(ROOT / "packaging" / "client", root)
    python = fresh_venv(root / "venv")
    pip_install(python, f"{wheel}[agent]")  # its dependencies from the index (or pip's cache), as on a host
    return python


def test_it_installs_the_cli_and_agent_with_only_requests_and_nvml(client_venv):
    listed = subprocess.run([sys.executable, "-m", "pip", "--python", str(client_venv), "list", "--format", "json"],
                            capture_output=True, text=True, check=True).stdout
    names = {package["name"].lower() for package in json.loads(listed)}
    assert {"allot-client", "requests", "nvidia-ml-py"} <= names
    assert not names & {"django", "plotly", "celery", "djangorestframework", "psycopg", "allot"}
    assert names <= {"allot-client", "requests", "nvidia-ml-py", "certifi", "charset-normalizer", "idna", "urllib3",
                     "pip", "setuptools"}


@pytest.mark.parametrize("script, says", [("allot", "Submit and follow GPU jobs"), ("allot-agent", "--token-file")])
def test_its_scripts_run_outside_the_checkout(client_venv, tmp_path, script, says):
    done = subprocess.run([str(client_venv.parent / script), "--help"], capture_output=True, text=True,
                          cwd=tmp_path, env=clean_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert says in done.stdout


def test_the_agents_nvml_binding_comes_with_the_agent_extra(client_venv, tmp_path):
    done = subprocess.run([str(client_venv), "-c", "import pynvml, client.nvml, client.agent; print(pynvml.__file__)"],
                          capture_output=True, text=True, cwd=tmp_path, env=clean_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(str(client_venv.parent.parent))

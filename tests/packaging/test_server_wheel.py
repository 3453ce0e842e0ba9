"""The server's wheel, installed alone (no checkout), migrates, collects its static files and serves pages."""

import re
import subprocess

import pytest

from tests.packaging.venvs import (
    ROOT,
    borrow_dependencies,
    build_wheel,
    clean_env,
    free_port,
    fresh_venv,
    pip_install,
    wait_for,
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel in a fresh venv; its dependencies borrowed from this one (see borrow_dependencies)."""
    root = tmp_path_factory.mktemp("server-wheel")
    wheel = build_wheel(ROOT, root)
    python = fresh_venv(root / "venv")
    pip_install(python, "--no-deps", str(wheel))
    borrow_dependencies(python)
    return root, python


def test_it_carries_templates_static_files_demo_and_every_migration(installed):
    root, python = installed
    listing = subprocess.run(["unzip", "-l", str(next(root.glob("*.whl")))], capture_output=True, text=True,
                             check=True).stdout
    shipped = set(re.findall(r"\s(\S+)\n", listing))
    for folder in ("templates", "static", "demo"):
        for file in (ROOT / folder).rglob("*"):
            if file.is_file():
                assert f"allot_{folder}/{file.relative_to(ROOT / folder)}" in shipped
    for migration in ROOT.glob("*/migrations/0*.py"):
        assert str(migration.relative_to(ROOT)) in shipped
    assert not any(name.startswith(("tests/", "bench/", "packaging/")) for name in shipped)


def test_it_migrates_collects_static_and_serves_a_page_outside_the_checkout(installed, tmp_path):
    _, python = installed
    bin_dir = python.parent
    env = clean_env(DATABASE_URL=f"sqlite:///{tmp_path / 'allot.sqlite3'}", SECRET_KEY="wheel-test",
                    ALLOT_VAR_DIR=str(tmp_path / "var"), ALLOT_STATIC_ROOT=str(tmp_path / "static"))

    def manage(*args):
        return subprocess.run([str(bin_dir / "allot-manage"), *args], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)

    where = subprocess.run([str(python), "-c", "import config; print(config.__file__)"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(python.parent.parent)), f"config imported from {where}, not the wheel"
    migrated = manage("migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stderr
    collected = manage("collectstatic", "--no-input")
    assert collected.returncode == 0, collected.stderr
    assert (tmp_path / "static" / "staticfiles.json").exists()
    loaded = manage("demo")
    assert loaded.returncode == 0, loaded.stderr

    port = free_port()
    server = subprocess.Popen(
        [str(python), "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "gunicorn.log", "wb"),
    )
    try:
        page = wait_for(f"http://127.0.0.1:{port}/login/", process=server)
        assert page.status_code == 200
        assert "<form" in page.text
        # The stylesheet is named by its hash and served compressed from the collected files.
        (css,) = re.findall(r'href="(/static/css/allot\.[0-9a-f]{12}\.css)"', page.text)
        served = wait_for(f"http://127.0.0.1:{port}{css}", process=server)
        assert served.status_code == 200
        assert served.headers.get("Content-Encoding") in {"gzip", "br"}
        assert "immutable" in served.headers.get("Cache-Control", "")
        assert wait_for(f"http://127.0.0.1:{port}/healthz", process=server).json() == {"status": "ok"}
    finally:
        server.terminate()
        server.wait(timeout=20)

"""Settings helpers fail at start-up with the variable's name."""

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import database_from_url, env_bool, env_int, env_list


def test_sqlite_urls_resolve_relative_to_the_project(tmp_path):
    relative = database_from_url("DATABASE_URL", "sqlite:///var/allot.sqlite3", tmp_path)
    assert relative["ENGINE"] == "django.db.backends.sqlite3"
    assert relative["NAME"] == str(tmp_path / "var" / "allot.sqlite3")
    absolute = database_from_url("DATABASE_URL", "sqlite:////tmp/x.sqlite3", tmp_path)
    assert absolute["NAME"] == "/tmp/x.sqlite3"


def test_postgres_urls_give_every_connection_field():
    db = database_from_url("DATABASE_URL", "postgres://al%40lot:p%2Fw@db.example:6543/allot?sslmode=require", Path())
    assert (db["ENGINE"], db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == (
        "django.db.backends.postgresql", "allot", "al@lot", "p/w", "db.example", "6543",
    )
    assert db["OPTIONS"] == {"sslmode": "require"}


@pytest.mark.parametrize(
    "url, message", [("mysql://x/y", "must start with sqlite:// or postgres://"), ("postgres://host/", "database name")]
)
def test_bad_database_urls_name_the_variable(url, message):
    with pytest.raises(ImproperlyConfigured, match=f"DATABASE_URL.*{message}|{message}"):
        database_from_url("DATABASE_URL", url, Path())


def test_typed_readers_name_the_variable(monkeypatch):
    monkeypatch.setenv("ALLOT_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="ALLOT_FLAG"):
        env_bool("ALLOT_FLAG", False)
    monkeypatch.setenv("ALLOT_FLAG", "yes")
    assert env_bool("ALLOT_FLAG", False) is True
    monkeypatch.setenv("ALLOT_COUNT", "five")
    with pytest.raises(ImproperlyConfigured, match="ALLOT_COUNT must be an integer"):
        env_int("ALLOT_COUNT", 1)
    monkeypatch.setenv("ALLOT_HOSTS", "a.example, b.example,")
    assert env_list("ALLOT_HOSTS", []) == ["a.example", "b.example"]


def test_production_settings_refuse_to_start_without_a_secret(tmp_path):
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "config.settings", "ALLOT_VAR_DIR": str(tmp_path),
           "DATABASE_URL": f"sqlite:///{tmp_path}/x.sqlite3"}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True, text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode != 0 and "SECRET_KEY must be set" in result.stderr


@pytest.mark.parametrize("https", ["0", "1"])
def test_behind_a_tls_proxy_cookies_are_secure_and_hsts_is_on(tmp_path, https):
    import subprocess
    import sys

    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "config.settings", "SECRET_KEY": "x" * 60,
           "DATABASE_URL": f"sqlite:///{tmp_path}/x.sqlite3", "ALLOT_HTTPS": https}
    code = ("import django; django.setup(); from django.conf import settings as s; "
            "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS, s.SECURE_PROXY_SSL_HEADER)")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    expected = ("True True 3600 ('HTTP_X_FORWARDED_PROTO', 'https')" if https == "1" else "False False 0 None")
    assert result.stdout.strip() == expected

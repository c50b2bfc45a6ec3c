"""Settings come from the environment; the embedded default needs nothing at all."""

from __future__ import annotations

import json
import subprocess

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal import env
from tests import procs

PROBE = """
import json, django
from django.conf import settings
django.setup()
from portal import celery_app
print(json.dumps({
    "db": settings.DATABASES["default"]["ENGINE"],
    "db_name": str(settings.DATABASES["default"]["NAME"]),
    "db_host": settings.DATABASES["default"].get("HOST"),
    "db_port": settings.DATABASES["default"].get("PORT"),
    "db_password": settings.DATABASES["default"].get("PASSWORD"),
    "layer": settings.CHANNEL_LAYERS["default"]["BACKEND"],
    "eager": celery_app.conf.task_always_eager,
    "broker": celery_app.conf.broker_url,
    "embedded": settings.EMBEDDED,
}))
"""


def _settings_in_child(**env_overrides: str | None) -> subprocess.CompletedProcess:
    env = procs.child_env(DJANGO_SETTINGS_MODULE="portal.settings", **env_overrides)
    return subprocess.run(
        [procs.PYTHON, "-c", PROBE],
        cwd=procs.REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_nothing_configured_means_the_embedded_default(tmp_path):
    result = _settings_in_child(
        DATABASE_URL=None, REDIS_URL=None, SECRET_KEY=None, PORTAL_VAR_DIR=str(tmp_path),
        EMBEDDED_DB_PORT="54999",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["embedded"] is True
    # The portal's own PostgreSQL (started by manage.py demo), on loopback, with a password
    # generated once and kept 0600 for the next start.
    assert seen["db"] == "django.db.backends.postgresql"
    assert (seen["db_name"], seen["db_host"], seen["db_port"]) == ("gpuportal", "127.0.0.1", 54999)
    assert seen["db_password"] == (tmp_path / "postgres-password").read_text().strip()
    assert len(seen["db_password"]) >= 24
    assert seen["layer"] == "channels.layers.InMemoryChannelLayer"
    assert seen["eager"] is True
    # A key was generated once and kept for the next start.
    assert len((tmp_path / "secret_key").read_text()) >= 50


def test_services_configured_means_postgres_redis_and_a_real_broker(tmp_path):
    result = _settings_in_child(
        DATABASE_URL="postgres://u@db.example:5432/portal",
        REDIS_URL="redis://cache:6379/0",
        SECRET_KEY="k" * 50,
        PORTAL_VAR_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["embedded"] is False
    assert seen["db"] == "django.db.backends.postgresql"
    assert seen["layer"] == "channels_redis.core.RedisChannelLayer"
    assert seen["eager"] is False
    assert seen["broker"] == "redis://cache:6379/0"


def test_production_without_a_secret_key_refuses_to_start(tmp_path):
    result = _settings_in_child(
        DATABASE_URL="postgres://u@db/portal",
        REDIS_URL="redis://cache:6379/0",
        SECRET_KEY=None,
        DEBUG=None,
        PORTAL_VAR_DIR=str(tmp_path),
    )
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


@pytest.mark.parametrize(
    ("reader", "raw", "message"),
    [
        (lambda: env.env_bool("X_FLAG"), "maybe", "X_FLAG must be a boolean"),
        (lambda: env.env_int("X_NUM", 1), "ten", "X_NUM must be an integer"),
        (lambda: env.env_int("X_NUM", 1, minimum=1), "0", "X_NUM must be at least 1"),
        (lambda: env.env_float("X_NUM", 1.0, minimum=0.5), "0.1", "X_NUM must be at least 0.5"),
    ],
)
def test_malformed_settings_fail_with_the_variables_name(monkeypatch, reader, raw, message):
    monkeypatch.setenv("X_FLAG", raw)
    monkeypatch.setenv("X_NUM", raw)
    with pytest.raises(ImproperlyConfigured, match=message):
        reader()


def test_well_formed_settings_are_read(monkeypatch):
    monkeypatch.setenv("X_FLAG", "yes")
    monkeypatch.setenv("X_LIST", " a, b ,,c ")
    assert env.env_bool("X_FLAG") is True
    assert env.env_list("X_LIST", []) == ["a", "b", "c"]
    assert env.env_int("X_MISSING", 7) == 7


HUNG = """
import json, time, django, psycopg
from django.conf import settings
django.setup()
from django.db import DatabaseError, connection, transaction
db = settings.DATABASES["default"]
seen = {"options": db.get("OPTIONS", {}).get("options", "")}
if seen["options"]:
    try:
        with transaction.atomic():
            with connection.cursor() as cur:
                cur.execute("SELECT 1 FROM django_migrations ORDER BY id LIMIT 1 FOR UPDATE")
                time.sleep(2.5)  # hung inside the transaction, holding the row
                with psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"],
                                     dbname=db["NAME"], autocommit=True) as other:
                    other.execute("SET lock_timeout = '2s'")
                    other.execute(
                        "SELECT 1 FROM django_migrations ORDER BY id LIMIT 1 FOR UPDATE")
                    seen["other_got_the_row"] = True
                cur.execute("SELECT 1")
        seen["hung_went_on"] = True
    except DatabaseError as exc:  # psycopg's AdminShutdown-like InternalError
        seen["hung_cut"] = str(exc).splitlines()[0]
print(json.dumps(seen))
"""


@pytest.mark.django_db
def test_a_session_hung_in_a_transaction_is_ended_and_its_locks_freed():
    from django.db import connection

    url = "postgres://{USER}@{HOST}:{PORT}/{NAME}".format(**connection.settings_dict)
    env = procs.child_env(DJANGO_SETTINGS_MODULE="portal.settings", DATABASE_URL=url,
                          DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_S="1")  # fmt: skip
    result = subprocess.run([procs.PYTHON, "-c", HUNG], cwd=procs.REPO, env=env,
                            capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert "idle_in_transaction_session_timeout=1s" in seen["options"]
    # Another session took the row the hung one held; the hung one's next statement failed.
    assert seen.get("other_got_the_row") is True
    assert "hung_went_on" not in seen
    assert "idle-in-transaction timeout" in seen["hung_cut"]
    env["DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_S"] = "0"
    result = subprocess.run([procs.PYTHON, "-c", HUNG], cwd=procs.REPO, env=env,
                            capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert json.loads(result.stdout) == {"options": ""}

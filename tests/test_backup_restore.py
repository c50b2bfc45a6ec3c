"""Backup and restore as docs/operations.md writes them, for real: objects made through the
services, `pg_dump -Fc` of the test database, `pg_restore` into a fresh database, then a
portal process on the restored database reads them back and decrypts the agent token with
the restored key, and `manage.py doctor` fails on it with any other key."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from agents.registration import register_node
from portal import crypto
from quotas.tenancy.services import create_tenant
from tests import procs

AGENT_TOKEN = "agent-token-kept-across-a-restore-0123"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path:
        return path
    message = f"{name} not found (Debian's postgresql-client package)"
    procs.unavailable(message)


def _psql(db: dict, database: str, sql: str) -> None:
    url = procs.database_url({**db, "NAME": database})
    subprocess.run([_tool("psql"), "--no-psqlrc", "-v", "ON_ERROR_STOP=1", "-c", sql, url],
                   check=True, capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.fixture
def restored_name() -> str:
    db = settings.DATABASES["default"]
    name = f"{db['NAME']}_restored_{uuid.uuid4().hex[:8]}"
    yield name
    _psql(db, "postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


READ_BACK = """
import json, django
django.setup()
from agents.models import Node
from quotas.models import Tenant
from portal.management import doctor
node = Node.objects.get(name="gpu-restored")
print(json.dumps({
    "tenants": sorted(Tenant.objects.values_list("slug", flat=True)),
    "agent_url": node.agent_url,
    "token": node.agent_token,
    "migrations": doctor.check_migrations().status,
}))
"""


def test_pg_dump_and_pg_restore_keep_the_objects_and_the_agent_tokens(
    transactional_db, alice, settings, tmp_path: Path, restored_name: str,
    child_env_for_test_db,
):  # fmt: skip
    pg_dump, pg_restore = _tool("pg_dump"), _tool("pg_restore")
    key = crypto.generate_key()
    settings.FIELD_ENCRYPTION_KEYS = [key]
    create_tenant(alice, admin=alice.username, slug="vision", name="Vision")
    register_node(name="gpu-restored", agent_url="http://10.0.0.5:9400", token=AGENT_TOKEN)

    db = settings.DATABASES["default"]
    dump = tmp_path / "portal.dump"
    subprocess.run([pg_dump, "--format=custom", "--file", str(dump), procs.database_url(db)],
                   check=True, capture_output=True, text=True, timeout=300)  # fmt: skip
    _psql(db, "postgres", f'CREATE DATABASE "{restored_name}"')
    restored_url = procs.database_url({**db, "NAME": restored_name})
    subprocess.run(
        [pg_restore, "--no-owner", "--exit-on-error", "--dbname", restored_url, str(dump)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip

    env = {**child_env_for_test_db, "DATABASE_URL": restored_url, "FIELD_ENCRYPTION_KEY": key}
    got = procs.run_python(READ_BACK, env)
    assert got == {"tenants": ["vision"], "agent_url": "http://10.0.0.5:9400",
                   "token": AGENT_TOKEN, "migrations": "ok"}  # fmt: skip

    def doctor_says(**overrides: str) -> dict:
        done = subprocess.run(
            [procs.PYTHON, "manage.py", "doctor", "--json", "--timeout", "1"],
            cwd=procs.REPO, env={**env, **overrides}, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        return {c["name"]: c for c in json.loads(done.stdout)["checks"]}

    assert doctor_says()["agent-tokens"]["status"] == "ok"
    # The database alone is not enough: without the key the tokens were stored with, the
    # poller cannot present them (what docs/operations.md says to back up with the dump).
    lost = doctor_says(FIELD_ENCRYPTION_KEY=crypto.generate_key())["agent-tokens"]
    assert lost["status"] == "FAIL" and "gpu-restored" in lost["message"], lost

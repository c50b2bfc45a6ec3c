"""The embedded default's files (its PostgreSQL data, generated secrets) are the portal user's
alone."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from portal import files
from tests import procs

# Starts the embedded PostgreSQL and writes to it, as the demo does on its first start.
PROBE = """
import django
from django.conf import settings
from django.db import connection
django.setup()
from portal import embedded_db
with embedded_db.running(embedded_db.Server(**settings.EMBEDDED_DATABASE)):
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS probe (x integer)")
        cursor.execute("INSERT INTO probe VALUES (1)")
    connection.close()
"""


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _start_embedded(var: Path) -> None:
    env = procs.embedded_env(var, DJANGO_SETTINGS_MODULE="portal.settings")
    # The umask most systems start with: files would come out world-readable by default.
    result = subprocess.run(
        ["sh", "-c", f'umask 022 && exec "{procs.PYTHON}" -c "$0"', PROBE],
        cwd=procs.REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_a_new_var_folder_and_its_files_are_owner_only(tmp_path):
    var = tmp_path / "var"
    _start_embedded(var)
    assert _mode(var) == 0o700
    for name in ("secret_key", "postgres-password", "postgres.log"):
        assert _mode(var / name) == 0o600, name
    # PostgreSQL's own data: the folder and every file in it are the portal user's alone.
    data = var / "postgres"
    assert _mode(data) == 0o700
    for path in data.rglob("*"):
        assert path.stat().st_uid == os.getuid(), path
        assert _mode(path) & 0o077 == 0, path
    assert len((var / "secret_key").read_text()) >= 50


def test_files_left_readable_by_others_are_tightened_at_start(tmp_path):
    var = tmp_path / "var"
    var.mkdir(mode=0o755)
    var.chmod(0o755)
    left = [("secret_key", "k" * 50), ("demo-admin-password", "pw"), ("postgres.log", "")]
    for name, text in left:
        (var / name).write_text(text)
        (var / name).chmod(0o644)
    _start_embedded(var)
    assert _mode(var) == 0o700
    for name in ("secret_key", "demo-admin-password", "postgres.log"):
        assert _mode(var / name) == 0o600, name
    # Tightened, not replaced: the same key and password are kept.
    assert (var / "secret_key").read_text() == "k" * 50
    assert (var / "demo-admin-password").read_text() == "pw"


def test_a_generated_secret_is_never_readable_by_others_even_for_a_moment(tmp_path, monkeypatch):
    seen: list[int] = []
    real_link = os.link

    def spy(src, dst, *args, **kwargs):
        # The moment it appears under its name, it is already complete and 0600.
        seen.append(stat.S_IMODE(os.stat(src).st_mode))
        return real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", spy)
    old = os.umask(0o022)
    try:
        secret = files.private_secret(tmp_path / "demo-admin-password", 12)
    finally:
        os.umask(old)
    assert seen == [0o600]
    assert _mode(tmp_path / "demo-admin-password") == 0o600
    assert files.private_secret(tmp_path / "demo-admin-password", 12) == secret
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo-admin-password"]


@pytest.mark.parametrize("name", ["demo-admin-password", "demo-agent-token"])
def test_the_demo_keeps_its_secrets_owner_only(tmp_path, settings, name):
    from portal.management.commands.demo import _var_secret

    settings.VAR_DIR = tmp_path
    old = os.umask(0o022)
    try:
        secret = _var_secret(name)
    finally:
        os.umask(old)
    assert secret and _mode(tmp_path / name) == 0o600

"""``manage.py import_nodes`` and ``manage.py ensure_admin``, a deployment's start-up
commands: they do what the import page and createsuperuser do, may run at every start,
and a bad file, value or environment is refused with a clear error and writes nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from agents.models import Node

pytestmark = pytest.mark.django_db

YAML = """\
- {name: gpu-01, agent_url: "http://10.0.0.1:9400", token: own-token}
- {name: gpu-02, agent_url: "http://10.0.0.2:9400"}
"""


def test_import_nodes_registers_a_file_and_again_changes_nothing(tmp_path, monkeypatch, capsys):
    path = tmp_path / "nodes.yaml"
    path.write_text(YAML)
    monkeypatch.setenv("FLEET_TOKEN", "fleet-token")
    call_command("import_nodes", str(path), "--update", "--token-env", "FLEET_TOKEN")
    assert "Created 2, updated 0, left 0" in capsys.readouterr().out
    tokens = {n.name: n.agent_token for n in Node.objects.all()}
    assert tokens == {"gpu-01": "own-token", "gpu-02": "fleet-token"}
    call_command("import_nodes", str(path), "--update", "--token-env", "FLEET_TOKEN")
    assert "Created 0, updated 0, left 2" in capsys.readouterr().out
    assert Node.objects.count() == 2


def test_import_nodes_in_csv_with_a_dry_run_writes_nothing(tmp_path, capsys):
    path = tmp_path / "nodes.csv"
    path.write_text("name,agent_url,token\ngpu-01,http://10.0.0.1:9400,t\n")
    call_command("import_nodes", str(path), "--dry-run")
    assert "Would create 1" in capsys.readouterr().out
    assert not Node.objects.exists()


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("nodes.txt", YAML, "give a .csv, .yaml or .yml file"),
        ("nodes.yaml", "- [not, a, mapping]\n", "must be a list of nodes"),
        ("nodes.yaml", "- {name: ok, agent_url: 'ftp://x'}\n", "Nothing was imported"),
        ("nodes.yaml", YAML + YAML, "Nothing was imported"),  # the same names twice
    ],
)
def test_import_nodes_refuses_a_bad_file_whole(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(CommandError, match=message):
        call_command("import_nodes", str(path))
    assert not Node.objects.exists()


def test_import_nodes_refuses_a_missing_file_or_token(tmp_path, monkeypatch):
    with pytest.raises(CommandError, match="No such file"):
        call_command("import_nodes", str(tmp_path / "none.yaml"))
    path = tmp_path / "nodes.yaml"
    path.write_text(YAML)
    monkeypatch.delenv("FLEET_TOKEN", raising=False)
    with pytest.raises(CommandError, match="FLEET_TOKEN is not set"):
        call_command("import_nodes", str(path), "--token-env", "FLEET_TOKEN")
    assert not Node.objects.exists()


def test_ensure_admin_creates_once_and_never_resets_the_password(monkeypatch, capsys):
    monkeypatch.setenv("DJANGO_SUPERUSER_USERNAME", "root")
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "first long password")
    monkeypatch.setenv("DJANGO_SUPERUSER_EMAIL", "root@example.com")
    call_command("ensure_admin")
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "a different password")
    call_command("ensure_admin")
    assert "left as it is" in capsys.readouterr().out
    user = get_user_model().objects.get(username="root")
    assert user.is_superuser and user.is_staff and user.email == "root@example.com"
    assert user.check_password("first long password")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DJANGO_SUPERUSER_PASSWORD": "first long password"}, "USERNAME is not set"),
        ({"DJANGO_SUPERUSER_USERNAME": "root"}, "PASSWORD is not set"),
        ({"DJANGO_SUPERUSER_USERNAME": "root", "DJANGO_SUPERUSER_PASSWORD": "root"}, "too"),
    ],
)
def test_ensure_admin_refuses_what_is_missing_or_weak(monkeypatch, env, message):
    for name in ("DJANGO_SUPERUSER_USERNAME", "DJANGO_SUPERUSER_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(CommandError, match=message):
        call_command("ensure_admin")
    assert not get_user_model().objects.filter(username="root").exists()

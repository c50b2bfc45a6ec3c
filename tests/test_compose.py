"""docker-compose.yml, checked by reading (Docker cannot run here): its workers consume
every queue the portal routes to, it sets only settings the portal reads, and its
bootstrap service registers exactly the nodes its simulator serves, with the simulator's
token, through the same commands a shell would run (run here against the database)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command

from agents.gpu_agent.cli import build_parser
from agents.models import Node

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def _default(value: str) -> str:
    """${NAME:-default} as compose reads it with NAME unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def test_the_workers_consume_every_queue_the_portal_routes_to():
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    routed.add(settings.CELERY_TASK_DEFAULT_QUEUE)
    consumed = set()
    for service in SERVICES.values():
        command = service.get("command") or []
        if command[:4] == ["celery", "-A", "portal", "worker"]:
            consumed |= set(command[command.index("-Q") + 1].split(","))
    assert consumed == routed
    beat = ["celery", "-A", "portal", "beat"]
    beats = [s for s in SERVICES.values() if (s.get("command") or [])[:4] == beat]
    assert len(beats) == 1


def test_it_sets_only_settings_the_portal_reads():
    source = (ROOT / "portal" / "settings.py").read_text()
    read = set(re.findall(r'env_[a-z]+\(\s*"([A-Z][A-Z0-9_]*)"', source))
    set_here = set(SERVICES["web"]["environment"])
    assert set_here - read == set()


@pytest.mark.django_db
def test_bootstrap_registers_the_simulators_nodes_and_the_admin(monkeypatch, capsys):
    bootstrap = SERVICES["bootstrap"]
    assert bootstrap["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    [mount] = bootstrap["volumes"]
    source, target, _ = mount.split(":")
    sim = SERVICES["agent-sim"]
    agent = build_parser().parse_args(sim["command"][1:])
    ports = [agent.listen[1] + i for i in range(agent.nodes)]
    nodes = yaml.safe_load((ROOT / source).read_text())["nodes"]
    assert [n["agent_url"] for n in nodes] == [f"http://agent-sim:{p}" for p in ports]
    env = {
        k: _default(v) for k, v in bootstrap["environment"].items() if "${" not in v or ":-" in v
    }
    assert env["AGENT_TOKEN"] == _default(sim["environment"]["GPU_AGENT_TOKEN"])
    for name in ("DJANGO_SUPERUSER_USERNAME", "AGENT_TOKEN"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "a long compose password")

    [shell, flag, script] = bootstrap["command"]
    assert (shell, flag) == ("sh", "-c")
    for _twice in range(2):  # every `docker compose up` runs it again
        for step in script.split(" && "):
            words = shlex.split(step)
            assert words[:2] == ["python", "manage.py"]
            call_command(*[str(ROOT / source) if w == target else w for w in words[2:]])
    assert sorted(Node.objects.values_list("agent_url", flat=True)) == sorted(
        n["agent_url"] for n in nodes
    )
    node = Node.objects.get(name=nodes[0]["name"])
    assert node.agent_token == env["AGENT_TOKEN"]
    assert node.labels == {"zone": "compose"}
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.check_password("a long compose password")
    assert "left 4 as they are" in capsys.readouterr().out

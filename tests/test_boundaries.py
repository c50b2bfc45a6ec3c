"""The apps depend one way and meet only at their public modules (docs/architecture.md).

agents (inventory, registration, the agent client, the node agent) is at the bottom;
telemetry reads it, never the reverse; the apps above use telemetry only through
``telemetry.interface``. Read from the source with ``ast``, so an import inside a
function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APPS = ("audit", "agents", "telemetry", "pools", "quotas", "reports", "alerts", "tokens", "portal")
# Bottom to top: an app imports only apps below it (portal wires them all together).
LAYERS = ("audit", "agents", "telemetry", "pools", "quotas", "reports", "alerts", "tokens")
# What other apps may import of each app; everything else is the app's own business.
PUBLIC = {
    "agents": {
        "agents.models", "agents.choices", "agents.fanout", "agents.gpu_agent.schema",
        "agents.filtersets", "agents.permissions", "agents.api.urls", "agents.urls",
        "agents.gpu_agent.desired",
    },
    "telemetry": {"telemetry.interface"},
    "audit": {"audit.interface"},
    "pools": {"pools.models", "pools.choices", "pools.interface", "pools.permissions"},
    "quotas": {"quotas.models", "quotas.choices", "quotas.interface", "quotas.permissions"},
    "reports": {"reports.models", "reports.choices", "reports.interface"},
}  # fmt: skip
# The project package wires each app's URLs and websocket routes in; that is not use.
WIRING = {
    "portal": {
        "telemetry.api.urls", "telemetry.urls", "telemetry.routing", "telemetry.tasks",
        "pools.api.operation_urls", "pools.api.urls", "pools.urls", "pools.routing",
        "pools.demo", "alerts.api.urls", "alerts.urls", "alerts.demo", "alerts.ws_routing",
        "quotas.api.urls", "quotas.urls", "quotas.api.request_urls", "quotas.request_urls",
        "quotas.routing", "audit.api.urls", "audit.urls", "reports.api.urls", "reports.urls",
        "tokens.api.urls", "tokens.urls", "quotas.demo", "reports.demo", "telemetry.demo",
        "agents.gpu_agent.replay",
    },
}  # fmt: skip


def _modules() -> list[tuple[str, Path]]:
    found = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found.append((module.removesuffix(".__init__"), path))
    return found


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            # ``from telemetry import readings`` imports the module telemetry.readings.
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _owner(name: str) -> str | None:
    top = name.split(".")[0]
    return top if top in APPS else None


def _violations() -> list[str]:
    problems = []
    for module, path in _modules():
        app = module.split(".")[0]
        for name in sorted(_imports(path)):
            owner = _owner(name)
            if owner is None or owner == app or owner == "portal":
                continue
            if app == "audit":
                problems.append(f"{module} imports {name}: audit imports no app")
                continue
            if app == "agents" and owner != "audit":
                problems.append(f"{module} imports {name}: agents is the bottom layer")
                continue
            if app != "portal" and LAYERS.index(owner) > LAYERS.index(app):
                problems.append(f"{module} imports {name}: {owner} is above {app}")
                continue
            public = PUBLIC.get(owner, set()) | WIRING.get(app, set())
            # ``from telemetry import interface`` names the packages on the way too: those
            # are allowed, any module under them must be public.
            if any(p == name or p.startswith(name + ".") or name.startswith(p + ".")
                   for p in public):  # fmt: skip
                continue
            problems.append(f"{module} imports {name}: not {owner}'s public interface")
    return problems


def test_apps_meet_only_at_public_modules_and_agents_imports_no_app_above_it():
    assert _violations() == []


def test_the_node_agent_imports_nothing_of_django_or_the_portal():
    for module, path in _modules():
        if not module.startswith("agents.gpu_agent"):
            continue
        for name in _imports(path):
            top = name.split(".")[0]
            assert top not in {"django", "rest_framework", "channels", "celery", *APPS} or (
                name.startswith("agents.gpu_agent")
            ), f"{module} imports {name}"


def test_the_command_line_client_imports_nothing_of_django_or_the_portal():
    # gpuctl is a client of the REST API: it must run where only Python is installed.
    for path in sorted((ROOT / "gpuctl").rglob("*.py")):
        for name in _imports(path):
            top = name.split(".")[0]
            assert top not in {"django", "rest_framework", "channels", "celery", *APPS}, (
                f"{path.name} imports {name}"
            )


def test_the_walk_catches_a_reach_into_telemetrys_private_modules(tmp_path, monkeypatch):
    # The guard guards: a module of another app importing telemetry.readings is reported.
    pools = tmp_path / "pools"
    pools.mkdir()
    (pools / "services.py").write_text(
        "from telemetry import readings\nfrom telemetry.interface import latest\n"
    )
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "models.py").write_text("def f():\n    from telemetry import live\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "ROOT", tmp_path)
    assert _violations() == [
        "agents.models imports telemetry: agents is the bottom layer",
        "agents.models imports telemetry.live: agents is the bottom layer",
        "pools.services imports telemetry.readings: not telemetry's public interface",
    ]


@pytest.mark.parametrize("namespace", ["fleet", "live", "rollup"])
def test_no_other_app_names_telemetrys_redis_keys(namespace):
    for module, path in _modules():
        if module.startswith("telemetry"):
            continue
        text = path.read_text()
        assert f'redis_client.key("{namespace}"' not in text, module

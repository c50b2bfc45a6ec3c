"""The apps depend one way and meet only at their public modules (docs/architecture.md).

Layers, bottom to top: portal's toolbox (the low-level helpers any app may use), audit,
agents (inventory, registration, the agent client, the node agent), telemetry, pools,
quotas, reports, clusters (Kubernetes clusters the quotas are written into), alerts, tokens,
directory, and portal's wiring (settings, URLs, ASGI, Celery, the demo command: what puts the
apps together). A module imports only its own layer or those below
it, the apps above use telemetry only through ``telemetry.interface``, and no module
imports itself round a circle of others; in quotas, the tenancy half never imports the
requests half built on it; in alerts, the sources of events sit over the rules and events
and under the tasks. No module reaches into another object's private members (``x._y``).
Read from the source with ``ast``, so an import inside a function, or under
``TYPE_CHECKING``, counts as much as one at the top.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APPS = ("audit", "agents", "telemetry", "pools", "quotas", "clusters", "reports", "alerts",
        "tokens", "directory", "portal")  # fmt: skip
# Bottom to top: a module imports only from its own layer and those below it.
# clusters above reports: it tells a cluster's workloads what reports decided (a reclaim).
LAYERS = ("portal toolbox", "audit", "agents", "telemetry", "pools", "quotas", "reports",
          "clusters", "alerts", "tokens", "directory", "portal wiring")  # fmt: skip
# portal's composition root (and what only it uses): it imports the apps to put them
# together, so nothing else imports it. Every other module of portal is its toolbox.
PORTAL_WIRING = {
    "portal",  # the package's __init__ loads the Celery app
    "portal.celery", "portal.settings", "portal.urls", "portal.api_urls", "portal.asgi",
    "portal.apps", "portal.tasks", "portal.views", "portal.embedded", "portal.management",
}  # fmt: skip
# What other apps may import of each app; everything else is the app's own business.
PUBLIC = {
    "agents": {
        "agents.models", "agents.choices", "agents.client", "agents.gpu_agent.schema",
        "agents.filtersets", "agents.permissions", "agents.api.urls", "agents.urls",
        "agents.gpu_agent.desired", "agents.interface",
    },
    "telemetry": {"telemetry.interface"},
    "audit": {"audit.interface"},
    "pools": {"pools.models", "pools.choices", "pools.interface", "pools.permissions"},
    "quotas": {"quotas.models", "quotas.choices", "quotas.interface", "quotas.permissions"},
    "reports": {"reports.models", "reports.choices", "reports.interface"},
    "tokens": {"tokens.interface"},
    "clusters": {"clusters.models", "clusters.choices"},
}  # fmt: skip
# The project package wires each app's URLs and websocket routes in; that is not use.
WIRING = {
    "portal": {
        "telemetry.api.urls", "telemetry.urls", "telemetry.routing", "telemetry.tasks",
        "pools.api.operation_urls", "pools.api.urls", "pools.urls", "pools.routing",
        "pools.demo", "alerts.api.urls", "alerts.urls", "alerts.demo", "alerts.routing",
        "quotas.tenancy.api.urls", "quotas.tenancy.urls", "quotas.requests.api.urls",
        "quotas.requests.urls", "quotas.requests.routing", "audit.api.urls", "audit.urls",
        "reports.api.urls", "reports.urls", "clusters.urls", "clusters.api.urls",
        "tokens.api.urls", "tokens.urls", "directory.urls", "quotas.demo", "reports.demo",
        "telemetry.demo",
        "agents.gpu_agent.replay",
    },
}  # fmt: skip

# quotas is one Django app in two halves: GPU requests are built on tenancy, never the
# reverse, and what both share (models, choices, the role rules) imports neither half.
QUOTAS_HALVES = ("quotas.tenancy", "quotas.requests")
QUOTAS_SHARED = {"quotas.models", "quotas.choices", "quotas.permissions"}


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


def _layer(module: str) -> str:
    app = module.split(".")[0]
    if app != "portal":
        return app
    wiring = any(module == w or module.startswith(w + ".") for w in PORTAL_WIRING - {"portal"})
    return "portal wiring" if wiring or module == "portal" else "portal toolbox"


def _targets(module: str, path: Path, known: set[str]) -> set[str]:
    """The project's modules that ``module`` imports. ``from a import b`` imports the
    module a.b when there is one, else names of a's ``__init__``; a parent package run on
    the way (Python's doing, not the importer's) is no edge."""

    def nearest(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(nearest(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: up from the importer's package
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else nearest(base))
    found.discard(None)
    found.discard(module)
    return found


def _graph() -> dict[str, set[str]]:
    modules = dict(_modules())
    return {m: _targets(m, path, set(modules)) for m, path in modules.items()}


def _upward(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, targets in sorted(graph.items()):
        here = LAYERS.index(_layer(module))
        for target in sorted(targets):
            if LAYERS.index(_layer(target)) > here:
                problems.append(
                    f"{module} imports {target}: {_layer(target)} is above {_layer(module)}"
                )
    return problems


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle for each group of modules that import each other (Tarjan's strongly
    connected components), as the shortest way from the group's first module back to it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    circles = []
    for group in groups:
        start = min(group)
        came_from: dict[str, str] = {}
        queue = deque([start])
        while queue:
            v = queue.popleft()
            for w in sorted(graph[v] & group):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    circles.append([*reversed(path), start])
                    queue.clear()
                    break
                if w not in came_from:
                    came_from[w] = v
                    queue.append(w)
    return sorted(circles)


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _across_quotas_halves(graph: dict[str, set[str]]) -> list[str]:
    tenancy, requests = QUOTAS_HALVES
    return [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if (_in(module, tenancy) and _in(target, requests))
        or (module in QUOTAS_SHARED and any(_in(target, half) for half in QUOTAS_HALVES))
    ]


# alerts: each source of events (alerts.sources) over the rules and events they share, the
# beat's tasks on top of them all.
ALERTS_BELOW_SOURCES = {"alerts.rules", "alerts.events", "alerts.evaluate", "alerts.recipients",
                        "alerts.outbox"}  # fmt: skip


def _alerts_out_of_order(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if target == "alerts.tasks"
        or (module in ALERTS_BELOW_SOURCES and _in(target, "alerts.sources"))
    ]


def _violations() -> list[str]:
    """Imports of another app's private modules (the layers are ``_upward``'s)."""
    problems = []
    found = _modules()
    modules = {module for module, _ in found}
    for module, path in found:
        app = module.split(".")[0]
        for name in sorted(_imports(path)):
            owner = _owner(name)
            if owner is None or owner == app or owner == "portal":
                continue
            if LAYERS.index(owner) > LAYERS.index(_layer(module)):
                continue  # upward: reported by _upward, with the module it reaches
            public = PUBLIC.get(owner, set()) | WIRING.get(app, set())
            # ``from telemetry import interface`` names the packages on the way too: those
            # are allowed, any module under them must be public.
            # A public package's names are public, not its modules (agents.client's own).
            if any(p == name or p.startswith(name + ".")
                   or (name.startswith(p + ".") and name not in modules)
                   for p in public):  # fmt: skip
                continue
            problems.append(f"{module} imports {name}: not {owner}'s public interface")
    return problems


def test_apps_meet_only_at_public_modules():
    assert _violations() == []


def test_no_module_imports_from_a_layer_above_its_own():
    # An app imports only apps below it and portal's toolbox; the toolbox imports no app;
    # only portal's wiring imports the apps' URLs, routes and seeds.
    assert _upward(_graph()) == []


def test_no_import_circle_between_modules():
    circles = _cycles(_graph())
    assert circles == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def _private_imports(path: Path) -> list[str]:
    """``from a.b import _c``: a name its module keeps to itself, used by another."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.level or _owner(node.module or "")):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    module = f"{node.module}." if node.module else ""
                    found.append(f"{'.' * node.level}{module}{alias.name}")
    return found


def test_no_module_imports_another_modules_private_names():
    # A leading underscore says "mine": a module that needs it elsewhere makes it public,
    # so that whoever changes it sees who relies on it.
    problems = [f"{module} imports {name}" for module, path in _modules()
                for name in _private_imports(path)]  # fmt: skip
    assert problems == []


# Underscored names that are public by their library's own convention (Django's model API),
# and, per module, a third party's private member it has no public way to read.
CONVENTIONAL_PRIVATE = {"_meta", "_default_manager", "_state"}
THIRD_PARTY_PRIVATE = {
    "portal.metrics": {"_collector_to_names"},  # prometheus_client lists no registered collectors
    # Where drf-spectacular builds a serializer's component: no public hook sets "required".
    "portal.api_docs": {"_map_basic_serializer"},
}


def _private_attributes(path: Path) -> list[str]:
    """``x._y`` where x is not ``self`` or ``cls``: another object's private member (an
    instance's or a module's). Generated code (``*_pb2.py``) is protobuf's business."""
    if path.name.endswith("_pb2.py"):
        return []
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and node.attr not in CONVENTIONAL_PRIVATE
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append((node.lineno, f"{ast.unparse(node)} (line {node.lineno})"))
    return [reach for _, reach in sorted(found)]


def test_no_module_reaches_into_another_objects_private_members():
    # What a class keeps to itself is reached only through ``self``: a batch asks its pool
    # for a connection (``pool.checkout``), not ``pool._idle``.
    problems = [
        f"{module}: {reach}"
        for module, path in _modules()
        for reach in _private_attributes(path)
        if reach.split(" ")[0].rpartition(".")[2] not in THIRD_PARTY_PRIVATE.get(module, ())
    ]
    assert problems == []


def test_the_private_member_check_sees_a_reach_through_an_attribute_or_a_module(tmp_path):
    source = tmp_path / "x.py"
    source.write_text(
        "from agents import client\nclass A:\n    def f(self):\n"
        "        self._mine()\n        self.pool._checkout()\n        client._PREPARED_MAX\n"
        "        return cls._also_mine, self.model._meta, self.__class__\n"
    )
    assert _private_attributes(source) == [
        "self.pool._checkout (line 5)",
        "client._PREPARED_MAX (line 6)",
    ]


def test_a_public_packages_modules_are_its_own(tmp_path, monkeypatch):
    # agents.client is public as a package: its names, not its modules.
    (tmp_path / "agents" / "client").mkdir(parents=True)
    for name in ("__init__", "pool"):
        (tmp_path / "agents" / "client" / f"{name}.py").write_text("")
    (tmp_path / "pools").mkdir()
    (tmp_path / "pools" / "sync.py").write_text(
        "from agents import client\nfrom agents.client import Pool\n"
        "from agents.client.pool import Pool\n"
    )
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "ROOT", tmp_path)
    assert _violations() == ["pools.sync imports agents.client.pool: not agents's public interface"]


def test_the_private_name_check_sees_absolute_and_relative_imports(tmp_path):
    source = tmp_path / "x.py"
    source.write_text(
        "from pools.services import _give_back, picks\nfrom . import _mine\n"
        "from os import _exit\nfrom pools import __version__\n"
    )
    assert _private_imports(source) == ["pools.services._give_back", "._mine"]


def test_quotas_tenancy_never_imports_its_requests_half():
    assert _across_quotas_halves(_graph()) == []


def test_alerts_sources_sit_over_rules_and_events_with_tasks_on_top():
    assert _alerts_out_of_order(_graph()) == []


def test_the_alerts_check_catches_a_source_importing_tasks_or_the_rules_a_source():
    graph = {
        "alerts.sources.metrics": {"alerts.rules", "alerts.tasks"},
        "alerts.rules": {"alerts.sources.business"}, "alerts.tasks": {"alerts.sources.business"},
        "alerts.sources.business": {"alerts.events", "alerts.sources.reclaim"},
    }  # fmt: skip
    assert _alerts_out_of_order(graph) == [
        "alerts.rules imports alerts.sources.business",
        "alerts.sources.metrics imports alerts.tasks",
    ]


def test_the_halves_check_catches_tenancy_or_a_shared_module_reaching_requests():
    graph = {
        "quotas.tenancy.views": {"quotas.requests.services", "quotas.permissions"},
        "quotas.requests.services": {"quotas.tenancy.usage", "quotas.permissions"},
        "quotas.permissions": {"quotas.requests.permissions"}, "quotas.interface": {
            "quotas.tenancy.services", "quotas.requests.facts"},
        "quotas.requests.permissions": {"quotas.permissions"}, "quotas.tenancy": set(),
    }  # fmt: skip
    assert _across_quotas_halves(graph) == [
        "quotas.permissions imports quotas.requests.permissions",
        "quotas.tenancy.views imports quotas.requests.services",
    ]


def test_the_checks_catch_a_circle_and_an_upward_import():
    # The guards guard: a synthetic graph with a three-module circle beside a clean chain,
    # an app reaching up into another, and the toolbox and an app reaching portal's wiring.
    graph = {
        "alerts.a": {"alerts.b"}, "alerts.b": {"alerts.c", "audit.interface"},
        "alerts.c": {"alerts.a"}, "alerts.d": {"alerts.a"},
        "agents.models": {"telemetry.live", "portal.crypto"}, "telemetry.live": set(),
        "portal.crypto": {"quotas.models"}, "quotas.models": {"portal.urls"},
        "portal.urls": {"quotas.models"}, "audit.interface": set(),
    }  # fmt: skip
    assert _cycles(graph) == [
        ["alerts.a", "alerts.b", "alerts.c", "alerts.a"],
        ["portal.urls", "quotas.models", "portal.urls"],
    ]
    assert _upward(graph) == [
        "agents.models imports telemetry.live: telemetry is above agents",
        "portal.crypto imports quotas.models: quotas is above portal toolbox",
        "quotas.models imports portal.urls: portal wiring is above quotas",
    ]
    assert _cycles({"a.x": {"a.y"}, "a.y": set()}) == []


def test_the_graph_resolves_imports_to_modules(tmp_path, monkeypatch):
    # ``from portal import redis_client`` reaches portal.redis_client, not the package's
    # __init__ (wiring); a name of an __init__ and an import in a function reach the package.
    (tmp_path / "portal").mkdir()
    for name in ("__init__", "redis_client", "urls"):
        (tmp_path / "portal" / f"{name}.py").write_text("")
    (tmp_path / "pools").mkdir()
    (tmp_path / "pools" / "__init__.py").write_text("")
    (tmp_path / "pools" / "live.py").write_text(
        "from portal import redis_client\ndef f():\n    from portal import celery_app\n"
    )
    (tmp_path / "pools" / "views.py").write_text("from . import live\nimport portal.urls\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "ROOT", tmp_path)
    graph = _graph()
    assert graph["pools.live"] == {"portal.redis_client", "portal"}
    assert graph["pools.views"] == {"pools.live", "portal.urls"}
    assert _upward(graph) == [
        "pools.live imports portal: portal wiring is above pools",
        "pools.views imports portal.urls: portal wiring is above pools",
    ]


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
    # The guard guards: a module of another app importing telemetry.readings is reported,
    # and agents reaching up into telemetry is an upward import, even inside a function.
    pools = tmp_path / "pools"
    pools.mkdir()
    (pools / "services.py").write_text(
        "from telemetry import readings\nfrom telemetry.interface import latest\n"
    )
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "models.py").write_text("def f():\n    from telemetry import live\n")
    (tmp_path / "telemetry").mkdir()
    for name in ("live", "readings", "interface"):
        (tmp_path / "telemetry" / f"{name}.py").write_text("")
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "ROOT", tmp_path)
    assert _violations() == [
        "pools.services imports telemetry.readings: not telemetry's public interface",
    ]
    assert _upward(_graph()) == [
        "agents.models imports telemetry.live: telemetry is above agents",
    ]


@pytest.mark.parametrize("namespace", ["fleet", "live", "rollup"])
def test_no_other_app_names_telemetrys_redis_keys(namespace):
    for module, path in _modules():
        if module.startswith("telemetry"):
            continue
        text = path.read_text()
        assert f'redis_client.key("{namespace}"' not in text, module

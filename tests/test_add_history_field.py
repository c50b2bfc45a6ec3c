"""Adding a field to history is one declaration in the reading schema plus a migration.

A child process edits the declaration of ``utilization_memory_pct`` in the schema's source
(``history=History("memory_util")``, nothing else), then, on a scratch PostgreSQL
database and the suite's Redis: makemigrations finds exactly the four new rollup columns,
the migration's operations apply, and a cycle buffered, flushed and folded comes back
through the history query and telemetry's interface with the new field.
"""

from __future__ import annotations

import textwrap
import uuid

import psycopg
import pytest
from django.conf import settings

from tests import procs

CHILD = textwrap.dedent(
    """
    import importlib.util, json, sys
    from datetime import datetime, timedelta, UTC
    from io import StringIO
    from pathlib import Path

    # The one declaration: history keeps the memory-controller utilization too.
    source = Path("agents/gpu_agent/schema.py").read_text()
    declared = 'Field(\\n        "utilization_memory_pct", "int", "%", 0, 100, live=True,'
    assert declared in source
    source = source.replace(declared, declared + ' history=History("memory_util"),')
    spec = importlib.util.spec_from_loader("agents.gpu_agent.schema", loader=None)
    schema = importlib.util.module_from_spec(spec)
    sys.modules["agents.gpu_agent.schema"] = schema
    exec(compile(source, "schema.py", "exec"), schema.__dict__)

    import django
    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.db.migrations.autodetector import MigrationAutodetector
    from django.db.migrations.loader import MigrationLoader
    from django.db.migrations.state import ProjectState

    call_command("migrate", verbosity=0)
    # What makemigrations would write: the changes between the migrations and the models.
    loader = MigrationLoader(connection)
    changes = MigrationAutodetector(
        loader.project_state(), ProjectState.from_apps(django.apps.apps)
    ).changes(graph=loader.graph)
    operations = [op for m in changes.get("telemetry", []) for op in m.operations]
    added = sorted((op.model_name, op.name) for op in operations)
    others = {app for app in changes if app != "telemetry"}
    # Apply those operations as the migration would.
    from telemetry.models import GpuHour, GpuMinute
    with connection.schema_editor() as editor:
        for op in operations:
            model = {"gpuminute": GpuMinute, "gpuhour": GpuHour}[op.model_name]
            editor.add_field(model, model._meta.get_field(op.name))

    from agents.models import GPU, Node
    from telemetry import history, interface, rollups, sample_buffer
    node = Node.objects.create(name="n1", agent_url="http://n1:9400")
    card = GPU.objects.create(node=node, index=0, uuid="GPU-A", model="H100")
    t0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    for second, value in ((0, 30), (20, 50)):
        gpu = {"uuid": "GPU-A", "index": 0, "utilization_gpu_pct": 90,
               "utilization_memory_pct": value}
        sample_buffer.buffer_samples({node.pk: {"gpus": [gpu]}}, {"GPU-A": card.pk},
                                     t0 + timedelta(seconds=second))
    rollups.flush(t0 + timedelta(minutes=1))
    rollups.flush(t0 + timedelta(minutes=rollups.FOLD_EVERY))
    points = history.series([card.pk], t0, t0 + timedelta(hours=1))["points"]
    usage = interface.card_usage([card.pk], t0, t0 + timedelta(hours=2))[card.pk]
    hour = GpuHour.objects.get(gpu=card)
    print(json.dumps({
        "added": added, "others": sorted(others),
        "point": [points[0]["memory_util_avg"], points[0]["memory_util_max"]],
        "usage": [usage.values["memory_util_avg"], usage.values["memory_util_max"]],
        "hour": [hour.memory_util_avg, hour.memory_util_max],
    }))
    """
)


@pytest.fixture
def scratch_database():
    name = f"gp_addfield_{uuid.uuid4().hex[:8]}"
    params = settings.DATABASES["default"]
    admin = psycopg.connect(
        host=params["HOST"], port=params["PORT"] or 5432, user=params["USER"],
        password=params["PASSWORD"] or None, dbname="postgres", autocommit=True,
    )  # fmt: skip
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield procs.database_url({**params, "NAME": name})
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def test_one_declaration_and_its_migration_add_a_field_to_history(scratch_database):
    env = procs.child_env(
        DATABASE_URL=scratch_database, REDIS_URL=settings.REDIS_URL,
        SECRET_KEY="insecure-test-only-key", DJANGO_SETTINGS_MODULE="portal.settings",
    )  # fmt: skip
    out = procs.run_python(CHILD, env)
    assert out["added"] == [
        ["gpuhour", "memory_util_avg"], ["gpuhour", "memory_util_max"],
        ["gpuminute", "memory_util_avg"], ["gpuminute", "memory_util_max"],
    ]  # fmt: skip
    assert out["others"] == []
    assert out["point"] == out["usage"] == out["hour"] == [40.0, 50.0]

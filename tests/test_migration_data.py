"""What the data migrations wrote is there again after a transactional test's flush
(tests/conftest.py), so a test finds the same database wherever xdist runs it."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations import RunPython

from alerts.models import Rule
from tests import procs
from tests.conftest import DATA_MIGRATIONS, SCHEMA_MIGRATIONS

FIELDS = ("key", "name", "condition", "comparison", "threshold", "for_seconds", "severity",
          "scope_kind", "renotify_seconds", "enabled", "builtin")  # fmt: skip


def _rules() -> list[tuple]:
    return list(Rule.objects.order_by("key").values_list(*FIELDS))


def test_every_run_python_of_the_portal_is_classed_as_data_or_schema():
    # Django's own (content types, permissions) come back through its post_migrate.
    loader = MigrationLoader(None, ignore_no_migrations=True)
    with_code = {
        key for key, migration in loader.disk_migrations.items()
        if (procs.REPO / migration.__module__.split(".")[0]).is_dir()
        and any(isinstance(op, RunPython) for op in migration.operations)
    }  # fmt: skip
    assert with_code == DATA_MIGRATIONS | SCHEMA_MIGRATIONS
    assert not DATA_MIGRATIONS & SCHEMA_MIGRATIONS


@pytest.fixture
def migrated_rules(django_db_setup, django_db_blocker) -> list[tuple]:
    with django_db_blocker.unblock():
        return _rules()


def test_a_flush_gets_back_the_rules_migrate_wrote(migrated_rules, transactional_db):
    assert len(migrated_rules) >= 2  # the defaults and the notice rules
    Rule.objects.filter(builtin=True).update(enabled=False)
    call_command("flush", interactive=False, verbosity=0)
    assert _rules() == migrated_rules

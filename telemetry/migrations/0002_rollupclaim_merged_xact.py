"""Each merged claim records its transaction (``pg_current_xact_id()``), so the idle scan
can ask which minutes were merged after its last pass's snapshot (telemetry.changes)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0001_initial")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE telemetry_rollupclaim "
            "ADD COLUMN merged_xact xid8 NOT NULL DEFAULT pg_current_xact_id()",
            "ALTER TABLE telemetry_rollupclaim DROP COLUMN merged_xact",
        )
    ]

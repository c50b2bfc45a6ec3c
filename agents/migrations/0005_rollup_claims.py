"""The rollup claims already merged, so a claim retried after its commit is not merged twice.

A plain table, written only by ``agents.rollups`` in raw SQL inside the transaction that
merges the claim; no model, since nothing else reads it.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0004_node_poll_after_agent_url"),
    ]

    operations = [
        migrations.RunSQL(
            sql=(
                "CREATE TABLE agents_rollupclaim ("
                "claim varchar(200) NOT NULL PRIMARY KEY, minute bigint NOT NULL)"
            ),
            reverse_sql="DROP TABLE agents_rollupclaim",
        ),
    ]

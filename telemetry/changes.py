"""Which rollup minutes changed since a snapshot: for passes that keep what they read
(the idle scan) and must know when a minute they read was merged again later.

Every merge of the sample buffer records its claim in ``telemetry_rollupclaim`` in the
transaction that writes the rows; the column ``merged_xact`` (its default,
``pg_current_xact_id()``) is that transaction. A reader takes ``snapshot()`` before it
reads the rollups; a claim whose transaction that snapshot does not see was merged
after (or while) it read; the fold's row (``fold:hours``) names no minute. Rollups
written past the buffer (the demo's fill, the benches) are not seen here: readers keep
a full pass for those.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection

from telemetry.rollup_sql import CLAIMS_TABLE
from telemetry.sample_buffer import minute_start


def snapshot() -> str:
    """The database's snapshot now, as text, for ``merged_since`` later."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_snapshot()::text")
        return cursor.fetchone()[0]


def merged_since(taken: str, start: datetime) -> datetime | None:
    """The earliest minute at or after ``start`` merged by a transaction that the snapshot
    ``taken`` did not see (None: none)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT min((regexp_match(claim, ':claim:(\\d+):'))[1]::bigint)
                  FROM {CLAIMS_TABLE}
                 WHERE NOT pg_visible_in_snapshot(merged_xact, %s::pg_snapshot)
                   AND (regexp_match(claim, ':claim:(\\d+):'))[1]::bigint >= %s""",  # noqa: S608
            [taken, int(start.timestamp()) // 60],
        )
        minute = cursor.fetchone()[0]
    return None if minute is None else minute_start(minute)

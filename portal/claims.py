"""Insert a row once: the way the portal claims a key that must be acted on at most once
(an Idempotency-Key, a digest sent), on the row's unique index. (A request step's notice
is claimed by marking its outbox row told: quotas.requests.notices.)

One ``INSERT ... ON CONFLICT DO NOTHING RETURNING`` statement, no savepoint: a concurrent
insert of the same key waits on the index for that transaction, then finds the key taken.
"""

from __future__ import annotations

from django.db import connections, models, router


def insert_once(obj: models.Model) -> bool:
    """Insert the unsaved instance unless a row with one of its unique keys is there: True
    (the instance then saved, its pk set) when this call inserted it, False when taken."""
    opts = obj._meta
    alias = router.db_for_write(type(obj))
    connection = connections[alias]
    auto_pk = opts.pk.db_returning
    fields = [f for f in opts.concrete_fields if not (f.primary_key and auto_pk)]
    values = [f.get_db_prep_save(f.pre_save(obj, add=True), connection) for f in fields]
    quote = connection.ops.quote_name
    sql = (
        f"INSERT INTO {quote(opts.db_table)} ({', '.join(quote(f.column) for f in fields)})"  # noqa: S608 (the model's own names)
        f" VALUES ({', '.join(['%s'] * len(fields))}) ON CONFLICT DO NOTHING"
        f" RETURNING {quote(opts.pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        row = cursor.fetchone()
    if row is None:
        return False
    obj.pk = row[0]
    obj._state.adding, obj._state.db = False, alias
    return True

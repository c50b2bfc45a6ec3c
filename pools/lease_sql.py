"""The allocation service's hot path as single SQL statements (data-modifying CTEs).

A placement is one statement: lock the chosen cards, take their capacity, insert the
lease and its allocations, return them. A release is one statement: claim the lease,
lock its live allocations, release them and give their capacity back. One statement is
atomic by itself, so outside a transaction none needs BEGIN and COMMIT, and a placement
that finds no room changes nothing (no savepoint either).

Why it stays race-free (the same rules as ``pools.services``):

- Cards are locked by a ``SELECT ... FOR UPDATE`` whose WHERE holds the fit on the card
  row's own columns: in READ COMMITTED PostgreSQL re-checks it on the newest version of
  each row it locks, so every locked card fits now. The UPDATE that takes the capacity
  repeats the fit, again on the card's own columns only (never on a joined table, whose
  rows PostgreSQL would not re-read), and runs only when all ``count`` cards were locked.
- Multi-card takes lock in card id order (LockRows runs above the sort), so two of them
  cannot deadlock; binpack's first try takes the best unlocked cards with SKIP LOCKED and
  never waits.
- A release locks the lease's allocations before reading their state and card, so an
  allocation a failover moved or stranded meanwhile is read as it is now: capacity goes
  back to the card that holds it, once.

Column lists come from the models (``_insert``), so a new field with a default needs no
change here.

The statements run through ``cursor()``: bound on the server and prepared on their
connection at their first run (``DATABASE_PREPARED_STATEMENTS``), so PostgreSQL parses and
plans each statement text once per connection instead of once per placement; that was
about half of its CPU per placement (docs/performance.md, issue #23).
"""

from __future__ import annotations

from functools import cache

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.backends.postgresql.base import ServerBindingCursor

from agents.models import GPU
from pools.choices import AllocationState, LeaseState
from pools.models import Allocation, Lease, PoolCard

_PC = PoolCard._meta.db_table
_GPU = GPU._meta.db_table

# The fit of one vGPU on a card, on the card row's own columns (cf. placement.fits), and
# the taking of it; values are parameters (compute, memory), so the statement's text is
# the same for every ask of a kind and a server-side prepared plan can be reused.
_FITS_SLICE = (
    "pc.cordoned_at IS NULL AND NOT pc.held_whole"
    " AND pc.compute_allocated <= pc.compute_capacity - %s::integer"
    " AND pc.memory_allocated_mib <= pc.memory_capacity_mib - %s::bigint"
)
_FITS_WHOLE = "pc.cordoned_at IS NULL AND NOT pc.held_whole AND pc.slices = 0"
_TAKE_SLICE = (
    "slices = pc.slices + 1, compute_allocated = pc.compute_allocated + %s::integer,"
    " memory_allocated_mib = pc.memory_allocated_mib + %s::bigint"
)
_TAKE_WHOLE = (
    "held_whole = TRUE, slices = 1, compute_allocated = pc.compute_capacity,"
    " memory_allocated_mib = pc.memory_capacity_mib"
)


class _PreparedCursor(ServerBindingCursor):
    """Values sent apart from the text, and the statement prepared at its first run."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True, binary=binary)


def cursor():
    """A cursor for the hot path's statements on Django's connection (its transaction, its
    wrappers and error mapping). Prepared statements belong to the psycopg connection:
    psycopg keeps the most recent 100 and forgets them all at a rollback. Django turns
    them off by default (``prepare_threshold=None``) for the sake of connection poolers
    that cannot keep them; with ``DATABASE_PREPARED_STATEMENTS`` off the hot path keeps
    to Django's own cursor. So it does while Django logs queries (DEBUG, a test capturing
    them): the log then shows each statement with its values, as it ran (psycopg names no
    query text for a prepared one)."""
    if not settings.DATABASE_PREPARED_STATEMENTS or connection.queries_logged:
        return connection.cursor()
    connection.ensure_connection()
    raw: psycopg.Connection = connection.connection
    if raw.prepare_threshold is None:  # Django's default: only explicit prepares count
        raw.prepare_threshold = _NEVER_BY_COUNT
    connection.validate_thread_sharing()
    return connection.make_cursor(_PreparedCursor(raw))


# Other server-binding cursors (Django's, were ``server_side_binding`` set) then still
# prepare nothing by themselves.
_NEVER_BY_COUNT = 2**31


def _fits(whole: bool, compute: int, memory: int) -> tuple[str, list]:
    return (_FITS_WHOLE, []) if whole else (_FITS_SLICE, [compute, memory])


@cache
def _columns(model: type[models.Model], computed: tuple[tuple[str, str], ...]):
    """The column list, the select list and the fields whose values are parameters, per
    model and computed columns: built once (the casts cost more than the insert's run)."""
    quote, given = connection.ops.quote_name, dict(computed)
    columns, select, fields = [], [], []
    for field in model._meta.concrete_fields:
        if field.primary_key:
            continue
        columns.append(quote(field.column))
        if field.column in given:
            select.append(given[field.column])
        else:
            select.append(f"%s::{field.cast_db_type(connection)}")
            fields.append(field)
    return ", ".join(columns), ", ".join(select), tuple(fields)


def _insert(obj: models.Model, computed: dict[str, str]) -> tuple[str, str, list]:
    """``(columns, select list, params)`` to insert ``obj``'s row with INSERT ... SELECT;
    the columns named in ``computed`` take those SQL expressions instead of its values.
    Each value is cast to its column's type (a NULL has none of its own)."""
    columns, select, fields = _columns(type(obj), tuple(sorted(computed.items())))
    # The connection itself, not the ``connection`` proxy: each field reads several of its
    # attributes, and a lookup through the proxy cost more than the field's own work.
    db = connections[DEFAULT_DB_ALIAS]
    params = [f.get_db_prep_save(f.pre_save(obj, True), db) for f in fields]
    return columns, select, params


def place(
    pick_sql: str, pick_params: list, count: int, whole: bool, lease: Lease,
    template: Allocation,
) -> list[tuple[int, int, int, int]]:  # fmt: skip
    """Run one placement: ``pick_sql`` selects and locks the cards (columns id, gpu_id,
    node_id, physical). Returns ``(lease id, allocation id, gpu id, node id)`` per vGPU,
    or ``[]`` when fewer than ``count`` cards were locked (then nothing changed)."""
    compute, memory = int(template.compute_pct), int(template.memory_mib)
    fits, fits_params = _fits(whole, compute, memory)
    take, take_params = (_TAKE_WHOLE, []) if whole else (_TAKE_SLICE, [compute, memory])
    lease_columns, lease_select, lease_params = _insert(lease, {})
    alloc_columns, alloc_select, alloc_params = _insert(
        template,
        {"lease_id": "lease.id", "gpu_id": "taken.gpu_id"}
        | ({"memory_mib": "taken.physical"} if whole else {}),
    )
    sql = f"""
        WITH pick AS ({pick_sql}),
        ok AS (SELECT count(*) = %s::integer AS ok FROM pick),
        taken AS (
            UPDATE {_PC} pc SET {take} FROM pick, ok
             WHERE ok.ok AND pc.id = pick.id AND {fits}
            RETURNING pc.gpu_id, pick.node_id, pick.physical
        ),
        lease AS (
            INSERT INTO {Lease._meta.db_table} ({lease_columns})
            SELECT {lease_select} FROM ok WHERE ok.ok RETURNING id
        ),
        made AS (
            INSERT INTO {Allocation._meta.db_table} ({alloc_columns})
            SELECT {alloc_select} FROM lease, taken ORDER BY taken.gpu_id
            RETURNING id, gpu_id
        )
        SELECT lease.id, made.id, made.gpu_id, taken.node_id
          FROM lease, made JOIN taken ON taken.gpu_id = made.gpu_id
         ORDER BY made.id"""  # noqa: S608 (names from the models, values as parameters)
    with cursor() as cur:
        cur.execute(sql, [*pick_params, count, *take_params, *fits_params, *lease_params,
                             *alloc_params])  # fmt: skip
        return cur.fetchall()


def take(pick_sql: str, pick_params: list, count: int, whole: bool, compute: int, memory: int):
    """Take ``count`` vGPUs' capacity on the cards ``pick_sql`` selects and locks, as
    ``place`` does, without a lease (a failover moves a slice it already has). Returns
    ``(gpu id, node id, physical MiB)`` per card, or ``[]`` (then nothing changed)."""
    fits, fits_params = _fits(whole, int(compute), int(memory))
    take_sql, take_params = (_TAKE_WHOLE, []) if whole else (_TAKE_SLICE, [compute, memory])
    sql = f"""
        WITH pick AS ({pick_sql}),
        ok AS (SELECT count(*) = %s::integer AS ok FROM pick)
        UPDATE {_PC} pc SET {take_sql} FROM pick, ok
         WHERE ok.ok AND pc.id = pick.id AND {fits}
        RETURNING pc.gpu_id, pick.node_id, pick.physical"""  # noqa: S608 (model names only)
    with cursor() as cur:
        cur.execute(sql, [*pick_params, count, *take_params, *fits_params])
        return sorted(cur.fetchall())


def lock_chosen(pool_id: int, gpu_ids: list[int], whole: bool, compute: int, memory: int):
    """A ``pick`` for ``place``: the chosen cards, locked in id order (waiting for them),
    when they still fit."""
    fits, params = _fits(whole, int(compute), int(memory))
    sql = f"""
        SELECT pc.id, pc.gpu_id, g.node_id, g.memory_total_mib AS physical
          FROM {_PC} pc JOIN {_GPU} g ON g.id = pc.gpu_id
         WHERE pc.pool_id = %s AND pc.gpu_id = ANY(%s) AND {fits}
         ORDER BY pc.gpu_id FOR UPDATE OF pc"""  # noqa: S608 (model names only)
    return sql, [pool_id, list(gpu_ids), *params]


_RELEASE_SQL = f"""
    WITH claimed AS (
        UPDATE {Lease._meta.db_table} SET state = %(lease_released)s, released_at = %(now)s
         WHERE id = %(lease)s AND state = %(lease_active)s RETURNING id
    ),
    live AS (
        SELECT a.id, a.gpu_id, a.pool_id, a.compute_pct, a.memory_mib, a.whole_card, a.state
          FROM {Allocation._meta.db_table} a
         WHERE a.lease_id = %(lease)s AND a.state <> %(released)s
           AND EXISTS (SELECT FROM claimed)
           FOR UPDATE
    ),
    gone AS (
        UPDATE {Allocation._meta.db_table} a SET state = %(released)s, released_at = %(now)s
          FROM live WHERE a.id = live.id RETURNING a.id
    ),
    back AS (
        SELECT gpu_id, pool_id, count(*) AS n, sum(compute_pct) AS c, sum(memory_mib) AS m,
               bool_or(whole_card) AS whole
          FROM live WHERE state = %(active)s AND gpu_id IS NOT NULL GROUP BY gpu_id, pool_id
    ),
    cards AS (
        SELECT pc.id, back.* FROM {_PC} pc JOIN back
            ON pc.gpu_id = back.gpu_id AND pc.pool_id = back.pool_id
         ORDER BY pc.gpu_id FOR UPDATE OF pc
    ),
    given AS (
        UPDATE {_PC} pc SET
            held_whole = CASE WHEN cards.whole THEN FALSE ELSE pc.held_whole END,
            slices = CASE WHEN cards.whole THEN 0 ELSE pc.slices - cards.n END,
            compute_allocated = CASE WHEN cards.whole THEN 0
                                     ELSE pc.compute_allocated - cards.c END,
            memory_allocated_mib = CASE WHEN cards.whole THEN 0
                                        ELSE pc.memory_allocated_mib - cards.m END
          FROM cards WHERE pc.id = cards.id RETURNING pc.id
    )
    SELECT (SELECT count(*) FROM claimed), g.node_id, (SELECT count(*) FROM gone),
           (SELECT count(*) FROM given)
      FROM (SELECT 1) one LEFT JOIN live ON TRUE LEFT JOIN {_GPU} g ON g.id = live.gpu_id
"""  # noqa: S608 (names from the models, values as parameters)


def release(lease_id: int, now) -> tuple[bool, set[int]]:
    """Release a lease in one statement: (whether this call released it, the nodes whose
    slices changed). Stranded allocations are only marked released (they hold nothing)."""
    params = {
        "lease": lease_id, "now": now, "lease_released": LeaseState.RELEASED,
        "lease_active": LeaseState.ACTIVE, "released": AllocationState.RELEASED,
        "active": AllocationState.ACTIVE,
    }  # fmt: skip
    with cursor() as cur:
        cur.execute(_RELEASE_SQL, params)
        rows = cur.fetchall()
    claimed = bool(rows and rows[0][0])
    return claimed, {row[1] for row in rows if row[1] is not None}

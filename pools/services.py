"""The allocation service: place, resize and release vGPUs without ever overcommitting.

Capacity is taken with one conditional UPDATE per chosen card (``compute_allocated +
x <= compute_capacity``...). PostgreSQL re-checks that condition on the row's newest
version when a racing transaction changed it first, so two requests can never both take
the last slice of a card: the loser updates no row, its savepoint rolls back and it
places again on fresh numbers. Only the chosen cards are locked, so requests on
different cards never wait for one another. The check constraints on ``PoolCard`` are
the last line of defence.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace

from django.db import connection, transaction
from django.db.models import Count, F
from django.utils import timezone

from agents.choices import GpuHealth, NodeState
from agents.models import GPU, Node
from pools import lease_sql, placement, slicing
from pools.choices import AllocationState, LeaseState
from pools.models import Allocation, Lease, Pool, PoolCard
from pools.signals import notify_nodes

PLACE_ATTEMPTS = 8
CANDIDATE_SLACK = 8


class PlacementError(Exception):
    """The ask cannot be placed; ``never`` when no card of the pool could ever hold it."""

    def __init__(self, message: str, *, never: bool = False) -> None:
        super().__init__(message)
        self.never = never


_FIELDS = (
    "gpu_id", "gpu__node_id", "gpu__node__name", "gpu__model", "compute_capacity",
    "memory_capacity_mib", "gpu__memory_total_mib", "compute_allocated",
    "memory_allocated_mib", "slices", "held_whole", "cordoned_at", "gpu__health",
    "gpu__node__state", "gpu__node__labels", "gpu__vendor",
)  # fmt: skip


def _card(row: tuple) -> placement.Card:
    (gpu, node, node_name, model, c_cap, m_cap, physical, c_used, m_used, slices, whole,
     cordoned, health, state, labels, vendor) = row  # fmt: skip
    return placement.Card(
        id=gpu, node_id=node, node_name=node_name, model=model, compute_capacity=c_cap,
        memory_capacity_mib=m_cap, memory_physical_mib=physical, compute_used=c_used,
        memory_used_mib=m_used, slices=slices, held_whole=whole,
        schedulable=(cordoned is None and health == GpuHealth.OK and state == NodeState.ONLINE),
        node_labels=_labels(labels), vendor=vendor,
    )  # fmt: skip


def _labels(value) -> dict:
    """A node's labels as read: the ORM decodes the JSON, a raw cursor hands it over as
    text (Django's psycopg loader leaves jsonb to the field)."""
    if isinstance(value, str):
        value = json.loads(value)
    return value if isinstance(value, dict) else {}


def _schedulable(rows):
    return rows.filter(
        cordoned_at=None, held_whole=False, gpu__health=GpuHealth.OK,
        gpu__node__state=NodeState.ONLINE,
    )  # fmt: skip


def _matching(rows, ask: placement.Ask):
    """The ask's constraints in SQL (a SELECT may filter on joined tables; an UPDATE not)."""
    if ask.model:
        rows = rows.filter(gpu__model=ask.model)
    if ask.vendor:
        rows = rows.filter(gpu__vendor=ask.vendor)
    if ask.node:
        rows = rows.filter(gpu__node__name=ask.node)
    if ask.node_labels:
        rows = rows.filter(gpu__node__labels__contains=dict(ask.node_labels))
    return rows


def pool_cards(pool: Pool, *, schedulable_only: bool = False) -> list[placement.Card]:
    """The pool's cards as placement's plain data."""
    rows = PoolCard.objects.filter(pool=pool)
    if schedulable_only:
        rows = _schedulable(rows)
    return [_card(row) for row in rows.values_list(*_FIELDS)]


def _share_sql(capacity: str, allocated: str) -> str:
    return (f"COALESCE((pc.{capacity} - pc.{allocated})::double precision"
            f" / NULLIF(pc.{capacity}::double precision, 0.0), 0.0)")  # fmt: skip


_C, _M = (
    _share_sql("compute_capacity", "compute_allocated"),
    _share_sql("memory_capacity_mib", "memory_allocated_mib"),
)
# models.BINPACK_ORDER written out, so the partial index poolcard_binpack serves it.
_BINPACK_ORDER_SQL = f"(pc.slices = 0), LEAST({_C}, {_M}), ({_C} + {_M}), pc.gpu_id"
_CARD_COLUMNS = """pc.gpu_id, g.node_id, n.name, g.model, pc.compute_capacity,
    pc.memory_capacity_mib, g.memory_total_mib, pc.compute_allocated, pc.memory_allocated_mib,
    pc.slices, pc.held_whole, pc.cordoned_at, g.health, n.state, n.labels, g.vendor"""
_CANDIDATES_FROM = f"""
      FROM {PoolCard._meta.db_table} pc
      JOIN {GPU._meta.db_table} g ON g.id = pc.gpu_id
      JOIN {Node._meta.db_table} n ON n.id = g.node_id
     WHERE pc.pool_id = %s AND pc.cordoned_at IS NULL AND NOT pc.held_whole
       AND g.health = %s AND n.state = %s"""


def _candidates_sql(
    pool: Pool, ask: placement.Ask, exclude: Iterable[int], limit: int | None,
    also: tuple[str, list] = ("", []),
) -> tuple[list[str], list]:  # fmt: skip
    """FROM and WHERE (and for binpack ORDER BY and LIMIT) of the cards that match and fit
    the ask now: placement.matches and placement.fits in SQL; ``also`` a further condition
    and its parameters."""
    sql, params = [_CANDIDATES_FROM], [pool.pk, GpuHealth.OK, NodeState.ONLINE]
    if ask.whole_card:
        sql.append("AND pc.slices = 0")
    else:
        sql.append("AND pc.compute_allocated <= pc.compute_capacity - %s"
                   " AND pc.memory_allocated_mib <= pc.memory_capacity_mib - %s"
                   " AND g.memory_total_mib >= %s")  # fmt: skip
        params += [ask.compute_pct, ask.memory_mib, ask.memory_mib]
    for clause, value in (
        ("AND g.model = %s", ask.model),
        ("AND g.vendor = %s", ask.vendor),
        ("AND n.name = %s", ask.node),
        ("AND n.labels @> %s::jsonb", json.dumps(dict(ask.node_labels)) if ask.node_labels else ""),
        ("AND NOT (pc.gpu_id = ANY(%s))", list(exclude)),
    ):
        if value:
            sql.append(clause)
            params.append(value)
    if also[0]:
        sql.append(also[0])
        params += also[1]
    if limit is not None:
        # A literal, not a parameter: a prepared statement's generic plan would assume a
        # LIMIT $n returns a tenth of the rows and might leave the index's order for a sort.
        sql.append(f"ORDER BY {_BINPACK_ORDER_SQL} LIMIT {int(limit)}")
    return sql, params


def _ordered(ask: placement.Ask) -> bool:
    """Binpack across cards: its answer is the first ``count`` fitting cards in the
    order the index ``poolcard_binpack`` keeps."""
    return ask.policy != placement.SPREAD and not ask.same_node


def candidate_cards(
    pool: Pool, ask: placement.Ask, exclude: Iterable[int] = (), *, skip_locked: bool = False
) -> list[placement.Card]:
    """The pool's cards that match and fit the ask now, with the conditions in SQL. For
    binpack across cards only the best few in binpack's order are read (the partial index
    ``poolcard_binpack`` walks them in that order): placement's own order decides among
    them, and a slack covers cards a racing transaction fills meanwhile. ``skip_locked``
    (binpack only) reads exactly the best ``count`` cards that no other transaction has
    locked, and locks them: PostgreSQL checks the conditions again on each row it locks,
    so they still fit when taken. Written in SQL because compiling the same query with the
    ORM cost more than running it."""
    limit = None
    if _ordered(ask):
        limit = ask.count + (0 if skip_locked else CANDIDATE_SLACK)
    sql, params = _candidates_sql(pool, ask, exclude, limit)
    if skip_locked and limit is not None:
        sql.append("FOR UPDATE OF pc SKIP LOCKED")
    with lease_sql.cursor() as cursor:
        cursor.execute(f"SELECT {_CARD_COLUMNS} " + " ".join(sql), params)  # values as params
        return [_card(row) for row in cursor.fetchall()]


def _unlocked_best(
    pool: Pool, ask: placement.Ask, exclude: list[int], also: tuple[str, list] = ("", [])
) -> tuple[str, list]:
    """A pick of binpack's best ``count`` cards that no racing transaction holds, locked
    as read (racing requests then fill the next best cards instead of queueing on one)."""
    sql, params = _candidates_sql(pool, ask, exclude, ask.count, also)
    return ("SELECT pc.id, pc.gpu_id, g.node_id, g.memory_total_mib AS physical "
            + " ".join(sql) + " FOR UPDATE OF pc SKIP LOCKED"), params  # fmt: skip


def picks(
    pool: Pool, ask: placement.Ask, exclude: Iterable[int] = (), *, unlocked_first: bool = True
):
    """The ways to lock cards for ``ask``, best first: ``(pick SQL, params, count)`` for
    ``lease_sql.place`` or ``lease_sql.take``. The one path to capacity for placements
    and failover alike; stops when placement finds no cards (the caller then decides).
    ``unlocked_first=False``: the caller tried binpack's ``_unlocked_best`` already."""
    exclude = list(exclude)
    whole = ask.whole_card
    if _ordered(ask) and unlocked_first:
        yield *_unlocked_best(pool, ask, exclude), ask.count
    for _attempt in range(PLACE_ATTEMPTS):
        # Read without locking, choose, then wait for the chosen cards (in id order, so
        # two multi-card requests cannot deadlock); a card that no longer fits: again.
        chosen = placement.place(candidate_cards(pool, ask, exclude), ask)
        if chosen is None:
            return
        pick, params = lease_sql.lock_chosen(
            pool.pk, sorted(chosen), whole, ask.compute_pct, ask.memory_mib
        )
        yield pick, params, len(chosen)


def _placed(
    pool: Pool, ask: placement.Ask, lease: Lease, template: Allocation, *,
    slicing_checked: bool = False,
) -> list[tuple[int, int, int, int]]:  # fmt: skip
    """Place the ask's vGPUs and insert ``lease`` with them, each try one statement
    (``pools.lease_sql``); (lease id, allocation id, gpu id, node id) per vGPU. Raises
    PlacementError, having changed nothing, when it does not fit."""
    if not ask.valid:
        raise PlacementError("no card in this pool could ever hold this request", never=True)
    others = None if ask.whole_card or slicing_checked else _others(pool.pk, ask.model, ask.vendor)
    unlocked_first = True
    if others and _ordered(ask):
        # Binpack's usual case in one statement: its pick takes no card at all while the
        # pool holds cards that slicing might refuse; then the check below decides.
        pick, params = _unlocked_best(pool, ask, [], (f"AND NOT EXISTS (SELECT {others[0]})",
                                                      others[1]))  # fmt: skip
        if rows := lease_sql.place(pick, params, ask.count, False, lease, template):
            return rows
        unlocked_first = False
    if others:
        kinds = _slicing_kinds(pool, ask.model, ask.vendor, others)
        if refusal := slicing.slice_refusal(kinds):
            raise PlacementError(refusal, never=True)
        # Cards slicing might refuse took the slice after all: the pick above skipped them.
        unlocked_first = unlocked_first or bool(kinds)
    for pick, params, count in picks(pool, ask, unlocked_first=unlocked_first):
        if rows := lease_sql.place(pick, params, count, ask.whole_card, lease, template):
            return rows
    return _not_placed(pool, ask)


# NVIDIA's cards always slice: only the others are read, through the index on GPU.vendor,
# so that a placement in an NVIDIA pool pays one index probe, not a scan of its cards.
# Literals (constants of the code), so the planner knows from the column's statistics
# that a pool of NVIDIA cards has none.
assert all(v.isalnum() for v in slicing.OTHER_VENDORS)
_OTHER_VENDORS_SQL = ", ".join(f"'{v}'" for v in slicing.OTHER_VENDORS)


def _others(pool_id: int, model: str, vendor: str) -> tuple[str, list] | None:
    """FROM and WHERE of the pool's cards that slicing might refuse a slice of ``model``
    of ``vendor`` ("": any), those of other vendors than NVIDIA; None when the ask names
    NVIDIA (its cards always slice)."""
    if vendor and vendor not in slicing.OTHER_VENDORS:
        return None
    sql = [f"FROM {PoolCard._meta.db_table} o JOIN {GPU._meta.db_table} og ON og.id = o.gpu_id"
           f" WHERE o.pool_id = %s AND og.vendor IN ({_OTHER_VENDORS_SQL})"]  # fmt: skip
    params: list = [pool_id]
    for clause, value in (("AND og.model = %s", model), ("AND og.vendor = %s", vendor)):
        if value:
            sql.append(clause)
            params.append(value)
    return " ".join(sql), params


def _slicing_kinds(
    pool: Pool, model: str, vendor: str, others: tuple[str, list]
) -> set[tuple[str, str]]:
    """(vendor, model) of the pool's cards in ``others``; a pool with no cards yet, of its
    vendor rule."""
    with lease_sql.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT og.vendor, og.model {others[0]}", others[1])
        kinds = set(cursor.fetchall())
    if not kinds and pool.match_vendor in slicing.OTHER_VENDORS and not pool.cards.exists():
        kinds = {(vendor or pool.match_vendor, model)}
    return kinds


def slice_refusal(pool: Pool, model: str = "", vendor: str = "") -> str | None:
    """Why a slice cannot be asked of this pool (of its cards of ``model``, when given), or
    None: some of the cards it could land on are handed out whole only (pools.slicing).
    A pool with no such cards yet is judged by its vendor rule. Written in SQL: the same
    query through the ORM cost about 1 ms of CPU to compile, more than it took to run."""
    others = _others(pool.pk, model, vendor)
    return slicing.slice_refusal(_slicing_kinds(pool, model, vendor, others)) if others else None


def _not_placed(pool: Pool, ask: placement.Ask):
    if not could_ever_fit(pool, ask):
        raise PlacementError("no card in this pool could ever hold this request", never=True)
    raise PlacementError("not enough free capacity in this pool now")


def could_ever_fit(pool: Pool, ask: placement.Ask) -> bool:
    """Whether some cards of the pool could hold the ask were they empty (and healthy): a
    request that never could is refused at once, one that could waits for capacity."""
    if not ask.valid:
        return False
    rows = _matching(PoolCard.objects.filter(pool=pool), ask)
    if not ask.whole_card:
        rows = rows.filter(
            compute_capacity__gte=ask.compute_pct,
            memory_capacity_mib__gte=ask.memory_mib,
            gpu__memory_total_mib__gte=ask.memory_mib,
        )
    if ask.same_node:
        per_node = rows.values("gpu__node_id").annotate(n=Count("pk")).filter(n__gte=ask.count)
        return per_node.exists()
    return rows.order_by()[: ask.count].count() >= ask.count  # the first matches, unsorted


def place_lease(
    pool: Pool, ask: placement.Ask, *, holder, unix_user: str, label: str = "",
    slicing_checked: bool = False,
) -> Lease:  # fmt: skip
    """Place ``ask`` in ``pool`` for ``holder``: a lease with one allocation per vGPU, all
    or nothing. Raises PlacementError (and changes nothing) when it does not fit. Usually
    one SQL statement; no transaction of its own (each statement is all or nothing).
    ``slicing_checked``: the caller asked ``slice_refusal`` of this ask in this
    transaction already (a create does), so it is not read again."""
    ask = replace(ask, policy=pool.policy)
    lease = Lease(
        pool=pool,
        holder=holder,
        unix_user=unix_user,
        label=label[:200],
        count=ask.count,
        compute_pct=ask.compute_pct,
        memory_mib=ask.memory_mib,
        whole_card=ask.whole_card,
        gpu_model=ask.model,
        gpu_vendor=ask.vendor,
        node_name=ask.node,
        node_labels=dict(ask.node_labels),
        same_node=ask.same_node,
    )
    # A whole card's slice is the card: 100 % and its physical memory (the statement
    # sets each card's).
    template = Allocation(
        pool=pool,
        compute_pct=placement.share_pct(ask.whole_card, ask.compute_pct),
        memory_mib=ask.memory_mib,
        whole_card=ask.whole_card,
        placed_at=timezone.now(),
    )
    rows = _placed(pool, ask, lease, template, slicing_checked=slicing_checked)
    lease.pk = rows[0][0]
    lease._state.adding, lease._state.db = False, connection.alias
    notify_nodes(row[3] for row in rows)
    return lease


def _nodes_of(allocations: Iterable[Allocation]) -> set[int]:
    gpu_ids = {a.gpu_id for a in allocations if a.gpu_id}
    return set(GPU.objects.filter(pk__in=gpu_ids).values_list("node_id", flat=True))


def give_back(gpu_id: int | None, pool_id: int, compute: int, memory: int, whole: bool) -> None:
    """Return an active allocation's capacity to its card (caller holds the transaction)."""
    if gpu_id is None:
        return
    rows = PoolCard.objects.filter(gpu_id=gpu_id, pool_id=pool_id)
    if whole:
        rows.update(held_whole=False, slices=0, compute_allocated=0, memory_allocated_mib=0)
    else:
        rows.update(
            slices=F("slices") - 1,
            compute_allocated=F("compute_allocated") - compute,
            memory_allocated_mib=F("memory_allocated_mib") - memory,
        )


def release_lease(lease_id: int) -> bool:
    """Release a lease and all its allocations; capacity returns at once. Idempotent:
    False when it was already released. Stranded allocations hold no capacity (their
    card's was given back when they were stranded): they are only marked released. One
    SQL statement (``pools.lease_sql.release``): the lease is claimed by a conditional
    UPDATE, so of two racing releases exactly one goes on."""
    claimed, nodes = lease_sql.release(lease_id, timezone.now())
    if claimed:
        notify_nodes(nodes)
    return claimed


def resize_lease(lease_id: int, *, compute_pct: int, memory_mib: int) -> Lease:
    """Change every slice of a lease in place when its cards have room, else raise
    PlacementError and change nothing. Whole-card leases cannot be resized."""
    if not 1 <= compute_pct <= 100 or memory_mib < 1:
        raise PlacementError("compute must be 1-100 % and memory at least 1 MiB", never=True)
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease_id)
        if lease.state != LeaseState.ACTIVE or lease.whole_card:
            raise PlacementError("only an active, sliced lease can be resized", never=True)
        allocations = list(
            lease.allocations.filter(state=AllocationState.ACTIVE).select_related("gpu")
        )
        if any(a.gpu and a.gpu.memory_total_mib < memory_mib for a in allocations):
            raise PlacementError("a slice cannot be larger than its card", never=True)
        for allocation in sorted(allocations, key=lambda a: a.gpu_id or 0):
            dc, dm = compute_pct - allocation.compute_pct, memory_mib - allocation.memory_mib
            updated = PoolCard.objects.filter(
                gpu_id=allocation.gpu_id,
                pool_id=allocation.pool_id,
                compute_allocated__lte=F("compute_capacity") - dc,
                memory_allocated_mib__lte=F("memory_capacity_mib") - dm,
            ).update(
                compute_allocated=F("compute_allocated") + dc,
                memory_allocated_mib=F("memory_allocated_mib") + dm,
            )
            if not updated:
                raise PlacementError("a card of this lease has no room for the new size")
        lease.allocations.filter(state=AllocationState.ACTIVE).update(
            compute_pct=compute_pct, memory_mib=memory_mib
        )
        lease.compute_pct, lease.memory_mib = compute_pct, memory_mib
        lease.save(update_fields=["compute_pct", "memory_mib"])
        notify_nodes(_nodes_of(allocations))
    return lease


# --- pool membership ------------------------------------------------------------------


def matching_gpus(pool: Pool):
    """The cards the pool's rules match (whatever pool they are in now)."""
    gpus = GPU.objects.all()
    if pool.match_models:
        gpus = gpus.filter(model__in=pool.match_models)
    if pool.match_vendor:
        gpus = gpus.filter(vendor=pool.match_vendor)
    for key, value in (pool.match_labels or {}).items():
        gpus = gpus.filter(**{f"node__labels__{key}": value})
    return gpus


def _capacity_of(pool: Pool, physical_mib: int) -> dict:
    return {
        "compute_capacity": pool.compute_capacity(),
        "memory_capacity_mib": pool.memory_capacity(physical_mib),
    }


def add_cards(pool: Pool, gpu_ids: Iterable[int], *, by_hand: bool = True) -> int:
    """Put cards that are in no pool yet into ``pool``; returns how many joined."""
    gpus = GPU.objects.filter(pk__in=list(gpu_ids), pool_card__isnull=True)
    made = PoolCard.objects.bulk_create(
        [
            PoolCard(
                pool=pool,
                gpu=gpu,
                added_by_hand=by_hand,
                **_capacity_of(pool, gpu.memory_total_mib),
            )
            for gpu in gpus
        ],
        ignore_conflicts=True,  # a card another pool took meanwhile stays there
    )
    return len(made)


def refresh_cards(pool: Pool) -> int:
    """Bring the pool's rule-matched cards in step with its rules and its cards'
    capacity in step with its ratios; cards holding slices never leave. Returns how many
    joined."""
    with transaction.atomic():
        joined = 0
        if pool.match_by_rules:
            joined = add_cards(
                pool,
                matching_gpus(pool).filter(pool_card__isnull=True).values_list("pk", flat=True),
                by_hand=False,
            )
            pool.cards.filter(added_by_hand=False, slices=0).exclude(
                gpu__in=matching_gpus(pool)
            ).delete()
        for card in pool.cards.select_related("gpu").select_for_update(of=("self",)):
            wanted = _capacity_of(pool, card.gpu.memory_total_mib)
            if any(getattr(card, k) != v for k, v in wanted.items()):
                PoolCard.objects.filter(pk=card.pk).update(**wanted)
    return joined

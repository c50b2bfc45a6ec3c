"""Pools and their cards as an admin changes them: create, edit, delete, add and remove cards.

Plain values in, the saved Pool (or a count) out. Every rule lives here so the pages, the
API and the admin apply the same ones; errors are collected per field (Django's
``ValidationError.message_dict``) so a form or a 400 answer shows all of them at once. A
pool that cannot be deleted raises ``PoolInUse``: its state, not the input, is the problem
(409). Each change is audited in its own transaction, and a refused change changes nothing.

Ratios: lowering one below what is allocated on any card is refused. The pool's cards are
locked first, so a placement racing the change either lands before it (and is counted) or
re-checks its conditional UPDATE against the new capacity after it (and places elsewhere).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils.translation import gettext as _

from agents.models import GPU
from audit import interface as audit
from pools import live
from pools.choices import AllocationState, PlacementPolicy
from pools.models import MAX_RATIO, Pool, PoolCard
from pools.services import add_cards, matching_gpus, refresh_cards

FIELDS = (
    "name", "slug", "description", "match_models", "match_vendor", "match_labels",
    "match_by_rules", "compute_ratio", "memory_ratio", "policy",
)  # fmt: skip
# Pool pages live under /pools/<slug>/: these would shadow a page.
RESERVED_SLUGS = frozenset({"add"})
MAX_MODELS = 32
MAX_LABELS = 32
MAX_CARDS_PER_CHANGE = 10_000
_LABEL_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,62})$")

Errors = dict[str, list[str]]


class PoolInUse(Exception):
    """The pool's history refers to it, so it cannot be deleted; the message says why."""


def _models(raw: Any) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(m, str) for m in raw):
        raise ValueError(_("Enter a list of GPU model names."))
    models = [m.strip() for m in raw if m.strip()]
    if len(models) > MAX_MODELS:
        raise ValueError(_("At most %(count)s models.") % {"count": MAX_MODELS})
    if any(len(m) > 128 for m in models):
        raise ValueError(_("A model name has at most 128 characters."))
    return list(dict.fromkeys(models))


def _labels(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ValueError(_("Enter labels as names and values."))
    if len(raw) > MAX_LABELS:
        raise ValueError(_("At most %(count)s labels.") % {"count": MAX_LABELS})
    for key, value in raw.items():
        if not isinstance(key, str) or not _LABEL_KEY.match(key) or "__" in key:
            raise ValueError(_("%(key)s is not a valid label name.") % {"key": str(key)[:64]})
        if not isinstance(value, str) or len(value) > 253:
            raise ValueError(_("The value of %(key)s must be text of at most 253 characters.")
                             % {"key": key})  # fmt: skip
    return dict(raw)


def _ratio(raw: Any) -> Decimal:
    if isinstance(raw, bool):
        raise ValueError(_("Enter a number."))
    try:
        value = Decimal(str(raw))
    except InvalidOperation:
        raise ValueError(_("Enter a number.")) from None
    if not value.is_finite() or not Decimal(1) <= value <= MAX_RATIO:
        raise ValueError(_("Enter a ratio from 1.0 to %(max)s.") % {"max": MAX_RATIO})
    if value != value.quantize(Decimal("0.01")):
        raise ValueError(_("Use at most two decimal places."))
    return value


def clean_values(values: Mapping[str, Any]) -> tuple[dict[str, Any], Errors]:
    """Shapes the model cannot check (lists, mappings, ratios); the model checks the rest."""
    cleaned: dict[str, Any] = {}
    errors: Errors = {}
    converters = {"match_models": _models, "match_labels": _labels,
                  "compute_ratio": _ratio, "memory_ratio": _ratio}  # fmt: skip
    for name, raw in values.items():
        if name not in FIELDS:
            errors.setdefault("non_field_errors", []).append(_("Unknown field %s.") % name[:64])
            continue
        try:
            cleaned[name] = converters[name](raw) if name in converters else raw
        except ValueError as exc:
            errors.setdefault(name, []).append(str(exc))
    if cleaned.get("slug") in RESERVED_SLUGS:
        errors.setdefault("slug", []).append(_("This slug is reserved; choose another."))
    if "policy" in cleaned and cleaned["policy"] not in PlacementPolicy.values:
        errors.setdefault("policy", []).append(_("Choose binpack or spread."))
    return cleaned, errors


def ratio_errors(pool: Pool, compute_ratio: Decimal, memory_ratio: Decimal) -> Errors:
    """What lowering the ratios would break: cards whose allocations would no longer fit."""
    errors: Errors = {}
    compute_capacity = int(100 * compute_ratio)
    compute_over = memory_over = 0
    for allocated, memory_allocated, physical in pool.cards.filter(slices__gt=0).values_list(
        "compute_allocated", "memory_allocated_mib", "gpu__memory_total_mib"
    ):
        compute_over += allocated > compute_capacity
        memory_over += memory_allocated > int(physical * memory_ratio)
    if compute_over:
        errors["compute_ratio"] = [_(
            "%(count)s card(s) have more compute allocated than this ratio allows; release "
            "or move their vGPUs first."
        ) % {"count": compute_over}]  # fmt: skip
    if memory_over:
        errors["memory_ratio"] = [_(
            "%(count)s card(s) have more memory allocated than this ratio allows; release "
            "or move their vGPUs first."
        ) % {"count": memory_over}]  # fmt: skip
    return errors


def create_pool(values: Mapping[str, Any], *, actor=None, address: str | None = None) -> Pool:
    """Create a pool; rule pools take the matching cards that are in no pool yet."""
    cleaned, errors = clean_values(values)
    if errors:
        raise ValidationError(errors)
    pool = Pool(**cleaned)
    pool.full_clean(exclude=["created", "updated"])
    with transaction.atomic():
        pool.save()
        refresh_cards(pool)
        audit.record("pool.create", pool, actor=actor, address=address,
                     after=audit.snapshot(pool))  # fmt: skip
    return pool


def update_pool(
    pool_id: int, values: Mapping[str, Any], *, actor=None, address: str | None = None
) -> Pool:
    """Change a pool's fields. Refused, changing nothing, when new ratios are below what is
    allocated on a card or a field is wrong."""
    cleaned, errors = clean_values(values)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        pool = Pool.objects.select_for_update().get(pk=pool_id)
        before = audit.snapshot(pool)
        for name, value in cleaned.items():
            setattr(pool, name, value)
        pool.full_clean(exclude=["created", "updated"])
        # Lock the cards before checking them: placements wait, then re-check capacity.
        list(pool.cards.select_for_update().values_list("pk", flat=True))
        if errors := ratio_errors(pool, pool.compute_ratio, pool.memory_ratio):
            raise ValidationError(errors)
        pool.save()
        refresh_cards(pool)
        after = audit.snapshot(pool)
        if after != before:
            audit.record("pool.update", pool, actor=actor, address=address,
                         before=before, after=after)  # fmt: skip
        live.pool_changed(pool.pk)
    return pool


def delete_pool(pool_id: int, *, actor=None, address: str | None = None) -> None:
    """Delete a pool that never held a vGPU nor was asked for one; its cards are free for
    other pools."""
    with transaction.atomic():
        pool = Pool.objects.select_for_update().get(pk=pool_id)
        if pool.leases.exists():
            raise PoolInUse(_(
                "This pool has held vGPUs and its leases' history refers to it: it cannot "
                "be deleted. Remove its cards or turn off automatic matching instead."
            ))  # fmt: skip
        if pool.requests.exists():  # waiting, refused or cancelled ones: kept for history
            raise PoolInUse(_(
                "GPU requests were made in this pool and their history refers to it: it "
                "cannot be deleted. Remove its cards or turn off automatic matching instead."
            ))  # fmt: skip
        before = audit.snapshot(pool)
        audit.record("pool.delete", pool, actor=actor, address=address, before=before)
        pool.delete()


def _gpu_ids(gpu_ids: Iterable[Any]) -> list[int]:
    ids = list(gpu_ids)
    if len(ids) > MAX_CARDS_PER_CHANGE:
        raise ValidationError({"gpus": [_("At most %(count)s cards at a time.")
                                  % {"count": MAX_CARDS_PER_CHANGE}]})  # fmt: skip
    if not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ValidationError({"gpus": [_("Choose at least one card.")]})
    return sorted(set(ids))


def add_pool_cards(
    pool_id: int, gpu_ids: Iterable[Any], *, actor=None, address: str | None = None
) -> int:
    """Put cards into the pool by hand; all or nothing. A card in another pool, or unknown,
    refuses the whole change. Returns how many joined."""
    ids = _gpu_ids(gpu_ids)
    with transaction.atomic():
        pool = Pool.objects.select_for_update().get(pk=pool_id)
        found = dict(GPU.objects.filter(pk__in=ids).values_list("pk", "pool_card__pool_id"))
        errors = []
        if unknown := [i for i in ids if i not in found]:
            errors.append(_("No such card: %(ids)s.") % {"ids": _list(unknown)})
        if elsewhere := [i for i, p in found.items() if p not in (None, pool.pk)]:
            errors.append(_("Already in another pool: %(ids)s.") % {"ids": _list(elsewhere)})
        if errors:
            raise ValidationError({"gpus": errors})
        # Cards the rules brought in stay now whatever the rules say.
        pool.cards.filter(gpu_id__in=ids).update(added_by_hand=True)
        joined = add_cards(pool, [i for i, p in found.items() if p is None], by_hand=True)
        if joined != sum(1 for p in found.values() if p is None):
            raise ValidationError({"gpus": [_("Another pool took one of these cards; try again.")]})
        audit.record("pool.cards_add", pool, actor=actor, address=address,
                     after={"gpus": ids})  # fmt: skip
        live.pool_changed(pool.pk)
    return joined


def remove_pool_cards(
    pool_id: int, gpu_ids: Iterable[Any], *, actor=None, address: str | None = None
) -> int:
    """Take cards out of the pool; all or nothing. A card holding slices, one not in the
    pool, or one the pool's rules would bring straight back refuses the whole change."""
    ids = _gpu_ids(gpu_ids)
    with transaction.atomic():
        pool = Pool.objects.select_for_update().get(pk=pool_id)
        cards = {c.gpu_id: c for c in pool.cards.select_for_update().filter(gpu_id__in=ids)}
        errors = []
        if missing := [i for i in ids if i not in cards]:
            errors.append(_("Not in this pool: %(ids)s.") % {"ids": _list(missing)})
        # Stranded allocations still point at the card: count them as slices too.
        holding = {i for i, c in cards.items() if c.slices} | set(
            pool.allocations.filter(gpu_id__in=ids)
            .exclude(state=AllocationState.RELEASED)
            .values_list("gpu_id", flat=True)
        )
        if holding:
            errors.append(_(
                "These cards hold vGPUs and cannot leave the pool until they are released: "
                "%(ids)s."
            ) % {"ids": _list(sorted(holding))})  # fmt: skip
        rules = (
            matching_gpus(pool).filter(pk__in=ids) if pool.match_by_rules else GPU.objects.none()
        )
        if matching := sorted(rules.values_list("pk", flat=True)):
            errors.append(_(
                "These cards match the pool's rules and would join again: %(ids)s. Change "
                "the rules or turn off adding matching cards automatically."
            ) % {"ids": _list(matching)})  # fmt: skip
        if errors:
            raise ValidationError({"gpus": errors})
        removed, _by_model = PoolCard.objects.filter(
            Q(pool=pool, gpu_id__in=ids, slices=0)
        ).delete()
        if removed != len(ids):
            raise ValidationError(
                {"gpus": [_("A card took a vGPU meanwhile; nothing was removed.")]}
            )
        audit.record("pool.cards_remove", pool, actor=actor, address=address,
                     before={"gpus": ids})  # fmt: skip
        live.pool_changed(pool.pk)
    return removed


def _list(ids: Iterable[int]) -> str:
    ids = list(ids)
    text = ", ".join(str(i) for i in ids[:20])
    return text + (" …" if len(ids) > 20 else "")


def join_new_cards(node_ids: Iterable[int]) -> int:
    """After a poll cycle: put cards that are in no pool into the rule pools that match
    them. Cheap when nothing is new: one query finds that no card of these nodes lacks a
    pool. Returns how many joined."""
    # One array parameter, not one per node: a cycle names a thousand nodes.
    new = GPU.objects.filter(node_id__any=list(node_ids), pool_card__isnull=True)
    if not new.exists():
        return 0
    joined = 0
    for pool in Pool.objects.filter(match_by_rules=True).order_by("pk"):
        if not matching_gpus(pool).filter(pk__in=new.values("pk")).exists():
            continue
        if added := refresh_cards(pool):
            joined += added
            live.pool_changed(pool.pk)
    return joined

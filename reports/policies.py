"""What platform admins set for the reports: each pool's reclaim policy (how idle is found
and whether it is taken back) and the unit prices for chargeback (per pool, and a default
for the pools without one).

Each function is one transaction, checks who may (``reports.permissions.can_set_policies``:
PermissionError), validates everything first (ValidationError with field-level messages,
nothing changed) and records the change with the row before and after in the audit log,
as the Django admin's saves of these rows are (``reports.admin``).

Deleting a policy returns its pool to the defaults, which never reclaim (its open idle
warnings are withdrawn by the next pass); deleting a pool's price leaves its lines at the
default price, and deleting the default leaves those without a price uncharged. Every
price is in one currency: the accounting adds costs of all pools into one total.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from audit.interface import record, snapshot
from pools.models import Pool
from reports import permissions
from reports.models import ReclaimPolicy, UnitPrice

POLICY_FIELDS = ("idle_util_pct", "idle_memory_pct", "idle_window_minutes", "reclaim",
                 "grace_hours")  # fmt: skip
PRICE_FIELDS = ("currency", "per_gpu_hour", "per_compute_pct_hour", "per_memory_gib_hour")


def _refuse_unless(allowed: bool) -> None:
    if not allowed:
        raise PermissionError(_("You may not make this change."))


def _clean(obj, errors: dict[str, list[str]]) -> None:
    """Model validation (ranges, digits) and this module's own errors, raised once."""
    errors = dict(errors)
    try:
        # Uniqueness is said below in words of its own.
        obj.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        for key, messages in exc.message_dict.items():
            errors.setdefault(key, []).extend(messages)
    if errors:
        raise ValidationError(errors)


# --- reclaim policies --------------------------------------------------------------------


def _policy_errors(policy: ReclaimPolicy) -> dict[str, list[str]]:
    if policy.pool_id is None:
        return {"pool": [_("Choose a pool.")]}
    taken = ReclaimPolicy.objects.filter(pool_id=policy.pool_id).exclude(pk=policy.pk)
    if taken.exists():
        return {"pool": [_("This pool has a reclaim policy already: edit that one.")]}
    return {}


def create_policy(
    actor, *, pool: Pool | None, address: str | None = None, **fields: Any
) -> ReclaimPolicy:
    _refuse_unless(permissions.can_set_policies(actor))
    policy = ReclaimPolicy(pool=pool, **{k: v for k, v in fields.items() if k in POLICY_FIELDS})
    _clean(policy, _policy_errors(policy))
    with transaction.atomic():
        policy.save()
        record("reclaim_policy.create", policy, actor=actor, address=address,
               after=snapshot(policy))  # fmt: skip
    return policy


def update_policy(
    policy_id: int, actor, *, address: str | None = None, **fields: Any
) -> ReclaimPolicy:
    """Change a policy's thresholds or reclaiming; its pool stays."""
    _refuse_unless(permissions.can_set_policies(actor))
    with transaction.atomic():
        policy = (
            ReclaimPolicy.objects.select_for_update(of=("self",))
            .select_related("pool")
            .get(pk=policy_id)
        )
        before = snapshot(policy)
        for key, value in fields.items():
            if key in POLICY_FIELDS:
                setattr(policy, key, value)
        _clean(policy, {})
        policy.save()
        record("reclaim_policy.update", policy, actor=actor, address=address, before=before,
               after=snapshot(policy))  # fmt: skip
    return policy


def _delete(model, pk: int, action: str, actor, address: str | None) -> None:
    """Delete one policy or price row, audited with the row as it was."""
    _refuse_unless(permissions.can_set_policies(actor))
    with transaction.atomic():
        row = model.objects.select_for_update(of=("self",)).select_related("pool").get(pk=pk)
        before, text = snapshot(row), str(row)
        row.delete()
        record(action, None, actor=actor, address=address, before=before,
               target_type=model._meta.label_lower, target_id=str(pk),
               target_repr=text)  # fmt: skip


def delete_policy(policy_id: int, actor, *, address: str | None = None) -> None:
    _delete(ReclaimPolicy, policy_id, "reclaim_policy.delete", actor, address)


# --- unit prices -------------------------------------------------------------------------


def _price_errors(price: UnitPrice) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    taken = UnitPrice.objects.filter(pool_id=price.pool_id).exclude(pk=price.pk)
    if taken.exists():
        errors["pool"] = [
            _("This pool has a price already: edit that one.")
            if price.pool_id is not None
            else _("There is a default price already: edit that one.")
        ]
    other = UnitPrice.objects.exclude(pk=price.pk).values_list("currency", flat=True).first()
    if other is not None and isinstance(price.currency, str) and price.currency != other:
        errors["currency"] = [
            _("Every price is in one currency (%(currency)s): the accounting adds them up.")
            % {"currency": other}
        ]
    return errors


def _strip_currency(price: UnitPrice) -> None:
    if isinstance(price.currency, str):
        price.currency = price.currency.strip()


def create_price(
    actor, *, pool: Pool | None = None, address: str | None = None, **fields: Any
) -> UnitPrice:
    """A pool's prices, or with no pool the default for the pools without their own."""
    _refuse_unless(permissions.can_set_policies(actor))
    price = UnitPrice(pool=pool, **{k: v for k, v in fields.items() if k in PRICE_FIELDS})
    _strip_currency(price)
    _clean(price, _price_errors(price))
    with transaction.atomic():
        price.save()
        price.refresh_from_db()  # the decimals as stored, as "before" will show them
        record("unit_price.create", price, actor=actor, address=address,
               after=snapshot(price))  # fmt: skip
    return price


def update_price(price_id: int, actor, *, address: str | None = None, **fields: Any) -> UnitPrice:
    """Change a price; the pool it is for stays."""
    _refuse_unless(permissions.can_set_policies(actor))
    with transaction.atomic():
        price = (
            UnitPrice.objects.select_for_update(of=("self",))
            .select_related("pool")
            .get(pk=price_id)
        )
        before = snapshot(price)
        for key, value in fields.items():
            if key in PRICE_FIELDS:
                setattr(price, key, value)
        _strip_currency(price)
        _clean(price, _price_errors(price))
        price.save()
        price.refresh_from_db()
        record("unit_price.update", price, actor=actor, address=address, before=before,
               after=snapshot(price))  # fmt: skip
    return price


def delete_price(price_id: int, actor, *, address: str | None = None) -> None:
    _delete(UnitPrice, price_id, "unit_price.delete", actor, address)

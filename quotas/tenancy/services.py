"""Tenants, their members and their quotas: the changes people make, with their rules.

Each function is one transaction, checks who may (``quotas.permissions``; PermissionError
when they may not), validates everything first (ValidationError with field-level messages,
nothing changed) and records the change in the audit log in the same transaction.

The one rule across rows: a tenant keeps at least one active admin, from its creation on.
It is created with its first admin (an existing user or one made in the same step);
removing, demoting or deactivating (``quotas.tenancy.accounts``) its last active admin is refused,
whoever asks; the tenant row is locked while admins are counted, so two admins demoting
each other at once cannot both succeed.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import ProtectedError
from django.utils.translation import gettext as _

from audit.interface import record, snapshot
from pools.models import Pool
from quotas import permissions
from quotas.choices import Role
from quotas.models import Membership, Quota, Tenant
from quotas.tenancy import accounts
from quotas.tenancy.accounts import NewUser

TENANT_FIELDS = ("name", "slug", "description")
# Slugs the tenant pages' own paths use (/tenants/add/).
RESERVED_SLUGS = frozenset({"add"})
# guarantee, limit and the label of each dimension a quota bounds
DIMENSIONS = (
    ("guaranteed_vgpus", "limit_vgpus"),
    ("guaranteed_compute_pct", "limit_compute_pct"),
    ("guaranteed_memory_mib", "limit_memory_mib"),
    ("guaranteed_gpu_hours", "limit_gpu_hours"),
)
USER_CAPS = (
    ("user_limit_vgpus", "limit_vgpus"),
    ("user_limit_compute_pct", "limit_compute_pct"),
    ("user_limit_memory_mib", "limit_memory_mib"),
)
QUOTA_FIELDS = (
    *(name for pair in DIMENSIONS for name in pair),
    "budget_period",
    *(cap for cap, _limit in USER_CAPS),
    "auto_approve_vgpus",
    "auto_approve_compute_pct",
    "auto_approve_hours",
    "escalate_after_hours",
    "expire_pending_after_hours",
)


def _refuse_unless(allowed: bool) -> None:
    if not allowed:
        raise PermissionError(_("You may not make this change."))


def _clean(obj, errors: dict[str, list[str]] | None = None, **kwargs) -> None:
    """Model validation and the caller's own errors together, raised once."""
    errors = dict(errors or {})
    try:
        obj.full_clean(**kwargs)
    except ValidationError as exc:
        for key, messages in exc.message_dict.items():
            errors.setdefault(key, []).extend(messages)
    if errors:
        raise ValidationError(errors)


# --- tenants -----------------------------------------------------------------------------


def _slug_errors(tenant: Tenant) -> dict[str, list[str]]:
    if tenant.slug in RESERVED_SLUGS:
        return {"slug": [_("This slug is reserved; choose another.")]}
    return {}


def _active_user(username: str):
    """The active user of this name whom this portal manages (no service account)."""
    return (
        accounts.managed_users()
        .filter(**{get_user_model().USERNAME_FIELD: (username or "")[:150]}, is_active=True)
        .first()
    )


def create_tenant(
    actor, *, admin: str = "", new_admin: NewUser | None = None, address: str | None = None,
    **fields: Any,
) -> Tenant:  # fmt: skip
    """A tenant with its first admin: the active user named ``admin``, or ``new_admin``
    made in the same transaction (its set-password link: ``accounts.set_password_path``)."""
    _refuse_unless(permissions.can_manage_tenant(actor))
    tenant = Tenant(**{k: v for k, v in fields.items() if k in TENANT_FIELDS})
    errors = _slug_errors(tenant)
    user = None
    if new_admin is not None:
        errors.update(accounts.new_user_errors(new_admin, username_field="admin"))
    elif not (admin or "").strip():
        errors["admin"] = [_("Name the tenant's first admin.")]
    elif (user := _active_user(admin.strip())) is None:
        errors["admin"] = [_("There is no active user with this name.")]
    _clean(tenant, errors)
    with transaction.atomic():
        tenant.save()
        record("tenant.create", tenant, actor=actor, address=address, tenant_id=tenant.pk,
               after=snapshot(tenant))  # fmt: skip
        if new_admin is not None:
            user = accounts.make_user(new_admin, actor, address=address, tenant_id=tenant.pk,
                                      username_field="admin")  # fmt: skip
        membership = Membership.objects.create(tenant=tenant, user=user, role=Role.ADMIN)
        record("membership.create", membership, actor=actor, address=address,
               tenant_id=tenant.pk, after=snapshot(membership))  # fmt: skip
    return tenant


def update_tenant(tenant_id: int, actor, *, address: str | None = None, **fields: Any) -> Tenant:
    _refuse_unless(permissions.can_manage_tenant(actor))
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant_id)
        before = snapshot(tenant)
        for key, value in fields.items():
            if key in TENANT_FIELDS:
                setattr(tenant, key, value)
        _clean(tenant, _slug_errors(tenant))
        tenant.save()
        record("tenant.update", tenant, actor=actor, address=address, tenant_id=tenant.pk,
               before=before, after=snapshot(tenant))  # fmt: skip
    return tenant


def delete_tenant(tenant_id: int, actor, *, address: str | None = None) -> None:
    """Delete a tenant with its memberships and quotas; refused while GPU requests point
    at it (their history belongs to the audit and accounting)."""
    _refuse_unless(permissions.can_manage_tenant(actor))
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant_id)
        before = snapshot(tenant)
        try:
            with transaction.atomic():
                tenant.delete()
        except ProtectedError:
            raise ValidationError(
                {"tenant": [_("This tenant has GPU requests; it cannot be deleted.")]}
            ) from None
        record("tenant.delete", None, actor=actor, address=address, tenant_id=tenant_id,
               before=before, target_type="quotas.tenant", target_id=str(tenant_id),
               target_repr=before["name"])  # fmt: skip


# --- memberships -------------------------------------------------------------------------


def _admins_left(tenant_id: int, without: int) -> int:
    """The tenant's other active admins (a deactivated one administers nothing)."""
    return (
        Membership.objects.filter(tenant_id=tenant_id).admins().active().exclude(pk=without).count()
    )


def add_member(
    tenant_id: int, actor, *, username: str = "", role: str = Role.MEMBER,
    address: str | None = None, new_user: NewUser | None = None,
) -> Membership:  # fmt: skip
    """Add an existing user to the tenant by user name, or invite ``new_user``: made in
    the same transaction, its set-password link is ``accounts.set_password_path``."""
    _refuse_unless(permissions.can_manage_members(actor, tenant_id))
    errors: dict[str, list[str]] = {}
    user = None
    if new_user is not None:
        errors.update(accounts.new_user_errors(new_user))
    else:
        user = (
            get_user_model()
            .objects.filter(**{get_user_model().USERNAME_FIELD: (username or "")[:150]})
            .first()
        )
        if user is None or not user.is_active:
            errors["username"] = [_("There is no active user with this name.")]
        elif Membership.objects.of(user).filter(tenant_id=tenant_id).exists():
            errors["username"] = [_("This user is already a member of this tenant.")]
    if role not in Role.values:
        errors["role"] = [_("Choose one of the roles.")]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        Tenant.objects.select_for_update().get(pk=tenant_id)
        if new_user is not None:
            user = accounts.make_user(new_user, actor, address=address, tenant_id=tenant_id)
        membership = Membership(tenant_id=tenant_id, user=user, role=role)
        _clean(membership, validate_unique=False)
        membership.save()
        record("membership.create", membership, actor=actor, address=address,
               tenant_id=tenant_id, after=snapshot(membership))  # fmt: skip
    return membership


def change_role(membership_id: int, actor, *, role: str, address: str | None = None) -> Membership:
    membership = Membership.objects.get(pk=membership_id)
    _refuse_unless(permissions.can_manage_members(actor, membership.tenant_id))
    if role not in Role.values:
        raise ValidationError({"role": [_("Choose one of the roles.")]})
    with transaction.atomic():
        Tenant.objects.select_for_update().get(pk=membership.tenant_id)
        membership = Membership.objects.select_related("user", "tenant").get(pk=membership_id)
        if membership.role == role:
            return membership
        if membership.role == Role.ADMIN and not _admins_left(membership.tenant_id, membership.pk):
            raise ValidationError({"role": [_("A tenant keeps at least one admin.")]})
        before = snapshot(membership)
        membership.role = role
        membership.save(update_fields=["role"])
        record("membership.update", membership, actor=actor, address=address,
               tenant_id=membership.tenant_id, before=before,
               after=snapshot(membership))  # fmt: skip
    return membership


def remove_member(membership_id: int, actor, *, address: str | None = None) -> None:
    membership = Membership.objects.get(pk=membership_id)
    _refuse_unless(permissions.can_manage_members(actor, membership.tenant_id))
    with transaction.atomic():
        Tenant.objects.select_for_update().get(pk=membership.tenant_id)
        membership = Membership.objects.select_related("user", "tenant").get(pk=membership_id)
        if membership.role == Role.ADMIN and not _admins_left(membership.tenant_id, membership.pk):
            raise ValidationError({"membership": [_("A tenant keeps at least one admin.")]})
        before = snapshot(membership)
        text = str(membership)
        membership.delete()
        record("membership.delete", None, actor=actor, address=address,
               tenant_id=before["tenant_id"], before=before,
               target_type="quotas.membership", target_id=str(membership_id),
               target_repr=text)  # fmt: skip


# --- quotas ------------------------------------------------------------------------------


def _quota_errors(quota: Quota) -> dict[str, list[str]]:
    """What the model's constraints say as a whole, said per field."""
    errors: dict[str, list[str]] = {}
    for guarantee, limit in DIMENSIONS:
        g, lim = getattr(quota, guarantee), getattr(quota, limit)
        if isinstance(g, int) and isinstance(lim, int) and g > lim:
            errors[guarantee] = [
                _("The guarantee cannot be more than the limit (%(limit)s).") % {"limit": lim}
            ]
    for cap, limit in USER_CAPS:
        c, lim = getattr(quota, cap), getattr(quota, limit)
        if isinstance(c, int) and isinstance(lim, int) and c > lim:
            errors[cap] = [
                _("A member's cap cannot be more than the tenant's limit (%(limit)s).")
                % {"limit": lim}
            ]
    return errors


def _check_quota(quota: Quota) -> None:
    errors = _quota_errors(quota)
    if (
        quota.pk is None
        and Quota.objects.filter(tenant_id=quota.tenant_id, pool_id=quota.pool_id).exists()
    ):
        errors.setdefault("pool", []).append(_("This tenant already has a quota in this pool."))
    # The constraints are said per field above; the model would say them again as a whole.
    _clean(quota, errors, validate_unique=False, validate_constraints=False)


def create_quota(
    actor, *, tenant: Tenant, pool: Pool, address: str | None = None, **fields: Any
) -> Quota:
    """Open a pool to a tenant with its guarantees, limits and approval policy."""
    _refuse_unless(permissions.can_manage_tenant(actor, tenant))
    quota = Quota(
        tenant=tenant, pool=pool, **{k: v for k, v in fields.items() if k in QUOTA_FIELDS}
    )
    _check_quota(quota)
    with transaction.atomic():
        quota.save()
        record("quota.create", quota, actor=actor, address=address, tenant_id=tenant.pk,
               after=snapshot(quota))  # fmt: skip
    return quota


def update_quota(quota_id: int, actor, *, address: str | None = None, **fields: Any) -> Quota:
    _refuse_unless(permissions.can_manage_tenant(actor))
    with transaction.atomic():
        # The request services lock this row to count a placement: no change mid-count.
        quota = Quota.objects.select_for_update().select_related("tenant", "pool").get(pk=quota_id)
        before = snapshot(quota)
        for key, value in fields.items():
            if key in QUOTA_FIELDS:
                setattr(quota, key, value)
        _check_quota(quota)
        quota.save()
        record("quota.update", quota, actor=actor, address=address, tenant_id=quota.tenant_id,
               before=before, after=snapshot(quota))  # fmt: skip
    return quota


def delete_quota(quota_id: int, actor, *, address: str | None = None) -> None:
    """Close the pool to the tenant. What it holds there stays until released."""
    _refuse_unless(permissions.can_manage_tenant(actor))
    with transaction.atomic():
        quota = Quota.objects.select_for_update().select_related("tenant", "pool").get(pk=quota_id)
        before, text = snapshot(quota), str(quota)
        quota.delete()
        record("quota.delete", None, actor=actor, address=address, tenant_id=before["tenant_id"],
               before=before, target_type="quotas.quota", target_id=str(quota_id),
               target_repr=text)  # fmt: skip


# --- a company directory's roles ---------------------------------------------------------


def apply_directory_roles(
    user, roles: dict[int, str], governed: set[int], *, source: str,
    address: str | None = None,
) -> list[str]:  # fmt: skip
    """Make ``user``'s memberships in the ``governed`` tenants (those a directory's group
    mapping names) what the directory says, ``roles`` (tenant id: role): added, changed, or
    removed where the directory gives none. Tenants no mapping names are left to their
    admins. Done by the system (no actor), recorded with ``source``, one transaction.

    The one rule still holds: a change that would leave a tenant without an active admin
    is not made; the names of those tenants are returned (the directory page shows them).
    """
    kept: list[str] = []
    message = _("Applied from the company directory (%(source)s).") % {"source": source}
    with transaction.atomic():
        tenants = {
            t.pk: t
            for t in Tenant.objects.select_for_update()
            .filter(pk__in=set(governed) | set(roles))
            .order_by("pk")
        }
        current = {
            m.tenant_id: m for m in Membership.objects.of(user).filter(tenant_id__in=tenants)
        }
        for tenant_id, tenant in tenants.items():
            want, have = roles.get(tenant_id), current.get(tenant_id)
            if have is not None and have.role == want:
                continue
            if (
                have is not None
                and have.role == Role.ADMIN
                and user.is_active
                and not _admins_left(tenant_id, have.pk)
            ):
                kept.append(tenant.name)
                continue
            if want is None:
                before = snapshot(have)
                have.delete()
                record("membership.delete", None, address=address, tenant_id=tenant_id,
                       before=before, target_type="quotas.membership",
                       target_id=str(before["id"]), target_repr=f"{user} · {tenant}",
                       message=message)  # fmt: skip
            elif have is None:
                made = Membership.objects.create(tenant_id=tenant_id, user=user, role=want)
                record("membership.create", made, address=address, tenant_id=tenant_id,
                       after=snapshot(made), message=message)  # fmt: skip
            else:
                before = snapshot(have)
                have.role = want
                have.save(update_fields=["role"])
                record("membership.update", have, address=address, tenant_id=tenant_id,
                       before=before, after=snapshot(have), message=message)  # fmt: skip
    return kept

"""What people do with API tokens and service accounts, with their rules.

Each function checks who may (PermissionError when they may not), validates everything
first (ValidationError with field-level messages, nothing changed) and is audited in the
same transaction as its change (through ``tokens.interface`` for tokens).

Rules across the app:
- a token never makes a token wider than itself: not a wider scope, not a later expiry
  (a read token makes none at all: ``tokens.authentication`` refuses its writes);
- a service account manages nothing: not its own tokens, not other service accounts;
  its tenant's admins (and platform admins) do that for it;
- expiry is required in effect: none given means ``TOKEN_MAX_DAYS`` from now.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from audit.interface import record, snapshot
from quotas import interface as quotas_interface
from quotas import permissions as quota_permissions
from quotas.choices import Role
from quotas.models import Tenant
from tokens import interface
from tokens.choices import Scope
from tokens.models import ApiToken, ServiceAccount

NAME_MAX = 100
DESCRIPTION_MAX = 2000
# Ranks for "not wider than itself": a token may make tokens up to its own rank.
SCOPE_RANK = {Scope.READ: 0, Scope.WRITE: 1}
SERVICE_ACCOUNT_FIELDS = ("tenant", "name", "description", "disabled_at")
MAY_NOT = gettext_lazy("You may not make this change.")


def is_service_account(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False)) and (
        ServiceAccount.objects.filter(user_id=user.pk).exists()
    )


def _refuse_unless(allowed: bool, message: str | None = None) -> None:
    if not allowed:
        raise PermissionError(message or str(MAY_NOT))


def _name_errors(name: Any, field: str = "name") -> dict[str, list[str]]:
    if not isinstance(name, str) or not name.strip():
        return {field: [_("Give a name.")]}
    if len(name.strip()) > NAME_MAX:
        return {field: [_("At most %(max)d characters.") % {"max": NAME_MAX}]}
    return {}


def max_days() -> int:
    return int(settings.TOKEN_MAX_DAYS)


def _token_errors(
    name: Any, scope: Any, expires_at: datetime | None, via: ApiToken | None
) -> dict[str, list[str]]:
    errors = _name_errors(name)
    if scope not in Scope.values:
        errors["scope"] = [_("Choose read or write.")]
    elif via is not None and SCOPE_RANK[Scope(scope)] > SCOPE_RANK[Scope(via.scope)]:
        errors["scope"] = [_("A token cannot make a token with a wider scope than its own.")]
    now = timezone.now()
    if expires_at is not None:
        if expires_at <= now:
            errors["expires_at"] = [_("The expiry must be in the future.")]
        elif expires_at > now + timedelta(days=max_days()):
            errors["expires_at"] = [
                _("A token lives at most %(days)d days.") % {"days": max_days()}
            ]
        elif via is not None and via.expires_at is not None and expires_at > via.expires_at:
            errors["expires_at"] = [_("A token cannot make a token that outlives it.")]
    return errors


def _expiry(expires_at: datetime | None, via: ApiToken | None) -> datetime:
    if expires_at is not None:
        return expires_at
    default = timezone.now() + timedelta(days=max_days())
    # A token's child ends with it at the latest.
    if via is not None and via.expires_at is not None:
        return min(default, via.expires_at)
    return default


def expiry_in_days(days: int | None) -> datetime | None:
    """The moment ``days`` from now (the pages ask in days); None stays None."""
    return None if days is None else timezone.now() + timedelta(days=days)


def _issue_checked(
    owner: AbstractBaseUser, actor: AbstractBaseUser, *, name: Any, scope: Any,
    expires_at: datetime | None, via: ApiToken | None, address: str | None,
    tenant_id: int | None = None,
) -> tuple[ApiToken, str]:  # fmt: skip
    errors = _token_errors(name, scope, expires_at, via)
    if errors:
        raise ValidationError(errors)
    return interface.issue(
        owner, name=name.strip(), scope=scope, expires_at=_expiry(expires_at, via),
        created_by=actor, address=address, tenant_id=tenant_id,
    )  # fmt: skip


# --- personal tokens -----------------------------------------------------------------


def create_token(
    actor: AbstractBaseUser, *, name: Any, scope: Any = Scope.WRITE,
    expires_at: datetime | None = None, via: ApiToken | None = None,
    address: str | None = None,
) -> tuple[ApiToken, str]:  # fmt: skip
    """A personal token for ``actor``; ``via`` is the token the request came with, if any.
    Returns the token and its key, which is shown once and never stored."""
    _refuse_unless(
        not is_service_account(actor),
        _("A service account's tokens are managed by its tenant's admins."),
    )
    return _issue_checked(actor, actor, name=name, scope=scope, expires_at=expires_at,
                          via=via, address=address)  # fmt: skip


def own_tokens(user: AbstractBaseUser):
    return ApiToken.objects.filter(user_id=user.pk)


def revoke_own_token(actor: AbstractBaseUser, token: ApiToken, *, address: str | None) -> bool:
    _refuse_unless(token.user_id == actor.pk)
    _refuse_unless(
        not is_service_account(actor),
        _("A service account's tokens are managed by its tenant's admins."),
    )
    return interface.revoke(token, actor=actor, address=address)


# --- service accounts ----------------------------------------------------------------


def visible_service_accounts(user: Any):
    """Every service account for platform admins; those of the user's tenants otherwise."""
    tenants = quota_permissions.visible_tenants(user).values("pk")
    return ServiceAccount.objects.filter(tenant_id__in=tenants).select_related("tenant", "user")


def can_manage(user: Any, tenant: Tenant | int) -> bool:
    """Create and disable a tenant's service accounts and issue their tokens: the tenant's
    admins and platform admins, never a service account itself."""
    return quota_permissions.can_manage_members(user, tenant) and not is_service_account(user)


def _username_for(tenant: Tenant, name: str) -> str:
    # Readable in the audit log and the member list, unique by its random tail; the "sa-"
    # start is a convention only: what makes a service account is its ServiceAccount row.
    base = f"sa-{tenant.slug[:60]}-{slugify(name)[:60] or 'account'}"
    return f"{base}-{secrets.token_hex(3)}"


def create_service_account(
    actor: AbstractBaseUser, *, tenant: Tenant, name: Any, description: Any = "",
    address: str | None = None,
) -> ServiceAccount:  # fmt: skip
    """A service account in ``tenant``, a member of it, with no token yet."""
    _refuse_unless(can_manage(actor, tenant))
    errors = _name_errors(name)
    description = description or ""
    if not isinstance(description, str) or len(description) > DESCRIPTION_MAX:
        errors["description"] = [_("At most %(max)d characters.") % {"max": DESCRIPTION_MAX}]
    if not errors and ServiceAccount.objects.filter(tenant=tenant, name=name.strip()).exists():
        errors["name"] = [_("This tenant already has a service account with this name.")]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        # No password given: create_user stores an unusable one.
        user = get_user_model().objects.create_user(_username_for(tenant, name.strip()))
        account = ServiceAccount.objects.create(
            user=user, tenant=tenant, name=name.strip(), description=description,
            created_by=actor,
        )  # fmt: skip
        quotas_interface.add_member(
            tenant.pk, actor, username=user.get_username(), role=Role.MEMBER, address=address
        )
        record("service_account.created", account, actor=actor, address=address,
               tenant_id=tenant.pk, after={**snapshot(account, SERVICE_ACCOUNT_FIELDS),
                                           "username": user.get_username()})  # fmt: skip
    return account


def disable_service_account(
    actor: AbstractBaseUser, account: ServiceAccount, *, address: str | None = None
) -> bool:
    """Stop the account for good: its user inactive, its tokens revoked. It stays a member
    (its requests keep their requester) and stays listed. False when already disabled."""
    _refuse_unless(can_manage(actor, account.tenant_id))
    with transaction.atomic():
        account = ServiceAccount.objects.select_for_update().get(pk=account.pk)
        if account.disabled_at is not None:
            return False
        before = snapshot(account, SERVICE_ACCOUNT_FIELDS)
        account.disabled_at = timezone.now()
        account.save(update_fields=["disabled_at"])
        get_user_model().objects.filter(pk=account.user_id).update(is_active=False)
        for token in ApiToken.objects.filter(user_id=account.user_id, revoked_at__isnull=True):
            interface.revoke(token, actor=actor, address=address, tenant_id=account.tenant_id)
        record("service_account.disabled", account, actor=actor, address=address,
               tenant_id=account.tenant_id, before=before,
               after=snapshot(account, SERVICE_ACCOUNT_FIELDS))  # fmt: skip
    return True


def issue_service_token(
    actor: AbstractBaseUser, account: ServiceAccount, *, name: Any, scope: Any = Scope.WRITE,
    expires_at: datetime | None = None, via: ApiToken | None = None,
    address: str | None = None,
) -> tuple[ApiToken, str]:  # fmt: skip
    _refuse_unless(can_manage(actor, account.tenant_id))
    if account.disabled_at is not None:
        raise ValidationError({"service_account": [_("This service account is disabled.")]})
    return _issue_checked(account.user, actor, name=name, scope=scope, expires_at=expires_at,
                          via=via, address=address, tenant_id=account.tenant_id)  # fmt: skip


def revoke_service_token(
    actor: AbstractBaseUser, account: ServiceAccount, token: ApiToken, *,
    address: str | None = None,
) -> bool:  # fmt: skip
    _refuse_unless(can_manage(actor, account.tenant_id) and token.user_id == account.user_id)
    return interface.revoke(token, actor=actor, address=address, tenant_id=account.tenant_id)

"""What a directory says, applied: at each login (``backends.PortalLDAPBackend``, and
``oidc.PortalOIDCBackend`` for an OpenID Connect provider's claims) and by the
periodic check of every directory user (``directory.tasks.check_accounts``, a Celery beat task every
``LDAP_SYNC_EVERY_S``).

Applied each time, whole: the name and e-mail (django-auth-ldap's attribute map), the
department, active again (the directory found the account enabled), no local password, and
the roles its groups map to (``GroupMapping``): tenant memberships through
``quotas.interface.apply_directory_roles``, platform admin through a Django group holding
``quotas.change_tenant``. A user removed from a group loses its role at the next login or
check. An account the check no longer finds (gone, or matching ``LDAP_USER_DISABLED_FILTER``)
is deactivated: its sessions end and its API tokens are refused (``tokens`` finds only
active users' tokens). With the directory unreachable the check changes nothing.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from audit.interface import record
from directory.models import (
    TENANT_ROLE_ORDER,
    DirectoryAccount,
    GroupMapping,
    MappedRole,
    Source,
)
from quotas.interface import apply_directory_roles
from quotas.permissions import CHANGE_TENANT

# The Django group through which directory users hold the platform admin role.
PLATFORM_GROUP = "Platform admins (company directory)"


def directory_name() -> str:
    return getattr(settings, "LDAP_DIRECTORY_NAME", "") or "ldap"


def desired_roles(group_dns: set[str]) -> tuple[dict[int, str], set[int], bool]:
    """For a user in ``group_dns``: the role per tenant (the widest their groups give), the
    tenants any mapping names (the directory's to govern), and whether platform admin."""
    groups = {dn.strip().lower() for dn in group_dns}
    roles: dict[int, str] = {}
    governed: set[int] = set()
    platform = False
    for mapping in GroupMapping.objects.all():
        if mapping.tenant_id:
            governed.add(mapping.tenant_id)
        if mapping.group_dn.strip().lower() not in groups:
            continue
        if mapping.role == MappedRole.PLATFORM_ADMIN:
            platform = True
            continue
        held = roles.get(mapping.tenant_id)
        if held is None or TENANT_ROLE_ORDER.index(mapping.role) < TENANT_ROLE_ORDER.index(held):
            roles[mapping.tenant_id] = mapping.role
    return roles, governed, platform


def _platform_group() -> Group:
    group, _made = Group.objects.get_or_create(name=PLATFORM_GROUP)
    app_label, codename = CHANGE_TENANT.split(".")
    group.permissions.add(
        Permission.objects.get(content_type__app_label=app_label, codename=codename)
    )
    return group


def _set_platform_admin(user, wanted: bool, address: str | None, name: str) -> None:
    group = _platform_group()
    held = user.groups.filter(pk=group.pk).exists()
    if held == wanted:
        return
    (user.groups.add if wanted else user.groups.remove)(group)
    record(
        "directory.platform_admin", user, address=address,
        before={"platform_admin": held}, after={"platform_admin": wanted},
        message=_("Applied from the company directory (%(source)s).")
        % {"source": name},
    )  # fmt: skip


def _first(attrs: Any, name: str) -> str:
    values = attrs.get(name) if attrs and name else None
    return str(values[0])[:200] if values else ""


@transaction.atomic
def apply(user, ldap_user: Any, *, address: str | None = None) -> DirectoryAccount:
    """Apply what the directory says of ``user`` (saved by django-auth-ldap, attributes
    already copied) from its ``_LDAPUser``: account, department, active, roles."""
    groups = (
        sorted(ldap_user.group_dns) if getattr(settings, "AUTH_LDAP_GROUP_SEARCH", None) else []
    )
    return apply_account(
        user, source=Source.LDAP, name=directory_name(), dn=ldap_user.dn or "",
        department=_first(ldap_user.attrs, getattr(settings, "LDAP_ATTR_DEPARTMENT", "")),
        groups=groups, address=address,
    )  # fmt: skip


@transaction.atomic
def apply_account(
    user, *, source: str, name: str, groups: list[str], department: str = "", dn: str = "",
    subject: str = "", address: str | None = None, reactivate: bool = True,
) -> DirectoryAccount:  # fmt: skip
    """What a directory (``name``, of kind ``source``) said of ``user`` at a sign-in or a
    check, applied whole: active, no local password, its groups' roles, the account's facts.
    Its name and e-mail are the caller's to have saved (they come in each source's shape).
    ``reactivate``: whether this source owns whether the user is active (LDAP does; an
    OpenID Connect provider, which the portal cannot ask later, does not)."""
    account, _made = DirectoryAccount.objects.select_for_update().get_or_create(
        user=user, defaults={"directory": name, "source": source}
    )
    changed = []
    if reactivate and not user.is_active:
        user.is_active = True
        changed.append("is_active")
        record("user.reactivate", user, address=address, message=_(
            "Enabled in the company directory (%(source)s).") % {"source": name})  # fmt: skip
    if user.has_usable_password():
        # The directory keeps the password: an old local one would be a second way in.
        user.set_unusable_password()
        changed.append("password")
    if changed:
        user.save(update_fields=changed)
    roles, governed, platform = desired_roles(set(groups))
    _set_platform_admin(user, platform, address, name)
    kept = apply_directory_roles(user, roles, governed, source=name, address=address)
    account.directory = name
    account.source = source
    account.dn = dn
    account.subject = subject
    account.department = department[:200]
    account.groups = groups
    account.last_sync = timezone.now()
    account.disabled_at = None
    account.sync_note = (
        _("Kept as admin of %(tenants)s: a tenant keeps at least one admin.")
        % {"tenants": ", ".join(kept)}
        if kept else ""
    )  # fmt: skip
    account.save()
    return account


@transaction.atomic
def deactivate(account: DirectoryAccount) -> None:
    """The directory no longer has this account enabled: stop it here, at once."""
    user = type(account.user)._default_manager.select_for_update().get(pk=account.user_id)
    now = timezone.now()
    if user.is_active:
        user.is_active = False
        user.save(update_fields=["is_active"])
        record("user.deactivate", user, message=_(
            "Disabled or removed in the company directory (%(source)s).")
            % {"source": account.directory})  # fmt: skip
    DirectoryAccount.objects.filter(pk=account.pk).update(disabled_at=now, last_sync=now)

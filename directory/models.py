"""A directory's accounts (who came through it, what it said at the last sync) and the
mapping of its groups to tenants and roles, which platform admins edit in the Django admin.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _

from quotas.models import Tenant


class MappedRole(models.TextChoices):
    # The tenant roles' values are quotas.choices.Role's: a mapping row names one of them.
    ADMIN = "admin", _("Tenant admin")
    APPROVER = "approver", _("Approver")
    MEMBER = "member", _("Member")
    PLATFORM_ADMIN = "platform_admin", _("Platform admin")


# The widest first: a user in groups mapped to two roles of one tenant gets the wider.
TENANT_ROLE_ORDER = (MappedRole.ADMIN, MappedRole.APPROVER, MappedRole.MEMBER)


class GroupMapping(models.Model):
    """Members of the directory group ``group_dn`` hold ``role`` in ``tenant`` (or are
    platform admins, with no tenant), applied at each login and each periodic check."""

    group_dn = models.CharField(_("directory group (DN)"), max_length=1024)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="+",
        verbose_name=_("tenant"),
    )  # fmt: skip
    role = models.CharField(_("role"), max_length=16, choices=MappedRole)

    class Meta:
        ordering = ["group_dn", "tenant_id", "role"]
        verbose_name = _("group mapping")
        verbose_name_plural = _("group mappings")
        constraints = [
            models.UniqueConstraint(
                fields=["group_dn", "tenant", "role"], name="one_mapping_per_group_role"
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(role="platform_admin", tenant__isnull=True)
                    | (~models.Q(role="platform_admin") & models.Q(tenant__isnull=False))
                ),
                name="tenant_role_needs_tenant",
            ),
        ]

    def __str__(self) -> str:
        where = self.tenant.name if self.tenant_id else _("the platform")
        return f"{self.group_dn} → {self.get_role_display()} ({where})"

    def clean(self) -> None:
        self.group_dn = (self.group_dn or "").strip()
        if self.role == MappedRole.PLATFORM_ADMIN and self.tenant_id:
            raise ValidationError({"tenant": _("A platform admin mapping names no tenant.")})
        if self.role and self.role != MappedRole.PLATFORM_ADMIN and not self.tenant_id:
            raise ValidationError({"tenant": _("Choose the tenant this role is held in.")})


class Source(models.TextChoices):
    LDAP = "ldap", "LDAP"
    OIDC = "oidc", "OpenID Connect"


class DirectoryAccount(models.Model):
    """A user who signed in through a directory (LDAP, or an OpenID Connect provider): it
    owns their name, e-mail, password and whether they are active (``apps.OWNED_FIELDS``)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="directory_account"
    )
    directory = models.CharField(_("directory"), max_length=200)
    source = models.CharField(_("kind"), max_length=8, choices=Source, default=Source.LDAP)
    # The provider's ``sub`` claim (OpenID Connect): the account's key there, never reused.
    subject = models.CharField(_("subject"), max_length=255, blank=True)
    # The provider's refresh token of the last sign-in, encrypted (portal.crypto): what an API
    # token's use asks the provider with, with OIDC_TOKEN_RECHECK_S set (oidc_tokens.py).
    refresh_token = models.TextField(_("refresh token (encrypted)"), blank=True)
    dn = models.CharField(_("distinguished name"), max_length=1024, blank=True)
    department = models.CharField(_("department"), max_length=200, blank=True)
    groups = models.JSONField(_("directory groups"), default=list, blank=True)
    last_sync = models.DateTimeField(_("last sync"), null=True, blank=True)
    # Why the last sync did not end as the directory said (a tenant kept its last admin).
    sync_note = models.TextField(_("sync note"), blank=True)
    disabled_at = models.DateTimeField(_("disabled in the directory"), null=True, blank=True)

    class Meta:
        ordering = ["user__username"]
        verbose_name = _("directory account")
        verbose_name_plural = _("directory accounts")
        constraints = [
            models.UniqueConstraint(
                fields=["directory", "subject"], condition=~models.Q(subject=""),
                name="one_account_per_subject",
            ),
        ]  # fmt: skip

    def __str__(self) -> str:
        return f"{self.user} ({self.directory})"

"""API tokens: only a digest of the key is kept; the key itself is shown once.

A key reads ``gpp_<prefix>_<secret>``: the prefix finds the row by index, the digest of the
whole key proves it. The secret carries 256 bits, so a plain SHA-256 is enough; a slow hash
protects guessable passwords, not random keys, and would cost every API call.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from tokens.choices import Scope


class ApiTokenQuerySet(models.QuerySet):
    def usable(self) -> ApiTokenQuerySet:
        now = timezone.now()
        return self.filter(revoked_at__isnull=True, user__is_active=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )


class ApiToken(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens",
        verbose_name=_("user"),
    )  # fmt: skip
    name = models.CharField(_("name"), max_length=100)
    prefix = models.CharField(_("prefix"), max_length=16, unique=True, editable=False)
    digest = models.CharField(_("digest"), max_length=64, editable=False)
    scope = models.CharField(_("scope"), max_length=8, choices=Scope.choices, default=Scope.WRITE)
    created = models.DateTimeField(_("created"), auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+", verbose_name=_("created by"),
    )  # fmt: skip
    expires_at = models.DateTimeField(_("expires"), null=True, blank=True)
    revoked_at = models.DateTimeField(_("revoked"), null=True, blank=True)
    last_used_at = models.DateTimeField(_("last used"), null=True, blank=True)
    last_used_from = models.GenericIPAddressField(_("last used from"), null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")

    def __str__(self) -> str:
        return f"{self.name} (gpp_{self.prefix}_…)"

    @property
    def hint(self) -> str:
        return f"gpp_{self.prefix}_…"

    @property
    def is_usable(self) -> bool:
        return (
            self.revoked_at is None
            and (self.expires_at is None or self.expires_at > timezone.now())
            and self.user.is_active
        )


class ServiceAccount(models.Model):
    """A tenant's robot for CI: a user that only ever authenticates with API tokens.

    Its user has an unusable password and is refused by the login backend
    (``tokens.backends``), so it never signs in to pages; it is a member of its tenant,
    and its tokens are issued and revoked by the tenant's admins.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="service_account",
        verbose_name=_("user"),
    )  # fmt: skip
    tenant = models.ForeignKey(
        "quotas.Tenant", on_delete=models.CASCADE, related_name="service_accounts",
        verbose_name=_("tenant"),
    )  # fmt: skip
    name = models.CharField(_("name"), max_length=100)
    description = models.TextField(_("description"), blank=True, max_length=2000)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+", verbose_name=_("created by"),
    )  # fmt: skip
    created = models.DateTimeField(_("created"), auto_now_add=True)
    disabled_at = models.DateTimeField(_("disabled"), null=True, blank=True)

    class Meta:
        ordering = ["tenant_id", "name"]
        verbose_name = _("service account")
        verbose_name_plural = _("service accounts")
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="one_service_account_name")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.tenant})"

    @property
    def is_active(self) -> bool:
        return self.disabled_at is None

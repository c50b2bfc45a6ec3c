"""The audit log: who did what, when, from where, with the state before and after.

Append-only. The model refuses to save an existing row or delete one, the admin offers
neither, and on PostgreSQL a trigger refuses UPDATE and DELETE for anyone who reaches
the table by other means (migration 0001).
"""

from __future__ import annotations

from django.apps import apps
from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class AuditEntryQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise PermissionError("the audit log is append-only")

    def delete(self):
        raise PermissionError("the audit log is append-only")

    update.queryset_only = True
    delete.queryset_only = True


class AuditEntry(models.Model):
    at = models.DateTimeField(_("when"), auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.DO_NOTHING, db_constraint=False,
        null=True, blank=True, related_name="+",
    )  # fmt: skip
    # The name as it was, so that the entry reads the same after the user is gone.
    actor_name = models.CharField(_("who"), max_length=150, blank=True)
    address = models.GenericIPAddressField(_("source address"), null=True, blank=True)
    action = models.CharField(_("action"), max_length=64, db_index=True)
    target_type = models.CharField(_("object type"), max_length=64, db_index=True)
    target_id = models.CharField(_("object id"), max_length=64, blank=True)
    target_repr = models.CharField(_("object"), max_length=255, blank=True)
    # The tenant the change belongs to, so that tenant admins read their own part.
    tenant_id = models.PositiveBigIntegerField(_("tenant"), null=True, blank=True, db_index=True)
    before = models.JSONField(_("before"), null=True, blank=True)
    after = models.JSONField(_("after"), null=True, blank=True)
    message = models.TextField(_("message"), blank=True)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit log")
        default_permissions = ("view",)
        indexes = [models.Index(fields=["target_type", "target_id"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.target_repr}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise PermissionError("the audit log is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("the audit log is append-only")

    @property
    def target_kind(self) -> str:
        """What the target is, in the reader's language ("user", "用户"); the stored label
        ("auth.user") for a model that no longer exists."""
        try:
            return str(apps.get_model(self.target_type)._meta.verbose_name)
        except (LookupError, ValueError):
            return self.target_type

"""The Django admin for the reclaim policies and unit prices (set by platform admins),
exemptions and warnings (read here; changed on the idle report). Every save is audited in
its transaction."""

from __future__ import annotations

from django.contrib import admin
from django.db import transaction
from django.http import HttpRequest

from audit.interface import record, snapshot
from portal.security import client_ip
from reports.models import Exemption, ReclaimPolicy, ReclaimWarning, UnitPrice


class _AuditedAdmin(admin.ModelAdmin):
    action_prefix = ""

    def save_model(self, request: HttpRequest, obj, form, change: bool) -> None:
        with transaction.atomic():
            before = snapshot(type(obj).objects.get(pk=obj.pk)) if change else None
            super().save_model(request, obj, form, change)
            record(f"{self.action_prefix}.{'update' if change else 'create'}", obj,
                   actor=request.user, address=client_ip(request), before=before,
                   after=snapshot(obj))  # fmt: skip

    def delete_model(self, request: HttpRequest, obj) -> None:
        with transaction.atomic():
            record(f"{self.action_prefix}.delete", obj, actor=request.user,
                   address=client_ip(request), before=snapshot(obj))  # fmt: skip
            super().delete_model(request, obj)


@admin.register(ReclaimPolicy)
class ReclaimPolicyAdmin(_AuditedAdmin):
    action_prefix = "reclaim_policy"
    list_display = ["pool", "idle_util_pct", "idle_memory_pct", "idle_window_minutes",
                    "reclaim", "grace_hours"]  # fmt: skip


@admin.register(UnitPrice)
class UnitPriceAdmin(_AuditedAdmin):
    action_prefix = "unit_price"
    list_display = ["__str__", "currency", "per_gpu_hour", "per_compute_pct_hour",
                    "per_memory_gib_hour"]  # fmt: skip


@admin.register(Exemption)
class ExemptionAdmin(admin.ModelAdmin):
    list_display = ["lease", "reason", "ends_at", "created_by", "created"]
    readonly_fields = ["lease", "reason", "ends_at", "created_by", "created"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(ReclaimWarning)
class ReclaimWarningAdmin(ExemptionAdmin):
    list_display = ["lease", "state", "warned_at", "release_after", "appealed_at", "decided_by"]
    readonly_fields = list_display
    list_filter = ["state"]

"""The audit log in Django's admin: read-only for those who may view it, and no way to
add, change or delete an entry, whatever permissions a user is given."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from audit.models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = [
        "at", "actor_name", "address", "action", "target_type", "target_id", "target_repr",
        "tenant_id",
    ]  # fmt: skip
    list_filter = ["action", "target_type", ("at", admin.DateFieldListFilter)]
    search_fields = ["actor_name", "target_repr", "=target_id"]
    readonly_fields = [
        "at", "actor", "actor_name", "address", "action", "target_type", "target_id",
        "target_repr", "tenant_id", "before", "after", "message",
    ]  # fmt: skip
    fields = readonly_fields
    # No bulk action at all: Django's "delete selected" is the one it would offer.
    actions = None
    list_select_related = False
    show_full_result_count = False  # a count over millions of rows on every page

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditEntry | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditEntry | None = None) -> bool:
        return False

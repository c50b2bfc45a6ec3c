"""The Django admin for pools: changes go through pools.configuration (its rules, its audit);
cards, leases and allocations are read here, never written (the allocation service keeps
their counters and states)."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from pools import configuration
from pools.models import Allocation, Lease, Pool, PoolCard
from portal.forms import add_service_errors
from portal.security import client_ip


class PoolCardInline(admin.TabularInline):
    model = PoolCard
    extra = 0
    fields = [
        "gpu", "added_by_hand", "compute_capacity", "memory_capacity_mib", "compute_allocated",
        "memory_allocated_mib", "slices", "held_whole", "cordoned_at", "cordon_reason",
    ]  # fmt: skip
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class PoolAdminForm(forms.ModelForm):
    class Meta:
        model = Pool
        fields = list(configuration.FIELDS)

    def clean(self) -> dict:
        """The rules of pools.configuration, as the pages and the API apply them."""
        cleaned = super().clean()
        if self.errors:
            return cleaned
        _values, errors = configuration.clean_values({k: cleaned[k] for k in configuration.FIELDS})
        add_service_errors(self, errors)
        if self.instance.pk and not self.errors:
            errors = configuration.ratio_errors(
                self.instance, cleaned["compute_ratio"], cleaned["memory_ratio"]
            )
            add_service_errors(self, errors)
        return cleaned


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    form = PoolAdminForm
    list_display = ["name", "slug", "compute_ratio", "memory_ratio", "policy", "match_by_rules"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [PoolCardInline]

    def save_model(self, request: HttpRequest, obj: Pool, form, change: bool) -> None:
        values = {name: form.cleaned_data[name] for name in configuration.FIELDS}
        who = {"actor": request.user, "address": client_ip(request)}
        # The form checked the rules; a race that breaks one now is a 500, never a silent
        # overcommit (the service refuses and changes nothing).
        if change:
            saved = configuration.update_pool(obj.pk, values, **who)
        else:
            saved = configuration.create_pool(values, **who)
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: Pool) -> None:
        configuration.delete_pool(obj.pk, actor=request.user, address=client_ip(request))

    def has_delete_permission(self, request: HttpRequest, obj: Pool | None = None) -> bool:
        if obj is not None and (obj.leases.exists() or obj.requests.exists()):
            return False  # its history refers to it (pools.configuration.delete_pool)
        return super().has_delete_permission(request, obj)

    def get_actions(self, request: HttpRequest) -> dict:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # bulk delete would skip the service's rules
        return actions


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class AllocationInline(admin.TabularInline):
    model = Allocation
    extra = 0
    fields = ["gpu", "compute_pct", "memory_mib", "whole_card", "state", "agent_sync"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Lease)
class LeaseAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "pool", "holder", "count", "compute_pct", "memory_mib", "state"]
    list_filter = ["state", "pool"]
    search_fields = ["label", "holder__username", "unix_user"]
    inlines = [AllocationInline]


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "pool", "lease", "gpu", "compute_pct", "memory_mib", "state",
                    "agent_sync"]  # fmt: skip
    list_filter = ["state", "agent_sync", "pool"]
    search_fields = ["lease__label", "lease__holder__username", "gpu__uuid"]

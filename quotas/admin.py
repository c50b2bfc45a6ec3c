"""Tenants, their members (inline) and quotas in Django's admin, for platform admins.

The admin writes rows directly; the pages and the API go through ``quotas.tenancy.services`` and
the audit log. Quotas are validated by the model (guarantee within limit) here too.
"""

from django.contrib import admin

from quotas.models import Membership, Quota, Tenant


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class QuotaInline(admin.StackedInline):
    model = Quota
    extra = 0
    show_change_link = True


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, QuotaInline]


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = [
        "tenant", "pool", "guaranteed_vgpus", "limit_vgpus", "limit_gpu_hours", "budget_period",
    ]  # fmt: skip
    list_filter = ["budget_period", "pool"]
    search_fields = ["tenant__name", "pool__name"]
    list_select_related = ["tenant", "pool"]

from django import forms
from django.contrib import admin
from django.db import models
from django.utils.translation import gettext_lazy as _

from agents.models import GPU, Node


class GPUInline(admin.TabularInline):
    model = GPU
    extra = 0
    fields = ["index", "uuid", "model", "memory_total_mib", "health", "last_seen"]
    readonly_fields = fields
    can_delete = False


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "hostname", "state", "source", "agent_url", "last_seen"]
    list_filter = ["state", "source"]
    search_fields = ["name", "hostname"]
    readonly_fields = [
        "hostname",
        "missed_polls",
        "last_seen",
        "last_error",
        "agent_version",
        "driver_version",
        "cuda_version",
        "created",
        "updated",
    ]
    fieldsets = [
        (None, {"fields": ["name", "source", "agent_url", "agent_token", "labels", "state"]}),
        (_("Status"), {"fields": readonly_fields}),
    ]
    inlines = [GPUInline]
    # Agents on a private network usually speak plain HTTP.
    formfield_overrides = {models.URLField: {"assume_scheme": "http"}}

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        token = form.base_fields["agent_token"]
        # Never echo the token back into the page.
        token.widget = forms.PasswordInput(render_value=False)
        token.required = False
        if obj is not None:
            token.help_text = _("Leave empty to keep the current token.")
        return form

    def save_model(self, request, obj, form, change):
        if change and not form.cleaned_data.get("agent_token"):
            obj.agent_token = Node.objects.get(pk=obj.pk).agent_token
        super().save_model(request, obj, form, change)


@admin.register(GPU)
class GPUAdmin(admin.ModelAdmin):
    list_display = ["__str__", "uuid", "model", "memory_total_mib", "health", "last_seen"]
    list_filter = ["health", "model", "vendor"]
    search_fields = ["uuid", "model", "node__name"]
    list_select_related = ["node"]
    readonly_fields = [
        "node",
        "index",
        "uuid",
        "model",
        "memory_total_mib",
        "pci_bus_id",
        "serial",
        "health",
        "last_seen",
        "created",
        "updated",
    ]

from django import forms
from django.contrib import admin
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from agents import node_audit, registration
from agents.choices import READ_ONLY_SOURCES
from agents.models import GPU, Node, lock_inventory
from portal.forms import add_service_errors


class GPUInline(admin.TabularInline):
    model = GPU
    extra = 0
    fields = ["index", "uuid", "model", "memory_total_mib", "health", "last_seen"]
    readonly_fields = fields
    can_delete = False


class NodeAdminForm(forms.ModelForm):
    # Not a model field: the token is written encrypted and never read back into the page.
    agent_token = forms.CharField(
        label=_("agent token"),
        required=False,
        max_length=1024,
        strip=True,
        widget=forms.PasswordInput(render_value=False),
    )

    class Meta:
        model = Node
        fields = ["name", "source", "agent_url", "labels", "state"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["agent_token"].help_text = _("Leave empty to keep the current token.")

    def clean(self) -> dict:
        """The rules of agents.registration (bare host names, unique URL), as the pages apply."""
        cleaned = super().clean()
        values = {k: cleaned.get(k) for k in ("name", "agent_url", "labels", "state")}
        values["token"] = cleaned.get("agent_token") or None
        if not values["agent_url"] or cleaned.get("source") in READ_ONLY_SOURCES:
            values["agent_url"] = None  # optional here; nodes read through Prometheus have none
        normalised, errors = registration.check_fields(values, self.instance.pk)
        add_service_errors(self, errors, fields={"token": "agent_token"})  # beside its field
        if not errors:
            cleaned.update({k: v for k, v in normalised.items() if k in self.fields})
        return cleaned

    def save(self, commit: bool = True) -> Node:
        if token := self.cleaned_data.get("agent_token"):
            self.instance.set_agent_token(token)
        return super().save(commit)


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    form = NodeAdminForm
    list_display = [
        "name",
        "hostname",
        "state",
        "source",
        "agent_url",
        "agent_token_hint",
        "last_seen",
    ]
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

    # Each change recorded in the audit log, within the admin's own transaction (its add,
    # change and delete views run in one; the bulk delete action takes its own below).
    def save_model(self, request: HttpRequest, obj: Node, form, change: bool) -> None:
        stored = Node.objects.filter(pk=obj.pk).first() if change else None
        before = node_audit.state(stored) if stored is not None else None
        super().save_model(request, obj, form, change)
        if before is None:
            node_audit.created(obj, **node_audit.who(request))
        else:
            replaced = bool(form.cleaned_data.get("agent_token"))
            node_audit.updated(obj, before, token_replaced=replaced, **node_audit.who(request))

    def delete_model(self, request: HttpRequest, obj: Node) -> None:
        node_audit.deleted([obj], **node_audit.who(request))
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        with transaction.atomic():
            lock_inventory(exclusive=True)  # as the delete itself takes it: first
            node_audit.deleted(list(queryset), **node_audit.who(request))
            super().delete_queryset(request, queryset)


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

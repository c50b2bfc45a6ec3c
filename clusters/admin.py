from django.contrib import admin

from clusters.models import Cluster, ClusterNode, ClusterWorkload, NamespaceMapping


class NamespaceInline(admin.TabularInline):
    model = NamespaceMapping
    extra = 0


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    # The token is set on the Register page or the API; here only its hint shows.
    list_display = ("name", "api_url", "enforcement", "kueue", "pool", "synced_at")
    exclude = ("token_encrypted",)
    readonly_fields = ("token_hint", "synced_at", "sync_error", "sync_report", "inventory_error")
    inlines = [NamespaceInline]


@admin.register(ClusterWorkload)
class ClusterWorkloadAdmin(admin.ModelAdmin):
    # Written by the gate pass only (clusters.gates): shown, not edited.
    list_display = ("name", "namespace", "cluster", "state", "request", "updated")
    list_filter = ("cluster", "state")
    readonly_fields = ("cluster", "namespace", "kind", "name", "uid", "request", "state",
                       "error", "told", "node", "devices", "mismatch", "readback_error",
                       "claims")  # fmt: skip


@admin.register(ClusterNode)
class ClusterNodeAdmin(admin.ModelAdmin):
    # Written by the cluster's sync only (clusters.inventory): shown, not edited.
    list_display = ("name", "cluster", "node", "error")
    list_filter = ("cluster",)
    readonly_fields = ("cluster", "name", "node", "error")

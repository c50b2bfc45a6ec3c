from django.contrib import admin

from alerts.models import Channel, Delivery, DeliveryAttempt, Event


@admin.register(Channel)
class ChannelAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "owner", "tenant", "enabled"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name"]
    # Secrets are never shown or edited here: the channel pages and API keep the rules.
    exclude = ["secrets_encrypted"]
    readonly_fields = ["settings", "secret_hint", "disabled_reason"]


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ["rule_name", "severity", "scope", "state", "started_at"]
    list_filter = ["state", "severity"]


class DeliveryAttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    can_delete = False
    readonly_fields = ["number", "started_at", "duration_ms", "ok", "permanent", "error"]


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["pk", "channel", "event", "status", "attempts", "created"]
    list_filter = ["status"]
    inlines = [DeliveryAttemptInline]
    readonly_fields = ["claimed_at"]

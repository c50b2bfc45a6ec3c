from django.contrib import admin

from directory.models import DirectoryAccount, GroupMapping


@admin.register(GroupMapping)
class GroupMappingAdmin(admin.ModelAdmin):
    list_display = ("group_dn", "role", "tenant")
    list_filter = ("role",)
    search_fields = ("group_dn",)


@admin.register(DirectoryAccount)
class DirectoryAccountAdmin(admin.ModelAdmin):
    # What the directory said: read here, changed only by the next sync.
    list_display = ("user", "directory", "source", "department", "last_sync", "disabled_at")
    readonly_fields = ("user", "directory", "source", "dn", "subject", "department", "groups",
                       "last_sync", "sync_note", "disabled_at")  # fmt: skip
    # The provider's refresh token (encrypted) is no admin's to read or change.
    exclude = ("refresh_token",)

    def has_add_permission(self, request) -> bool:
        return False

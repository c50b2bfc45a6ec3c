from audit.api.serializers import AuditEntrySerializer
from audit.filtersets import AuditEntryFilterSet
from audit.models import AuditEntry
from audit.permissions import AuditEntryPermissions
from portal.api_views import ApiReadOnlyModelViewSet


class AuditEntryViewSet(ApiReadOnlyModelViewSet):
    """The audit log, newest first; platform admins only. Append-only: there is no write."""

    queryset = AuditEntry.objects.order_by("-at", "-id")
    serializer_class = AuditEntrySerializer
    filterset_class = AuditEntryFilterSet
    permission_classes = [AuditEntryPermissions]

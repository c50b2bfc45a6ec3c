from rest_framework import serializers

from audit.models import AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    """One entry of the audit log: who (the user's id, and their name as it was then), when,
    from which address, what (an action on an object), and the object before and after."""

    class Meta:
        model = AuditEntry
        fields = [
            "id", "at", "actor", "actor_name", "address", "action", "target_type", "target_id",
            "target_repr", "tenant_id", "before", "after", "message",
        ]  # fmt: skip
        read_only_fields = fields

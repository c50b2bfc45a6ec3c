"""What the wiring layer itself stores: the API's idempotency records (portal/idempotency.py).

They live here because they belong to no domain app: any API POST may carry a key, and the
record is about the caller and the answer, not about what the call changed.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class IdempotencyRecord(models.Model):
    """One ``Idempotency-Key`` of one caller, and the answer its first request got."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    # SHA-256 of the method, path and body: the same key with another request is refused.
    fingerprint = models.CharField(max_length=64)
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=2048)
    status_code = models.PositiveSmallIntegerField(default=0)
    body = models.TextField(default="")  # the answer's JSON, replayed as it was
    created = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="portal_idempotency_owner_key")
        ]

    def __str__(self) -> str:
        return f"{self.owner_id}:{self.key}"

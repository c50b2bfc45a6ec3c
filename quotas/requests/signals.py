"""What quotas tells the apps above it (alerts turns these into email and IM), always
after the change commits."""

from __future__ import annotations

from django.dispatch import Signal

# Sent after commit for each step of a GPU request, with ``request_id``, ``kind`` (a
# quotas.choices.NoticeKind value), ``tenant_id``, ``requester_id``, ``recipient_ids``
# (a frozenset: who was told in the portal) and ``comment`` (an approver's words, or "").
request_event = Signal()

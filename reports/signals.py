"""What reports tells the apps above it (alerts delivers these by email and IM), always
after the change commits. Each is sent with plain values only."""

from __future__ import annotations

from django.dispatch import Signal

# A lease's owner was warned that it is idle: ``warning_id``, ``lease_id``, ``tenant_id``
# (None for a lease held outside a request), ``holder_id``, ``release_after`` (datetime).
reclaim_warned = Signal()
# An idle lease was released by the reclaim policy: ``warning_id``, ``lease_id``,
# ``tenant_id``, ``holder_id``.
reclaimed = Signal()
# An owner appealed (``decided`` False) or an approver decided the appeal (``decided``
# True, ``granted``): ``warning_id``, ``lease_id``, ``tenant_id``, ``holder_id``.
appeal_event = Signal()
# The daily idle digest: ``day`` (a date), ``recipient_ids`` (a frozenset of user ids:
# platform admins and tenant admins), ``digest`` (reports.digest.Digest as a dict:
# per tenant the idle allocations and the GPU-hours wasted). Alerts delivers it.
idle_digest = Signal()

"""What reports tells the apps above it (alerts delivers these by email and IM), always
after the change commits. Each is sent with plain values only."""

from __future__ import annotations

from django.dispatch import Signal

# A lease's owner was warned that it will be taken back: ``warning_id``, ``lease_id``,
# ``tenant_id`` (None for a lease held outside a request), ``holder_id``, ``release_after``
# (datetime), ``cause`` ("idle", or "borrowed": capacity lent above the tenant's guarantee
# that another tenant needs; then also ``reason``, the owner's words). Every signal here
# carries ``cause``.
reclaim_warned = Signal()
# A warned lease (idle, or borrowed) was released after its grace period: ``warning_id``,
# ``lease_id``, ``tenant_id``, ``holder_id``.
reclaimed = Signal()
# An owner appealed (``decided`` False) or an approver decided the appeal (``decided``
# True, ``granted``): ``warning_id``, ``lease_id``, ``tenant_id``, ``holder_id``.
appeal_event = Signal()
# The daily idle digest: ``day`` (a date), ``recipient_ids`` (a frozenset of user ids:
# platform admins and tenant admins), ``digest`` (reports.digest.Digest as a dict:
# per tenant the idle allocations and the GPU-hours wasted). Alerts delivers it.
idle_digest = Signal()

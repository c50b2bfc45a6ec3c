"""What pools tells other apps and its own agent sync, always after commit."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.dispatch import Signal

# Sent with ``node_ids`` (a frozenset) after a transaction that changed the slices placed
# on those nodes commits: their agents must get their desired state again.
desired_state_changed = Signal()


def notify_nodes(node_ids: Iterable[int]) -> None:
    ids = frozenset(node_ids)
    if ids:
        transaction.on_commit(lambda: desired_state_changed.send_robust(sender=None, node_ids=ids))

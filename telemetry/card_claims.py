"""A card UUID reported by a second node: recorded and shown, never moved silently.

A card is its UUID wherever it goes; a second node reporting it is either a card really
moved (an admin knows) or an agent that is wrong or lying (a copied configuration, a
simulator, an attacker holding a token). The cycle cannot tell, so the card stays where
the inventory has it, both nodes say so in their ``last_error`` (node page, node API,
fleet tile), and an admin decides: deletes the card or its node, after which the next
answer records it where it is reported, or moves it (``move_to_reporting_node``, an
admin action).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction
from django.db.models import Q

from agents.models import GPU
from telemetry.models import CardClaim


def record(reconciled: Iterable[int], claims: dict[int, set[int]], now: datetime) -> None:
    """The claims of the nodes just reconciled, as they stand: {node: {GPU id}}; claims
    of those nodes not reported again are dropped (the node stopped reporting the card)."""
    reconciled = list(reconciled)
    wanted = {(node, gpu) for node, gpus in claims.items() for gpu in gpus}
    existing = {
        (node, gpu): pk
        for pk, node, gpu in CardClaim.objects.filter(node_id__any=reconciled).values_list(
            "pk", "node_id", "gpu_id"
        )
    }
    if gone := [pk for key, pk in existing.items() if key not in wanted]:
        CardClaim.objects.filter(pk__any=gone).delete()
    if new := wanted - existing.keys():
        CardClaim.objects.bulk_create(
            [CardClaim(node_id=node, gpu_id=gpu, since=now) for node, gpu in sorted(new)],
            ignore_conflicts=True,
        )


def messages(node_ids: Iterable[int]) -> dict[int, str]:
    """Each given node's conflicts, worded for its ``last_error``; nodes without any are
    left out. One indexed query, on a table that is normally empty."""
    ids = set(node_ids)
    if not ids:
        return {}
    rows = (
        CardClaim.objects.filter(Q(node_id__any=ids) | Q(gpu__node_id__any=ids))
        .order_by("gpu__uuid", "node__name")
        .values_list("gpu__uuid", "gpu__node_id", "gpu__node__name", "node_id", "node__name")
    )
    texts: dict[int, list[str]] = {}
    for uuid, owner, owner_name, claimant, claimant_name in rows:
        if claimant in ids:
            texts.setdefault(claimant, []).append(
                f"GPU {uuid} is recorded on node {owner_name}, yet this node reports it too: "
                "it stays there until an admin moves or deletes it"
            )
        if owner in ids:
            texts.setdefault(owner, []).append(
                f"GPU {uuid} is also reported by node {claimant_name}: "
                "it stays here until an admin moves or deletes it"
            )
    return {node: "; ".join(lines)[:1000] for node, lines in texts.items()}


def move_to_reporting_node(claim_ids: Iterable[int]) -> int:
    """An admin's decision: each claimed card goes to the node that reports it. Returns the
    cards moved; a card claimed by two nodes at once moves to one of them, once."""
    moved: set[int] = set()
    with transaction.atomic():
        claims = CardClaim.objects.select_for_update().filter(pk__any=list(claim_ids))
        for gpu_id, node_id in list(claims.order_by("since").values_list("gpu_id", "node_id")):
            if gpu_id not in moved:
                GPU.objects.filter(pk=gpu_id).update(node_id=node_id)
                CardClaim.objects.filter(gpu_id=gpu_id).delete()
                moved.add(gpu_id)
    return len(moved)

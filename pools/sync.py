"""Agent sync: each node's agent holds the slices the portal placed on it.

The portal is the source of truth and sends the whole list (``PUT /v1/desired-state``,
``agents/gpu_agent/desired.py``), never a change: a lost or repeated send cannot leave
the node half-way. An allocation is confirmed when the agent's answer, or later its
report (the snapshot's ``allocations``), lists it; a slice the agent refuses is marked
failed and the rest are sent again without it. Sends are queued (``pools.tasks``) and
coalesced per node; nothing here runs inside a poll cycle.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents import client as agent_client
from agents.choices import NodeSource
from agents.models import Node
from pools.choices import AgentSync, AllocationState
from pools.models import Allocation, NodeSync

logger = logging.getLogger(__name__)

DESIRED_PATH = "/v1/desired-state"
# The agent names a refused slice by its position: "slices[3].owner: expected a user name".
_REFUSED_SLICE = re.compile(r"^slices\[(\d+)\]")
ERROR_CHARS = 200
# A node whose every slice is refused still ends: each round drops at least one.
MAX_ROUNDS = 8


@dataclass
class SyncOutcome:
    node_id: int
    sent: int = 0  # slices in the last list sent
    confirmed: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    error: str = ""  # the send's failure (no answer, or an answer that is not the state)


def short(text: str) -> str:
    """An agent's or the network's text as an admin reads it: one line, bounded, no NUL."""
    return " ".join(text.replace("\x00", " ").split())[:ERROR_CHARS]


def desired_slices(node_id: int) -> list[tuple[int, dict[str, Any]]]:
    """The node's active allocations as the agent's slices: [(allocation id, slice)]."""
    rows = (
        Allocation.objects.filter(state=AllocationState.ACTIVE, gpu__node_id=node_id)
        .order_by("pk")
        .values_list("pk", "gpu__uuid", "compute_pct", "memory_mib", "lease__unix_user")
    )
    return [
        (pk, {"allocation_id": f"alloc-{pk}", "gpu_uuid": uuid, "compute_pct": compute,
              "memory_mib": memory, "owner": owner})
        for pk, uuid, compute, memory, owner in rows
    ]  # fmt: skip


def _held(response: agent_client.Response) -> tuple[int, set[str]] | None:
    """The generation and allocation ids of a 200's document, or None if it is not one."""
    try:
        document = response.json()
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    generation, slices = document.get("generation"), document.get("slices")
    if type(generation) is not int or generation < 0 or not isinstance(slices, list):
        return None
    held = {
        s["allocation_id"]
        for s in slices[:100_000]
        if isinstance(s, dict) and isinstance(s.get("allocation_id"), str)
    }
    return generation, held


def _refusal(response: agent_client.Response) -> str:
    try:
        body = response.json()
        text = body.get("error") if isinstance(body, dict) else None
    except ValueError:
        text = None
    return short(f"HTTP {response.status}: {text if isinstance(text, str) else ''}")


def _send(node: dict[str, Any], slices: list[dict[str, Any]]) -> agent_client.Response:
    request = agent_client.Request(
        "PUT", node["agent_url"].rstrip("/") + DESIRED_PATH, node["token"], json={"slices": slices}
    )
    return agent_client.send(
        request,
        timeout=settings.GPU_POLL_TIMEOUT,
        retries=settings.GPU_POLL_RETRIES,
        backoff=settings.GPU_POLL_RETRY_BACKOFF,
    )


def sync_node(node_id: int) -> SyncOutcome:
    """Send the node's agent its whole desired state and record what it answered."""
    outcome = SyncOutcome(node_id)
    node = (
        Node.objects.filter(pk=node_id, source=NodeSource.AGENT)
        .exclude(agent_url="")
        .values("pk", "agent_url", "agent_token_encrypted")
        .first()
    )
    if node is None:
        return outcome
    node["token"] = Node(agent_token_encrypted=node["agent_token_encrypted"]).agent_token
    wanted = desired_slices(node_id)
    for _round in range(MAX_ROUNDS):
        outcome.sent = len(wanted)
        response = _send(node, [s for _, s in wanted])
        if response.error:
            outcome.error = short(response.error)
            break
        if response.status == 200:
            held = _held(response)
            if held is None:
                outcome.error = "HTTP 200: the answer is not a desired state"
                break
            generation, ids = held
            outcome.confirmed = [pk for pk, s in wanted if s["allocation_id"] in ids]
            _record(node_id, outcome, generation)
            return outcome
        error = _refusal(response)
        match = _REFUSED_SLICE.match(error.partition(": ")[2])
        if response.status == 422 and match and int(match.group(1)) < len(wanted):
            # One slice refused: mark it, send the others again without it.
            pk, _slice = wanted.pop(int(match.group(1)))
            _mark_failed([pk], error)
            outcome.failed.append(pk)
            continue
        outcome.error = error
        if 400 <= response.status < 500 and response.status not in (401, 403, 408, 429):
            # The agent refused the list as a whole: none of it is held.
            outcome.failed.extend(pk for pk, _ in wanted)
            _mark_failed(outcome.failed, error)
        break
    _record(node_id, outcome, None)
    return outcome


def _mark_failed(pks: Iterable[int], error: str) -> None:
    Allocation.objects.filter(pk__in=list(pks), state=AllocationState.ACTIVE).update(
        agent_sync=AgentSync.FAILED, agent_error=short(error)
    )


def _record(node_id: int, outcome: SyncOutcome, generation: int | None) -> None:
    now = timezone.now()
    with transaction.atomic():
        values: dict[str, Any] = {"sent_at": now, "slices": outcome.sent, "error": outcome.error}
        if generation is not None:
            values.update(generation=generation, confirmed_at=now)
        NodeSync.objects.update_or_create(node_id=node_id, defaults=values)
        if outcome.confirmed:
            confirm(outcome.confirmed)
        if generation is None:
            # Not confirmed by this send: one try more; FAILED after the last one.
            count_unconfirmed_send(node_id, outcome.error or "the agent did not answer")


def confirm(pks: Iterable[int]) -> int:
    """Mark allocations held by their agent (its answer or its report lists them)."""
    return (
        Allocation.objects.filter(pk__in=list(pks), state=AllocationState.ACTIVE)
        .exclude(agent_sync=AgentSync.CONFIRMED, agent_attempts=0)
        .update(agent_sync=AgentSync.CONFIRMED, agent_error="", agent_attempts=0)
    )


def count_unconfirmed_send(node_id: int, error: str) -> None:
    pending = Allocation.objects.filter(
        state=AllocationState.ACTIVE, gpu__node_id=node_id, agent_sync=AgentSync.PENDING
    )
    pending.update(agent_attempts=F("agent_attempts") + 1)
    pending.filter(agent_attempts__gte=settings.POOLS_SYNC_MAX_ATTEMPTS).update(
        agent_sync=AgentSync.FAILED, agent_error=short(error)
    )


def unconfirm(pks: Iterable[int]) -> int:
    """Allocations the agent's report no longer lists (it restarted without its state):
    pending again until it confirms them."""
    return Allocation.objects.filter(
        pk__in=list(pks), state=AllocationState.ACTIVE, agent_sync=AgentSync.CONFIRMED
    ).update(agent_sync=AgentSync.PENDING)

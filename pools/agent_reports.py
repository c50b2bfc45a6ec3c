"""What the agents report about the portal's slices, read after each poll cycle.

Telemetry keeps each node's report (``telemetry.interface.latest``: ``allocations``,
``violations``, ``desired_generation``, checked against the reading schema). Here it
confirms allocations, notices an agent that holds other slices than ours (it restarted
with an empty state, or kept one we released) so its desired state is sent again, and
reads the cards' fault counters for cordons. Runs in a task, never in the poll cycle.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agents.gpu_agent import schema
from pools.choices import AgentSync, AllocationState
from pools.models import Allocation, PoolCard
from pools.sync import confirm, unconfirm
from telemetry import interface as telemetry

XID_KEY, ECC_KEY = "xid", "ecc"


@dataclass
class CycleOutcome:
    confirmed: int = 0
    unconfirmed: int = 0
    resend: set[int] = field(default_factory=set)  # nodes whose agents need the state again
    cordons: list[tuple[int, str]] = field(default_factory=list)  # (pool card, reason)
    marks: dict[int, dict[str, int]] = field(default_factory=dict)  # pool card -> new marks


def held_slices(reading: telemetry.NodeReading) -> set[str]:
    """The allocation ids the agent reports holding (none before it was sent any)."""
    return {a["allocation_id"] for a in reading.allocations}


def compare(node_ids: Iterable[int], came_back: Iterable[int] = ()) -> CycleOutcome:
    """Confirm what the agents report holding; say which nodes need their state again."""
    node_ids = list(node_ids)
    outcome = CycleOutcome()
    reports = telemetry.latest(node_ids)
    mine: dict[int, dict[str, tuple[int, str]]] = defaultdict(dict)
    rows = Allocation.objects.filter(
        state=AllocationState.ACTIVE, gpu__node_id__in=node_ids
    ).values_list("pk", "gpu__node_id", "agent_sync")
    for pk, node_id, sync in rows:
        mine[node_id][f"alloc-{pk}"] = (pk, sync)
    to_confirm, to_unconfirm = [], []
    for node_id, reading in reports.items():
        held, wanted = held_slices(reading), mine.get(node_id, {})
        for agent_id, (pk, sync) in wanted.items():
            if agent_id in held and sync != AgentSync.CONFIRMED:
                to_confirm.append(pk)
            elif agent_id not in held and sync == AgentSync.CONFIRMED:
                to_unconfirm.append(pk)
        expected = {a for a, (_, sync) in wanted.items() if sync != AgentSync.FAILED}
        if (held - set(wanted)) or (expected - held):
            outcome.resend.add(node_id)
    # A node back from offline gets its state at once, whatever its report says.
    outcome.resend.update(n for n in came_back if n in mine or n in reports)
    if to_confirm:
        outcome.confirmed = confirm(to_confirm)
    if to_unconfirm:
        outcome.unconfirmed = unconfirm(to_unconfirm)
    _faults(reports, outcome)
    return outcome


def _faults(reports: dict[int, telemetry.NodeReading], outcome: CycleOutcome) -> None:
    """Cards whose XID or uncorrectable ECC counters moved: new marks, and cordons for a
    critical XID or more uncorrectable errors. The marks follow the counters down too (an
    agent or driver restart zeroes them), so each new fault counts once."""
    critical = settings.POOLS_CRITICAL_XIDS
    cards = PoolCard.objects.filter(gpu__node_id__in=list(reports)).values_list(
        "pk", "gpu__node_id", "gpu__uuid", "fault_marks", "cordoned_at"
    )
    for pk, node_id, uuid, marks, cordoned_at in cards:
        card = reports[node_id].cards.get(uuid)
        if card is None:
            continue
        xid = card.values.get("xid_last") or 0
        ecc = card.values.get("ecc_uncorrected_total") or 0
        marks = marks if isinstance(marks, dict) else {}
        old_xid, old_ecc = marks.get(XID_KEY, 0), marks.get(ECC_KEY, 0)
        if (xid, ecc) == (old_xid, old_ecc):
            continue
        outcome.marks[pk] = {XID_KEY: xid, ECC_KEY: ecc}
        if cordoned_at is not None:
            continue
        if ecc > old_ecc:
            outcome.cordons.append((pk, f"uncorrectable ECC errors: {ecc}"))
        elif xid != old_xid and xid in critical:
            outcome.cordons.append((pk, f"critical XID {xid}"))


# --- the report as pages show it --------------------------------------------------------


def _visible(violation: dict[str, Any], owners: bool) -> dict[str, Any]:
    shown = {k: violation[k] for k in schema.VIOLATION_FIELD_NAMES if k in violation}
    if not owners:
        shown.pop("user", None)
    return shown


def agent_report(allocation: Allocation, *, owners: bool = True) -> dict[str, Any]:
    """What the agent of an allocation's card reports about it, for its page: whether it
    holds it, what its processes use against the slice, and its violations. ``owners``:
    whether the reader may see process owners (telemetry.permissions)."""
    agent_id = allocation.agent_id
    out: dict[str, Any] = {
        "allocation_id": agent_id,
        "agent_sync": allocation.agent_sync,
        "agent_sync_label": allocation.get_agent_sync_display(),
        "agent_error": allocation.agent_error,  # for admins only: the template checks
        "reported": False,
        "seen_at": None,
        "process_count": None,
        "memory_used_mib": None,
        "memory_limit_mib": allocation.memory_mib,
        "compute_pct": allocation.compute_pct,
        "violations": [],
    }
    gpu = allocation.gpu
    if gpu is None or allocation.state != AllocationState.ACTIVE:
        return out
    reading = telemetry.latest([gpu.node_id]).get(gpu.node_id)
    if reading is None:
        return out
    out["seen_at"] = reading.seen_at
    for usage in reading.allocations:
        if usage["allocation_id"] == agent_id:
            out.update(
                reported=True,
                process_count=usage.get("process_count", 0),
                memory_used_mib=usage.get("memory_used_mib", 0),
                memory_limit_mib=usage.get("memory_limit_mib", allocation.memory_mib),
            )
            break
    out["violations"] = [
        _visible(v, owners) for v in reading.violations if v.get("allocation_id") == agent_id
    ]
    return out

"""The agent's slices report as telemetry's node and GPU pages show it.

Each node's agent reports, once the portal has sent it slices, what each allocation's
processes use and which processes break the rules (kept, checked, in the latest
readings: ``readings.reduce_snapshot``). Members and node managers see the report;
process owners (the ``user`` of a violation) only who may see owners
(``telemetry.permissions.visible_owners``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from telemetry.permissions import User, visible_owners

VIOLATION_LABELS = {
    "unallocated": _("Process without an allocation"),
    "over_memory": _("Over its slice's memory"),
    "wrong_gpu": _("On another allocation's GPU"),
    "unlimited": _("Started without its slice's memory limit"),
}


def may_see_owners(user: User, gpu_ids: Sequence[int]) -> bool:
    """Whether the user sees every process owner of these cards (a narrower grant, as
    tenancy's, is for history: a live violation's owner is shown only with all)."""
    return visible_owners(user, gpu_ids) == Q()


def slices_report(
    latest: dict[str, Any] | None, *, owners: bool, uuids: Collection[str] | None = None
) -> dict[str, list[dict[str, Any]]] | None:
    """The report for a page (the node's, or with ``uuids`` those cards'); None when the
    agent sent none (the portal never sent it slices, or no fresh reading)."""
    if not latest or ("allocations" not in latest and "violations" not in latest):
        return None
    allocations = [
        dict(a) for a in latest.get("allocations") or ()
        if uuids is None or a.get("gpu_uuid") in uuids
    ]  # fmt: skip
    violations = []
    for violation in latest.get("violations") or ():
        if uuids is not None and violation.get("gpu_uuid") not in uuids:
            continue
        shown = dict(violation)
        if not owners:
            shown.pop("user", None)
        shown["label"] = VIOLATION_LABELS.get(shown.get("kind", ""), shown.get("kind", ""))
        violations.append(shown)
    for allocation in allocations:
        limit = allocation.get("memory_limit_mib") or 0
        allocation["over"] = limit > 0 and allocation.get("memory_used_mib", 0) > limit
    return {"allocations": allocations, "violations": violations}

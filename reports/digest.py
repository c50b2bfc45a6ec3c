"""The daily idle digest: per tenant, its idle allocations and the GPU-hours they waste,
sent as ``reports.signals.idle_digest`` for the alerts app to deliver to its
subscribers (platform admins get every tenant, tenant admins their own).

Beat's check goes through ``send_due`` and ``send_once``: from ``IDLE_DIGEST_HOUR`` on,
once per day, whatever runs it twice (two beats, a beat restarted after the send but before
it saved its schedule, a task redelivered after its worker died) or missed it (beat or Redis
away at the hour: the next check sends it)."""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from portal.claims import insert_once
from quotas.interface import tenant_admins
from quotas.models import Tenant
from quotas.permissions import platform_admins
from reports.models import AllocationIdle, DigestSent, IdleCard
from reports.signals import idle_digest

MAX_ROWS = 50  # per tenant: the digest is a summary, the page has the rest
DIGEST_NAME = "idle-digest"  # its DigestSent rows


def build(day: date | None = None) -> dict[str, Any]:
    """The digest's content as plain data (ids, names and numbers)."""
    day = day or timezone.localdate()
    rows = AllocationIdle.objects.filter(idle=True).select_related("lease__holder", "pool")
    tenants = dict(Tenant.objects.values_list("pk", "name"))
    per: dict[int | None, dict[str, Any]] = defaultdict(
        lambda: {"allocations": [], "wasted_gpu_hours": 0.0, "count": 0}
    )
    for row in rows.order_by("-wasted_gpu_hours"):
        entry = per[row.tenant_id]
        entry["count"] += 1
        entry["wasted_gpu_hours"] = round(entry["wasted_gpu_hours"] + row.wasted_gpu_hours, 4)
        if len(entry["allocations"]) < MAX_ROWS:
            entry["allocations"].append({
                "allocation_id": row.allocation_id, "pool": row.pool.name,
                "owner": row.lease.holder.get_username(),
                "idle_hours": round(row.idle_minutes / 60, 1),
                "wasted_gpu_hours": row.wasted_gpu_hours,
            })  # fmt: skip
    return {
        "day": day.isoformat(),
        "tenants": [
            {"tenant_id": tid, "tenant": tenants.get(tid, ""), **entry}
            for tid, entry in sorted(per.items(), key=lambda kv: -kv[1]["wasted_gpu_hours"])
        ],
        "idle_cards": IdleCard.objects.count(),
    }


def recipients() -> frozenset[int]:
    """Platform admins (``quotas.permissions.is_platform_admin``) and every tenant admin."""
    admins = get_user_model().objects.filter(platform_admins() | tenant_admins())
    return frozenset(admins.values_list("pk", flat=True))


def send(day: date | None = None) -> dict[str, Any]:
    """Build the digest and send the signal (after commit, as every reports signal)."""
    content = build(day)
    who = recipients()
    transaction.on_commit(
        lambda: idle_digest.send(
            sender=AllocationIdle, day=content["day"], recipient_ids=who, digest=content
        )
    )
    return content


def send_due(now: datetime | None = None) -> dict[str, Any] | None:
    """Today's digest if it is due (``IDLE_DIGEST_HOUR`` passed in ``TIME_ZONE``) and not
    sent yet. Beat checks often rather than firing once at the hour: a check missed while
    beat or Redis was away is made up by the next one, the same day."""
    local = timezone.localtime(now)
    if local.hour < settings.IDLE_DIGEST_HOUR:
        return None
    return send_once(local.date())


def send_once(day: date | None = None) -> dict[str, Any] | None:
    """The day's digest unless it was sent: its ``DigestSent`` row is inserted first and the
    signal is sent inside the same transaction, so the alerts app's deliveries (outbox
    rows) commit with the row or not at all. A second run, concurrent or later, fails the
    insert (it waits on the unique index for the first one's commit) and returns None."""
    day = day or timezone.localdate()
    with transaction.atomic():
        claim = DigestSent(name=DIGEST_NAME, period=day.isoformat())
        if not insert_once(claim):
            return None
        content = build(day)
        who = recipients()
        idle_digest.send(
            sender=AllocationIdle, day=content["day"], recipient_ids=who, digest=content
        )
        claim.recipients = len(who)
        claim.save(update_fields=["recipients"])
    return content

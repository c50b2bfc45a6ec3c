"""Reclaim: warn the owner of an idle lease, release it after the grace period unless it
is busy again, exempt, or its appeal was granted; exemptions; appeals; policies.

Each function is one transaction, audited in it; signals go after commit. The timed step
(``reclaim``) takes ``now`` so that tests move time instead of waiting for it.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from audit.interface import record, snapshot
from pools.choices import LeaseState
from pools.interface import release_lease
from pools.models import Lease
from quotas.interface import release_lease_request
from reports import permissions
from reports.choices import OPEN_WARNINGS, WarningCause, WarningState
from reports.models import AllocationIdle, Exemption, ReclaimPolicy, ReclaimWarning
from reports.signals import appeal_event, reclaim_warned, reclaimed

MAX_TEXT = 500
MAX_EXEMPTION = timedelta(days=366)


def send_after_commit(signal, warning: ReclaimWarning, **extra: Any) -> None:
    """Send ``signal`` with the warning's plain facts once the transaction commits."""
    facts = {
        "warning_id": warning.pk, "lease_id": warning.lease_id,
        "tenant_id": warning.tenant_id, "holder_id": warning.lease.holder_id,
        "cause": warning.cause, **extra,
    }  # fmt: skip
    transaction.on_commit(lambda: signal.send(sender=ReclaimWarning, **facts))


def exempt_lease_ids(now: datetime) -> set[int]:
    return set(Exemption.objects.filter(ends_at__gt=now).values_list("lease_id", flat=True))


def reclaim(now: datetime | None = None) -> dict[str, int]:
    """One pass over the last scan: warn newly idle leases in pools that reclaim,
    withdraw warnings of leases busy again or exempt, release those past their grace."""
    now = now or timezone.now()
    policies = {p.pool_id: p for p in ReclaimPolicy.objects.filter(reclaim=True)}
    by_lease: dict[int, list[bool]] = defaultdict(list)
    tenants: dict[int, int | None] = {}
    pools: dict[int, int] = {}
    for lease_id, pool_id, tenant_id, is_idle in AllocationIdle.objects.values_list(
        "lease_id", "pool_id", "tenant_id", "idle"
    ):
        by_lease[lease_id].append(is_idle)
        tenants[lease_id], pools[lease_id] = tenant_id, pool_id
    # A lease is all or nothing: reclaimed only when every one of its vGPUs is idle.
    idle_leases = {lid for lid, flags in by_lease.items() if all(flags)}
    exempt = exempt_lease_ids(now)
    counts = {"warned": 0, "withdrawn": 0, "released": 0}
    open_warnings = {
        w.lease_id: w
        for w in ReclaimWarning.objects.filter(state__in=OPEN_WARNINGS, cause=WarningCause.IDLE)
    }
    for lease_id, warning in open_warnings.items():
        if lease_id not in idle_leases or lease_id in exempt or pools.get(lease_id) not in policies:
            counts["withdrawn"] += close_warning(warning.pk, WarningState.WITHDRAWN, now)
        elif warning.state == WarningState.WARNED and now >= warning.release_after:
            counts["released"] += release_warned(warning.pk, now)
    for lease_id in sorted(idle_leases - exempt - set(open_warnings)):
        policy = policies.get(pools[lease_id])
        if policy is not None:
            counts["warned"] += _warn(lease_id, tenants[lease_id], policy, now)
    return counts


def _warn(lease_id: int, tenant_id: int | None, policy: ReclaimPolicy, now: datetime) -> int:
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease_id)
        if (
            lease.state != LeaseState.ACTIVE
            or ReclaimWarning.objects.filter(lease_id=lease_id, state__in=OPEN_WARNINGS).exists()
        ):
            return 0
        warning = ReclaimWarning.objects.create(
            lease=lease, tenant_id=tenant_id, warned_at=now,
            release_after=now + timedelta(hours=policy.grace_hours),
        )  # fmt: skip
        record("reclaim.warn", lease, tenant_id=tenant_id, after=snapshot(warning))
        send_after_commit(reclaim_warned, warning, release_after=warning.release_after)
    return 1


def close_warning(warning_id: int, state: str, now: datetime) -> int:
    with transaction.atomic():
        warning = ReclaimWarning.objects.select_for_update().get(pk=warning_id)
        if warning.state not in OPEN_WARNINGS:
            return 0
        before = snapshot(warning)
        warning.state, warning.closed_at = state, now
        warning.save()
        record(f"reclaim.{state}", warning.lease, tenant_id=warning.tenant_id,
               before=before, after=snapshot(warning))  # fmt: skip
    return 1


def release_warned(warning_id: int, now: datetime) -> int:
    with transaction.atomic():
        warning = ReclaimWarning.objects.select_for_update().get(pk=warning_id)
        if warning.state != WarningState.WARNED:
            return 0
        before = snapshot(warning)
        # Through the request when one holds the lease (its state, quota and requester
        # follow), else the lease alone.
        if not release_lease_request(warning.lease_id):
            release_lease(warning.lease_id)
        warning.state, warning.closed_at = WarningState.RELEASED, now
        warning.save()
        record("reclaim.release", warning.lease, tenant_id=warning.tenant_id,
               before=before, after=snapshot(warning))  # fmt: skip
        send_after_commit(reclaimed, warning)
    return 1


def _text(value: Any, field: str, *, required: bool = True) -> str:
    text = value.strip() if isinstance(value, str) else ""
    if required and not text:
        raise ValidationError({field: [_("This field is required.")]})
    if len(text) > MAX_TEXT:
        raise ValidationError({field: [_("At most %(max)s characters.") % {"max": MAX_TEXT}]})
    return text


def _when(value: Any, field: str, now: datetime) -> datetime:
    when = value if isinstance(value, datetime) else None
    if isinstance(value, str):
        try:
            when = parse_datetime(value)
        except ValueError:
            when = None
    if when is None:
        raise ValidationError({field: [_("Give a date and time.")]})
    if timezone.is_naive(when):
        when = timezone.make_aware(when)
    if not now < when <= now + MAX_EXEMPTION:
        raise ValidationError({field: [_("Give a time in the coming year.")]})
    return when


def add_exemption(
    lease_id: int, user, *, reason: Any, ends_at: Any, address: str | None = None
) -> Exemption:
    """Keep a lease out of reclaim until ``ends_at``; open warnings on it are withdrawn."""
    now = timezone.now()
    with transaction.atomic():
        lease = Lease.objects.select_for_update().filter(pk=lease_id).first()
        # Who may comes first: a refusal tells nothing of the lease, valid input or not.
        if lease is None or not permissions.can_exempt(user, lease):
            raise PermissionError(_("You may not exempt this allocation."))
        reason = _text(reason, "reason")
        ends_at = _when(ends_at, "ends_at", now)
        exemption = Exemption.objects.create(
            lease=lease, reason=reason, ends_at=ends_at, created_by=user
        )
        tenant_id = permissions.tenant_of(lease)
        record("reclaim.exempt", lease, actor=user, address=address, tenant_id=tenant_id,
               after=snapshot(exemption), message=reason)  # fmt: skip
    for warning_id in ReclaimWarning.objects.filter(
        lease_id=lease_id, state__in=OPEN_WARNINGS
    ).values_list("pk", flat=True):
        close_warning(warning_id, WarningState.WITHDRAWN, now)
    return exemption


def end_exemption(exemption_id: int, user, *, address: str | None = None) -> None:
    with transaction.atomic():
        exemption = Exemption.objects.select_for_update().filter(pk=exemption_id).first()
        if exemption is None or not permissions.can_exempt(user, exemption.lease):
            raise PermissionError(_("You may not change this exemption."))
        before = snapshot(exemption)
        exemption.ends_at = min(exemption.ends_at, timezone.now())
        exemption.save()
        record("reclaim.exempt_end", exemption.lease, actor=user, address=address,
               tenant_id=permissions.tenant_of(exemption.lease), before=before,
               after=snapshot(exemption))  # fmt: skip


def appeal(warning_id: int, user, *, reason: Any, address: str | None = None) -> ReclaimWarning:
    """The owner asks to keep an idle lease: no release until an approver decides."""
    reason = _text(reason, "reason")
    with transaction.atomic():
        warning = ReclaimWarning.objects.select_for_update().filter(pk=warning_id).first()
        if warning is None or warning.lease.holder_id != getattr(user, "pk", None):
            raise PermissionError(_("You may not appeal this warning."))
        if warning.state != WarningState.WARNED:
            raise ValidationError({"state": [_("This warning cannot be appealed now.")]})
        before = snapshot(warning)
        warning.state, warning.appeal_reason = WarningState.APPEALED, reason
        warning.appealed_at = timezone.now()
        warning.save()
        record("reclaim.appeal", warning.lease, actor=user, address=address,
               tenant_id=warning.tenant_id, before=before, after=snapshot(warning),
               message=reason)  # fmt: skip
        send_after_commit(appeal_event, warning, decided=False, granted=False)
    return warning


def decide_appeal(
    warning_id: int, user, *, grant: bool, comment: Any = "", until: Any = None,
    address: str | None = None,
) -> ReclaimWarning:  # fmt: skip
    """An approver of the lease's tenant (never the owner) decides: granted, the lease is
    exempt until ``until`` (default a week); refused, the release waits at least an hour
    more so that the owner can act."""
    now = timezone.now()
    comment = _text(comment, "comment", required=False)
    ends_at = _when(until, "until", now) if until else now + timedelta(days=7)
    with transaction.atomic():
        warning = ReclaimWarning.objects.select_for_update().filter(pk=warning_id).first()
        if warning is None or not permissions.can_decide_appeal(user, warning):
            raise PermissionError(_("You may not decide this appeal."))
        if warning.state != WarningState.APPEALED:
            raise ValidationError({"state": [_("No appeal waits on this warning.")]})
        before = snapshot(warning)
        warning.decided_by, warning.decided_at, warning.decision_comment = user, now, comment
        if grant:
            warning.state, warning.closed_at = WarningState.GRANTED, now
            Exemption.objects.create(
                lease_id=warning.lease_id, reason=warning.appeal_reason, ends_at=ends_at,
                created_by=user,
            )  # fmt: skip
        else:
            warning.state = WarningState.WARNED
            warning.release_after = max(warning.release_after, now + timedelta(hours=1))
        warning.save()
        record("reclaim.appeal_grant" if grant else "reclaim.appeal_refuse", warning.lease,
               actor=user, address=address, tenant_id=warning.tenant_id, before=before,
               after=snapshot(warning), message=comment)  # fmt: skip
        send_after_commit(appeal_event, warning, decided=True, granted=grant)
    return warning

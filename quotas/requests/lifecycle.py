"""A placed request's life after approval: release, extend, resize; and the timed steps
beat runs (escalate and expire pending requests, warn before expiry, expire).

Each function is one transaction, audited in it; the timed ones take ``now`` so that
tests move time instead of waiting for it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from audit.interface import record, snapshot
from pools.interface import PlacementError, resize_lease, share_pct
from quotas.choices import NoticeKind, RequestState
from quotas.models import GpuRequest, Quota
from quotas.permissions import tenant_admin_ids
from quotas.requests.notices import announce
from quotas.requests.permissions import can_decide, can_manage
from quotas.requests.services import (
    allocated_usage,
    budget_problem,
    end_request,
    limits_passed,
    within_policy,
)
from quotas.tenancy.usage import Usage

MAX_HOURS = 24 * 366


def _locked(req_id: int, user, check=can_manage) -> GpuRequest:
    req = GpuRequest.objects.select_for_update().get(pk=req_id)
    if user is not None and not check(user, req):
        raise PermissionError(_("You may not change this request."))
    return req


def release_request(req_id: int, user, *, address: str | None = None) -> GpuRequest:
    """Release a placed request or cancel a waiting one, for someone allowed to."""
    with transaction.atomic():
        _locked(req_id, user)
        return end_request(req_id, user, address=address)


def _hours(value) -> int:
    try:
        hours = int(value)
    except (TypeError, ValueError):
        hours = 0
    if not 1 <= hours <= MAX_HOURS:
        raise ValidationError(
            {"hours": [_("Give whole hours from 1 to %(max)s.") % {"max": MAX_HOURS}]}
        )
    return hours


def _quota_locked(req: GpuRequest, field: str) -> Quota:
    """The request's quota row, locked; its deletion (the pool closed to the tenant, the
    slices placed before it still held) refuses a change that the quota would judge."""
    quota = (
        Quota.objects.select_for_update()
        .filter(tenant_id=req.tenant_id, pool_id=req.pool_id)
        .first()
    )
    if quota is None:
        raise ValidationError(
            {field: [_("This pool is no longer open to the tenant: its quota was removed.")]}
        )
    return quota


def extend_request(req_id: int, user, hours, *, address: str | None = None) -> GpuRequest:
    """Add ``hours`` to a placed request: at once when the new duration is within the
    tenant's auto-approval policy, else as an extension waiting for an approver."""
    hours = _hours(hours)
    with transaction.atomic():
        req = _locked(req_id, user)
        if req.state != RequestState.ALLOCATED or req.expires_at is None:
            raise ValidationError(
                {"hours": [_("Only placed requests with an end can be extended.")]}
            )
        if req.extension_hours:
            raise ValidationError({"hours": [_("An extension already waits for an approver.")]})
        quota = _quota_locked(req, "hours")
        compute = share_pct(req.whole_card, req.compute_pct)
        if problem := budget_problem(quota, req.count, compute, hours):
            raise ValidationError({"hours": [problem]})
        before = snapshot(req)
        if within_policy(quota, req.count, compute, (req.duration_hours or 0) + hours):
            _lengthen(req, hours)
            action, kind = "request.extend", NoticeKind.EXTENDED
        else:
            req.extension_hours, req.extension_asked_at = hours, timezone.now()
            action, kind = "request.extension_ask", NoticeKind.EXTENSION_ASKED
        req.save()
        record(action, req, actor=user, address=address, tenant_id=req.tenant_id,
               before=before, after=snapshot(req), message=str(hours))  # fmt: skip
        announce(req, kind, recipients=() if user and user.pk == req.requester_id else None)
    return req


def _lengthen(req: GpuRequest, hours: int) -> None:
    req.duration_hours = (req.duration_hours or 0) + hours
    req.expires_at = req.expires_at + timedelta(hours=hours)
    req.expiry_warned_at = None
    req.extension_hours = req.extension_asked_at = None


def decide_extension(
    req_id: int, user, *, approve: bool, comment: str = "", address: str | None = None
) -> GpuRequest:
    """An approver grants or refuses a waiting extension."""
    with transaction.atomic():
        req = _locked(req_id, user, can_decide)
        if req.state != RequestState.ALLOCATED or not req.extension_hours:
            raise ValidationError({"state": [_("No extension waits on this request.")]})
        before = snapshot(req)
        if approve:
            _lengthen(req, req.extension_hours)
            action, kind = "request.extension_approve", NoticeKind.EXTENDED
        else:
            req.extension_hours = req.extension_asked_at = None
            action, kind = "request.extension_reject", NoticeKind.EXTENSION_REJECTED
        req.save()
        record(action, req, actor=user, address=address, tenant_id=req.tenant_id,
               before=before, after=snapshot(req), message=comment)  # fmt: skip
        announce(req, kind, comment=comment)
    return req


def _size(value, low: int, high: int | None, field: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < low or (high is not None and number > high):
        raise ValidationError(
            {field: [_("Give a whole number from %(low)s to %(high)s.") % {"low": low, "high": high}
                     if high else _("Give a whole number of at least %(low)s.") % {"low": low}]}
        )  # fmt: skip
    return number


def resize_request(
    req_id: int, user, *, compute_pct, memory_mib, address: str | None = None
) -> GpuRequest:
    """Change every slice of a placed request in place, within the quota, when its cards
    have room; otherwise a clear error and nothing changed."""
    compute = _size(compute_pct, 1, 100, "compute_pct")
    memory = _size(memory_mib, 1, None, "memory_mib")
    with transaction.atomic():
        req = _locked(req_id, user)
        if req.state != RequestState.ALLOCATED or req.whole_card or not req.lease_id:
            raise ValidationError({"compute_pct": [_("Only placed slices can be resized.")]})
        quota = _quota_locked(req, "compute_pct")
        grow = Usage(
            0, req.count * (compute - req.compute_pct), req.count * (memory - req.memory_mib)
        )
        if over := limits_passed(quota, allocated_usage(req.tenant_id, req.pool_id), grow):
            raise ValidationError({"compute_pct": [_("Over the tenant's quota."), *over]})
        before = snapshot(req)
        try:
            resize_lease(req.lease_id, compute_pct=compute, memory_mib=memory)
        except PlacementError as exc:
            message = (
                _("A slice cannot be larger than its card.")
                if exc.never
                else _("The card has no room for the new size; nothing was changed.")
            )
            raise ValidationError(
                {"memory_mib" if exc.never else "compute_pct": [message]}
            ) from exc
        req.compute_pct, req.memory_mib = compute, memory
        req.save()
        record("request.resize", req, actor=user, address=address, tenant_id=req.tenant_id,
               before=before, after=snapshot(req))  # fmt: skip
        announce(
            req, NoticeKind.RESIZED, recipients=() if user and user.pk == req.requester_id else None
        )
    return req


# --- timed steps (beat) -------------------------------------------------------------------


def _policies() -> dict[tuple[int, int], Quota]:
    return {(q.tenant_id, q.pool_id): q for q in Quota.objects.all()}


def escalate_pending(now: datetime | None = None) -> int:
    """Tell the tenant admins (and the requester) of requests pending past the policy."""
    now = now or timezone.now()
    policies, done = _policies(), 0
    for req in GpuRequest.objects.filter(state=RequestState.PENDING, escalated_at=None):
        quota = policies.get((req.tenant_id, req.pool_id))
        # 0 hours: this tenant's requests are never escalated.
        hours = quota.escalate_after_hours if quota else 0
        if not hours or req.created > now - timedelta(hours=hours):
            continue
        with transaction.atomic():
            # Claimed by a conditional update: a second beat run escalates nothing twice.
            if not GpuRequest.objects.filter(
                pk=req.pk, state=RequestState.PENDING, escalated_at=None
            ).update(escalated_at=now):
                continue
            req.escalated_at = now
            admins = tenant_admin_ids(req.tenant_id)
            record("request.escalate", req, tenant_id=req.tenant_id, after=snapshot(req))
            announce(req, NoticeKind.ESCALATED, recipients=admins | {req.requester_id})
            done += 1
    return done


def expire_pending(now: datetime | None = None) -> int:
    """End requests nobody decided within the policy's time."""
    now = now or timezone.now()
    policies, done = _policies(), 0
    for req in GpuRequest.objects.filter(state=RequestState.PENDING):
        quota = policies.get((req.tenant_id, req.pool_id))
        # A pool closed to the tenant: nothing can approve it. 0 hours: never expires.
        hours = quota.expire_pending_after_hours if quota else 0
        if quota is not None and (not hours or req.created > now - timedelta(hours=hours)):
            continue
        try:
            end_request(req.pk, state=RequestState.EXPIRED)
        except ValidationError:
            continue  # decided meanwhile
        done += 1
    return done


def warn_expiring(now: datetime | None = None) -> int:
    """Tell requesters whose GPUs expire within REQUEST_EXPIRY_WARNING."""
    now = now or timezone.now()
    soon = now + timedelta(seconds=settings.REQUEST_EXPIRY_WARNING)
    done = 0
    rows = GpuRequest.objects.filter(
        state=RequestState.ALLOCATED, expires_at__lte=soon, expires_at__gt=now,
        expiry_warned_at=None,
    )  # fmt: skip
    for req in rows:
        with transaction.atomic():
            if not GpuRequest.objects.filter(pk=req.pk, expiry_warned_at=None).update(
                expiry_warned_at=now
            ):
                continue
            req.expiry_warned_at = now
            announce(req, NoticeKind.EXPIRING)
            done += 1
    return done


def expire_placed(now: datetime | None = None) -> int:
    """Release placed requests whose duration is over; their capacity returns at once."""
    now = now or timezone.now()
    done = 0
    for req_id in GpuRequest.objects.filter(
        state=RequestState.ALLOCATED, expires_at__lte=now
    ).values_list("pk", flat=True):
        try:
            end_request(req_id, state=RequestState.EXPIRED)
        except ValidationError:
            continue
        done += 1
    return done


def release_lease_request(lease_id: int, *, address: str | None = None) -> bool:
    """End the request that holds a lease, for the system (idle reclaim): audited and told
    to the requester as any release. False when no open request holds the lease."""
    req_id = (
        GpuRequest.objects.filter(lease_id=lease_id, state=RequestState.ALLOCATED)
        .values_list("pk", flat=True)
        .first()
    )
    if req_id is None:
        return False
    end_request(req_id, None, address=address)
    return True

"""GPU requests from asking to release: validate, approve, place under quota, release.

Each function is one transaction, audited in it. Placement takes the tenant's quota row
lock first (``SELECT ... FOR UPDATE``), so a tenant's racing requests in a pool are
counted one after another and can never pass its limit together; the cards' capacity is
then taken by the pools service in the same transaction.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta

from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Count, Q, Subquery, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from audit.interface import record, recorded_together, snapshot
from pools.interface import (
    Ask,
    PlacementError,
    could_ever_fit,
    place_lease,
    release_lease,
    share_pct,
    slice_refusal,
)
from pools.models import Allocation, Pool
from quotas.choices import OPEN_STATES, NoticeKind, RequestState
from quotas.models import GpuRequest, Quota, Tenant
from quotas.permissions import role_in
from quotas.requests.notices import announce, batched, publish
from quotas.requests.permissions import can_decide
from quotas.tenancy.usage import LIVE, Usage, ask_hours, gpu_hours_left

ASK_FIELDS = (
    "count", "whole_card", "compute_pct", "memory_mib", "gpu_model", "gpu_vendor", "node_name",
    "node_labels", "same_node", "duration_hours", "reason", "priority",
)  # fmt: skip


# The tenant's live leases in the pool as an array, so the allocations are read through
# their lease index whatever the planner thinks of the tables' sizes.
_USAGE_SQL = f"""
    SELECT count(a.id), COALESCE(sum(a.compute_pct), 0), COALESCE(sum(a.memory_mib), 0)
      FROM {Allocation._meta.db_table} a
     WHERE a.lease_id = ANY(ARRAY(
               SELECT r.lease_id FROM {GpuRequest._meta.db_table} r
                WHERE r.tenant_id = %s AND r.pool_id = %s AND r.state = %s
                  AND r.lease_id IS NOT NULL {{requester}}))
       AND a.state IN (%s, %s)"""  # noqa: S608 (names from the models)


def allocated_usage(tenant_id: int, pool_id: int, *, user_id: int | None = None) -> Usage:
    """What the tenant's live allocations hold in the pool (optionally one member's).

    Read from the tenant's allocated requests (index ``tenant, state``), not from every
    allocation of the pool: a request holds live allocations only while it is allocated
    (``place_request`` sets the state with the placement, ``end_request`` releases the
    lease with the state), so the work is the tenant's live requests, whatever the pool's
    size or history. Under the quota row lock in ``place_request``: kept to one query."""
    params: list = [tenant_id, pool_id, RequestState.ALLOCATED]
    if user_id is not None:
        params.append(user_id)
    sql = _USAGE_SQL.format(requester="AND r.requester_id = %s" if user_id is not None else "")
    params += LIVE  # a lease's allocations are all in its (the request's) pool
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        n, compute, memory = cursor.fetchone()
    return Usage(n, int(compute), int(memory))


def _claimed_usage(
    tenant_id: int, pool_id: int, placed: Usage | None = None, *, user_id: int | None = None
) -> Usage:
    """Live allocations (``placed``, when the caller read them already) plus what pending
    and queued requests ask for: the part of the quota already spoken for when a new
    request is checked."""
    if placed is None:
        placed = allocated_usage(tenant_id, pool_id, user_id=user_id)
    waiting = GpuRequest.objects.filter(
        tenant_id=tenant_id,
        pool_id=pool_id,
        state__in=(RequestState.PENDING, RequestState.APPROVED),
    )
    if user_id is not None:
        waiting = waiting.filter(requester_id=user_id)
    vgpus = compute = memory = 0
    for count, whole, c, m in waiting.values_list(
        "count", "whole_card", "compute_pct", "memory_mib"
    ):
        vgpus += count
        compute += count * share_pct(whole, c)
        memory += count * m
    return Usage(placed.vgpus + vgpus, placed.compute_pct + compute, placed.memory_mib + memory)


def _limits(quota: Quota, *, per_user: bool = False) -> tuple[int | None, int | None, int | None]:
    """The quota's limits (vGPUs, compute, memory): the tenant's, or each member's cap."""
    if per_user:
        return quota.user_limit_vgpus, quota.user_limit_compute_pct, quota.user_limit_memory_mib
    return quota.limit_vgpus, quota.limit_compute_pct, quota.limit_memory_mib


def _caps_members(quota: Quota) -> bool:
    return any(limit is not None for limit in _limits(quota, per_user=True))


def demand_of(req: GpuRequest) -> Usage:
    """What the request holds, or asks to hold, against a quota (a whole card's memory
    counts once the card is known)."""
    return Usage(
        req.count, req.count * share_pct(req.whole_card, req.compute_pct),
        req.count * req.memory_mib,
    )  # fmt: skip


def limits_passed(quota: Quota, used: Usage, ask: Usage, *, per_user: bool = False) -> list[str]:
    """Which limits ``used + ask`` passes, worded for the person asking."""
    problems = []
    for name, limit, have, want in zip(
        (_("vGPUs"), _("compute (%)"), _("memory (MiB)")),
        _limits(quota, per_user=per_user),
        (used.vgpus, used.compute_pct, used.memory_mib),
        (ask.vgpus, ask.compute_pct, ask.memory_mib),
        strict=True,
    ):
        if limit is not None and have + want > limit:
            problems.append(
                _("%(name)s: %(have)s held or asked, %(want)s more passes the limit of %(limit)s")
                % {"name": name, "have": have, "want": want, "limit": limit}
            )
    return problems


def create_request(
    user, *, tenant: Tenant, pool: Pool, address: str | None = None, **ask
) -> GpuRequest:
    """Validate and record a request; approve it at once when the policy allows. Raises
    ValidationError with field-level messages, and changes nothing, when it is invalid."""
    req = GpuRequest(
        tenant=tenant,
        pool=pool,
        requester=user,
        **{k: v for k, v in ask.items() if k in ASK_FIELDS},
    )
    # Sized as placement asks: a whole card is all of its card (its memory set when placed).
    placing = Ask.of(req, pool.policy)
    req.compute_pct, req.memory_mib = placing.compute_pct, placing.memory_mib
    errors: dict[str, list[str]] = {}
    # The tenant, pool and requester are rows the caller holds: no query to re-check them.
    exclude = ["lease", "tenant", "pool", "requester", *(["memory_mib"] if req.whole_card else [])]
    try:
        req.full_clean(exclude=exclude)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if role_in(user, tenant.pk) is None:
        errors.setdefault("tenant", []).append(_("You are not a member of this tenant."))
    closed = {"pool": [_("This pool is not open to this tenant.")]}
    if errors:
        if not Quota.objects.filter(tenant=tenant, pool=pool).exists():
            errors.update(closed)
        raise ValidationError(errors)
    # Its steps' audit entries and notices each in one INSERT at the end.
    with transaction.atomic(), batched(), recorded_together():
        # The quota row serializes this tenant's checks in the pool.
        quota = Quota.objects.select_for_update().filter(tenant=tenant, pool=pool).first()
        if quota is None:
            raise ValidationError(closed)
        if not req.whole_card and (refusal := slice_refusal(pool, req.gpu_model, req.gpu_vendor)):
            errors["whole_card"] = [refusal]
        elif not could_ever_fit(pool, placing):
            errors["count" if req.count > 1 else "memory_mib"] = [
                _("No card in this pool is large enough for this request (or enough of them).")
            ]
        demand = demand_of(req)
        placed = allocated_usage(tenant.pk, pool.pk)
        if over := limits_passed(quota, _claimed_usage(tenant.pk, pool.pk, placed), demand):
            errors.setdefault("count", []).extend([_("Over the tenant's quota."), *over])
        if _caps_members(quota) and (over := limits_passed(
            quota, _claimed_usage(tenant.pk, pool.pk, user_id=user.pk), demand, per_user=True
        )):  # fmt: skip
            errors.setdefault("count", []).extend([_("Over your own cap in this tenant."), *over])
        if problem := budget_problem(quota, req.count, demand.compute_pct // req.count,
                                     req.duration_hours):  # fmt: skip
            errors.setdefault("duration_hours", []).append(problem)
        if errors:
            raise ValidationError(errors)
        req.save()
        record(
            "request.create",
            req,
            actor=user,
            address=address,
            tenant_id=tenant.pk,
            after=snapshot(req),
        )
        if _auto_approvable(quota, req):
            _approve(req, None, _("Approved automatically: within the tenant's policy."), address)
            if _first_in_queue(req):
                # Placed in this transaction (the quota row is held already), so the answer
                # says allocated; walking the pool's queue instead made every create of a
                # busy pool try every other waiting request too (docs/performance.md).
                if not _place_locked(req, quota, used=placed, slicing_checked=True):
                    # The cards were full as this transaction saw them; a release that
                    # commits before it walked a queue this request was not yet in.
                    transaction.on_commit(lambda: place_request(req.pk))
            else:
                transaction.on_commit(lambda: place_queued(pool.pk))
        else:
            announce(req, NoticeKind.CREATED, recipients=())
    return req


def _first_in_queue(req: GpuRequest) -> bool:
    """Whether no approved request of the pool comes before ``req`` in the queue. Those
    behind it may be placed past it, never those before: it then places alone."""
    return queue_position(req) == 1


def budget_problem(quota: Quota, count: int, compute_pct: int, hours: int | None) -> str:
    """Why ``count`` slices for ``hours`` do not fit what is left of the GPU-hour budget
    ("" when they do; an open-ended ask needs some budget left)."""
    left = gpu_hours_left(quota)
    if left is None:
        return ""
    want = ask_hours(count, compute_pct, hours or 0)
    if (hours is None and left <= 0) or (hours is not None and want > left):
        return _(
            "Over the tenant's GPU-hour budget: %(want)s GPU-hours asked, %(left)s left now."
        ) % {"want": f"{want:.1f}", "left": f"{max(left, 0):.1f}"}
    return ""


def within_policy(quota: Quota, count: int, compute_pct: int, hours: int | None) -> bool:
    """Whether an ask is small and short enough to be approved without an approver."""
    return (
        count <= quota.auto_approve_vgpus
        and compute_pct <= quota.auto_approve_compute_pct
        and hours is not None
        and hours <= quota.auto_approve_hours
    )


def _auto_approvable(quota: Quota, req: GpuRequest) -> bool:
    return within_policy(
        quota, req.count, share_pct(req.whole_card, req.compute_pct), req.duration_hours
    )


def _approve(req: GpuRequest, user, comment: str, address: str | None) -> None:
    before = snapshot(req)
    now = timezone.now()
    req.state, req.decided_by, req.decided_at = RequestState.APPROVED, user, now
    req.decision_comment, req.queued_at = comment, now
    req.save()
    record("request.approve", req, actor=user, address=address, tenant_id=req.tenant_id,
           before=before, after=snapshot(req), message=comment)  # fmt: skip
    announce(req, NoticeKind.APPROVED if user else NoticeKind.AUTO_APPROVED, comment=comment)


def decide(
    req_id: int, user, *, approve: bool, comment: str = "", address: str | None = None
) -> GpuRequest:
    """Approve (into the pool's queue) or reject a pending request. Raises PermissionError
    for someone who may not, ValidationError when it is no longer pending."""
    with transaction.atomic():
        req = GpuRequest.objects.select_for_update().get(pk=req_id)
        if not can_decide(user, req):
            raise PermissionError(_("You may not decide this request."))
        if req.state != RequestState.PENDING:
            raise ValidationError({"state": [_("This request is no longer pending.")]})
        if approve:
            _approve(req, user, comment, address)
        else:
            before = snapshot(req)
            req.state, req.decided_by, req.decided_at = RequestState.REJECTED, user, timezone.now()
            req.decision_comment, req.ended_at = comment, req.decided_at
            req.save()
            record("request.reject", req, actor=user, address=address, tenant_id=req.tenant_id,
                   before=before, after=snapshot(req), message=comment)  # fmt: skip
            announce(req, NoticeKind.REJECTED, comment=comment)
    if approve:
        # After commit: place_request takes the quota row before the request's, which this
        # transaction holds (the other order could deadlock with a queue walk).
        transaction.on_commit(
            lambda: place_request(req.pk) if _first_in_queue(req) else place_queued(req.pool_id)
        )
    return req


class _OverQuota(Exception):
    """Placed cards turned out larger than the quota allows (whole cards)."""


def _held_by(lease) -> Usage:
    totals = lease.allocations.aggregate(n=Count("id"), c=Sum("compute_pct"), m=Sum("memory_mib"))
    return Usage(totals["n"] or 0, totals["c"] or 0, totals["m"] or 0)


def place_request(req_id: int) -> bool:
    """Place one approved request if its quota and the pool's cards allow; True when it
    was placed. Otherwise it keeps its place in the queue."""
    with transaction.atomic():
        # The quota row first (it serializes the tenant's placements in the pool), found
        # through the request in the same statement; then the request, and only its row
        # (not the pool's or the requester's, which other work may want meanwhile).
        of_request = GpuRequest.objects.filter(pk=req_id)
        quota = (
            Quota.objects.select_for_update()
            .filter(
                tenant_id=Subquery(of_request.values("tenant_id")),
                pool_id=Subquery(of_request.values("pool_id")),
            )
            .first()
        )
        req = (
            GpuRequest.objects.select_for_update(of=("self",))
            .select_related("pool", "tenant", "requester")
            .get(pk=req_id)
        )
        if req.state != RequestState.APPROVED or quota is None:
            return False
        return _place_locked(req, quota)


def _place_locked(
    req: GpuRequest, quota: Quota, *, used: Usage | None = None, slicing_checked: bool = False
) -> bool:
    """``place_request`` once the caller's transaction holds the quota row and the
    request's (``create_request`` holds both from the start, and passes the tenant's
    usage it read under that lock: nothing placed since)."""
    demand = demand_of(req)
    if used is None:
        used = allocated_usage(req.tenant_id, req.pool_id)
    if limits_passed(quota, used, demand):
        return False
    try:
        # A sliced placement that fails changes nothing: only a whole card, checked
        # against the quota once placed, needs a savepoint to undo.
        with transaction.atomic() if req.whole_card else contextlib.nullcontext():
            lease = place_lease(
                req.pool, Ask.of(req, req.pool.policy), holder=req.requester,
                unix_user=req.requester.get_username()[:64],
                label=f"{req.tenant.slug} #{req.pk}", slicing_checked=slicing_checked,
            )  # fmt: skip
            if req.whole_card:
                # A whole card's memory is known once the card is: check it now, and
                # undo the placement (this savepoint) when it passes the limit.
                demand = _held_by(lease)
                if limits_passed(quota, used, demand):
                    raise _OverQuota
    except (PlacementError, _OverQuota):
        return False
    before = snapshot(req)
    now = timezone.now()
    req.lease, req.state, req.placed_at = lease, RequestState.ALLOCATED, now
    req.borrowed = any(
        have + want > guarantee
        for have, want, guarantee in zip(
            (used.vgpus, used.compute_pct, used.memory_mib),
            (demand.vgpus, demand.compute_pct, demand.memory_mib),
            (quota.guaranteed_vgpus, quota.guaranteed_compute_pct, quota.guaranteed_memory_mib),
            strict=True,
        )
    )
    if req.duration_hours:
        req.expires_at = now + timedelta(hours=req.duration_hours)
    req.save(update_fields=["lease", "state", "placed_at", "borrowed", "expires_at",
                            "updated"])  # fmt: skip
    record("request.place", req, tenant_id=req.tenant_id, before=before, after=snapshot(req))
    announce(req, NoticeKind.PLACED)
    return True


# One walk of a pool's queue at a time, across every process: a caller that finds one
# running leaves it a note to walk again and returns (docs/requests.md, "The queue").
_WALKING_KEY = "quotas:queue:walking:{}"
_AGAIN_KEY = "quotas:queue:again:{}"
WALK_LEASE_SECONDS = 30  # renewed at each request of the walk; a dead walker's runs out
NOTE_SECONDS = 600  # a note outlives any walk it waits for
MAX_ROUNDS = 5  # then the walker returns and leaves a note for the next caller or beat


def place_queued(pool_id: int) -> int:
    """Place the pool's approved requests in queue order (priority, then age); a request
    that does not fit yet keeps its place, smaller ones behind it may still be placed.
    Returns how many this call placed: 0 when another caller's walk of the pool was
    running, which then walks once more for this one."""
    walking, again = _WALKING_KEY.format(pool_id), _AGAIN_KEY.format(pool_id)
    cache.set(again, 1, timeout=NOTE_SECONDS)
    placed = rounds = 0

    def keep() -> None:
        cache.touch(walking, WALK_LEASE_SECONDS)

    # The note is read after the walk ends and again after the walk is given up, so a
    # note left in between is never lost: either this walker sees it or its writer walks.
    # After MAX_ROUNDS a note may stay: the next caller, or beat, walks for it.
    while (
        rounds < MAX_ROUNDS
        and cache.get(again)
        and cache.add(walking, 1, timeout=WALK_LEASE_SECONDS)
    ):
        try:
            while rounds < MAX_ROUNDS and cache.delete(again):
                rounds += 1
                placed += _walk(pool_id, keep)
        finally:
            cache.delete(walking)
    return placed


def _walk(pool_id: int, keep: Callable[[], None]) -> int:
    placed = 0
    queue = GpuRequest.objects.filter(pool_id=pool_id, state=RequestState.APPROVED).order_by(
        "-priority", "queued_at", "pk"
    )
    for req_id in queue.values_list("pk", flat=True):
        keep()  # the walk's lease, renewed while it works
        placed += place_request(req_id)
    if placed:
        # Those still waiting moved up the queue: their pages show the new position.
        waiting = set(queue.values_list("requester_id", flat=True))
        if waiting:
            publish(None, waiting, {"pool": pool_id, "kind": "queue"})
    return placed


def queue_position(req: GpuRequest) -> int | None:
    """1 for the next request to be placed in its pool; None when not queued."""
    if req.state != RequestState.APPROVED:
        return None
    ahead = GpuRequest.objects.filter(pool_id=req.pool_id, state=RequestState.APPROVED).filter(
        Q(priority__gt=req.priority)
        | Q(priority=req.priority, queued_at__lt=req.queued_at)
        | Q(priority=req.priority, queued_at=req.queued_at, pk__lt=req.pk)
    )
    return ahead.count() + 1


def end_request(
    req_id: int, user=None, *, state: str = RequestState.RELEASED, address: str | None = None
) -> GpuRequest:
    """Release (or expire, or cancel) a request: its capacity and quota return at once."""
    with transaction.atomic():
        req = GpuRequest.objects.select_for_update().get(pk=req_id)
        if req.state not in OPEN_STATES:
            raise ValidationError({"state": [_("This request has already ended.")]})
        before = snapshot(req)
        was_placed = req.state == RequestState.ALLOCATED
        if req.lease_id:
            release_lease(req.lease_id)
        if (
            req.state in (RequestState.PENDING, RequestState.APPROVED)
            and state == RequestState.RELEASED
        ):
            state = RequestState.CANCELLED
        req.state, req.ended_at = state, timezone.now()
        req.save()
        record(f"request.{state}", req, actor=user, address=address, tenant_id=req.tenant_id,
               before=before, after=snapshot(req))  # fmt: skip
        kind = {
            RequestState.CANCELLED: NoticeKind.CANCELLED,
            RequestState.EXPIRED: NoticeKind.EXPIRED if was_placed else NoticeKind.PENDING_EXPIRED,
        }.get(state, NoticeKind.RELEASED)
        # Whoever ended it knows; the requester is told when someone else (or time) did.
        told = () if user is not None and user.pk == req.requester_id else (req.requester_id,)
        announce(req, kind, recipients=told)
    transaction.on_commit(lambda: place_queued(req.pool_id))
    return req

"""Business-state rules, checked by a beat task (``alerts.tasks.evaluate_business``)
through ``quotas.interface``: requests waiting too long for a decision, quotas nearly
used up, allocations about to expire. Each is an event of the request's or quota's
tenant, so only that tenant's people (and platform admins) can receive it."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from alerts import events, summaries
from alerts.choices import Condition
from alerts.evaluate import RuleSpec, scope_allows
from alerts.rules import enabled_rules, fingerprint_of
from alerts.sources import reclaim
from quotas.interface import RequestFact, expiring_requests, pending_requests, quota_usage

Found = dict[str, tuple[events.Occurrence, int]]  # fingerprint -> (occurrence, pool id)


def _request_occurrence(rule: RuleSpec, fact: RequestFact, key: str,
                        **params: float) -> events.Occurrence:  # fmt: skip
    labels = {"tenant": fact.tenant_slug, "pool": fact.pool_slug,
              "request": str(fact.request_id), "requester": fact.requester}  # fmt: skip
    return events.Occurrence(
        fingerprint=fingerprint_of(rule.key, f"request:{fact.request_id}", {}),
        scope=f"tenant:{fact.tenant_slug} request:{fact.request_id}",
        labels=labels, tenant_id=fact.tenant_id, summary_key=key,
        summary_params={"request": fact.request_id, "requester": fact.requester, **params},
    )  # fmt: skip


def _pending(rule: RuleSpec, now: datetime) -> Found:
    hours = rule.threshold if rule.threshold is not None else 4
    out = {}
    for fact in pending_requests(now - timedelta(hours=hours)):
        waited = (now - fact.at).total_seconds() / 3600
        what = _request_occurrence(rule, fact, summaries.REQUEST_PENDING, hours=waited)
        out[what.fingerprint] = (what, fact.pool_id)
    return out


def _expiring(rule: RuleSpec, now: datetime) -> Found:
    hours = rule.threshold if rule.threshold is not None else 1
    out = {}
    for fact in expiring_requests(now + timedelta(hours=hours)):
        left = max((fact.at - now).total_seconds() / 60, 0)
        what = _request_occurrence(rule, fact, summaries.REQUEST_EXPIRING, minutes=left)
        out[what.fingerprint] = (what, fact.pool_id)
    return out


def _quota(rule: RuleSpec, now: datetime) -> Found:
    threshold = rule.threshold if rule.threshold is not None else 90
    out = {}
    for usage in quota_usage(now=now):
        quota = usage.quota
        for key, used, _guarantee, limit in usage.dimensions():
            if not limit or float(used) * 100 / limit <= threshold:
                continue
            tenant, pool = quota.tenant.slug, quota.pool.slug
            what = events.Occurrence(
                fingerprint=fingerprint_of(rule.key, f"quota:{quota.pk}:{key}", {}),
                scope=f"tenant:{tenant} pool:{pool}",
                labels={"tenant": tenant, "pool": pool, "dimension": key},
                tenant_id=quota.tenant_id, summary_key=summaries.QUOTA_USED,
                summary_params={"tenant": tenant, "pool": pool, "dimension": key,
                                "percent": float(used) * 100 / limit, "used": float(used),
                                "limit": float(limit)},
            )  # fmt: skip
            out[what.fingerprint] = (what, quota.pool_id)
    return out


CHECKS = {
    Condition.REQUEST_PENDING: _pending,
    Condition.ALLOCATION_EXPIRING: _expiring,
    Condition.QUOTA_USED: _quota,
    Condition.RECLAIM_WARNING: lambda rule, now: reclaim.reclaim_found(rule),
}


def evaluate_business(*, now: datetime | None = None) -> int:
    """Fire and resolve the business rules' events; how many are open."""
    now = now or timezone.now()
    total = 0
    for rule in enabled_rules():
        check = CHECKS.get(rule.condition)
        if check is None:
            continue
        wanted = {fp: what for fp, (what, pool_id) in check(rule, now).items()
                  if scope_allows(rule, what.tenant_id, pool_id)}  # fmt: skip
        events.reconcile(rule, wanted, now=now)
        total += len(wanted)
    return total

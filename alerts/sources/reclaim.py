"""Reports' news (``reports.interface``) delivered through alerts.

- **The reclaim-warning rule's events**: an open reclaim warning (warned, or appealed and
  waiting) is a firing event of the warning's tenant; it resolves when the warning ends
  (reclaimed, withdrawn, appeal granted). The signals fire and clear at once; the business
  beat (``alerts.sources.business``) reconciles with the open warnings, so a withdrawal, which
  sends no signal, resolves the event at the next pass.
- **Personal notices** of each step (warned, reclaimed, appealed, decided) to the lease's
  owner and the tenant's admins, through their own channels whose subscriptions take the
  "Reclaim notices" rule (or all rules).
- **The daily idle digest** to platform admins (every tenant) and tenant admins (their
  tenants), through their subscriptions to the "Daily idle GPU digest" rule.

Each goes through the outbox (retries, at least once) and is written in the channel's
language when it is sent (``alerts.messages``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from alerts import events, summaries
from alerts.choices import OPEN_EVENT_STATES, Condition, NoticeTopic, Severity
from alerts.defaults import IDLE_DIGEST_RULE, RECLAIM_NOTICE_RULE
from alerts.evaluate import RuleSpec, scope_allows
from alerts.models import Event, Rule
from alerts.recipients import route_notice
from alerts.rules import enabled_rules, fingerprint_of
from quotas.interface import administered_tenant_ids, tenant_admin_ids
from quotas.models import Tenant
from quotas.permissions import platform_admins
from reports.choices import WarningState
from reports.models import ReclaimWarning

logger = logging.getLogger(__name__)
OPEN_WARNING_STATES = (WarningState.WARNED, WarningState.APPEALED)


# Reclaim steps a notice tells; a reclaim took something away, hence a warning.
STEP_SEVERITY = {"warned": Severity.WARNING, "reclaimed": Severity.WARNING,
                 "appealed": Severity.INFO, "granted": Severity.INFO,
                 "refused": Severity.WARNING}  # fmt: skip


def warning_fingerprint(rule_key: str, warning_id: int) -> str:
    return fingerprint_of(rule_key, f"reclaim-warning:{warning_id}", {})


def warning_occurrence(rule: RuleSpec, warning: ReclaimWarning) -> events.Occurrence:
    lease = warning.lease
    tenant = warning_tenant_slug(warning)
    labels = {"pool": lease.pool.slug, "node": lease.node_name, "lease": str(lease.pk),
              "owner": lease.holder.get_username(), "warning": str(warning.pk),
              "release_after": warning.release_after.isoformat()}  # fmt: skip
    if tenant:
        labels["tenant"] = tenant
    parts = (f"tenant:{tenant}" if tenant else "", f"pool:{lease.pool.slug}", f"lease:{lease.pk}")
    scope = " ".join(part for part in parts if part)
    params = {"lease": lease.pk, "owner": lease.holder.get_username(), "pool": lease.pool.name,
              "release_after": warning.release_after.isoformat()}  # fmt: skip
    return events.Occurrence(
        fingerprint=warning_fingerprint(rule.key, warning.pk), scope=scope, labels=labels,
        tenant_id=warning.tenant_id, summary_key=summaries.RECLAIM_WARNED, summary_params=params,
    )  # fmt: skip


def warning_tenant_slug(warning: ReclaimWarning) -> str:
    if warning.tenant_id is None:
        return ""
    return Tenant.objects.filter(pk=warning.tenant_id).values_list("slug", flat=True).first() or ""


def open_warnings() -> list[ReclaimWarning]:
    return list(
        ReclaimWarning.objects.filter(state__in=OPEN_WARNING_STATES)
        .select_related("lease__pool", "lease__holder")
    )  # fmt: skip


def _reclaim_rules() -> list[RuleSpec]:
    return [r for r in enabled_rules() if r.condition == Condition.RECLAIM_WARNING]


def reclaim_found(rule: RuleSpec) -> dict[str, tuple[events.Occurrence, int]]:
    """For the business beat: every open warning in the rule's scope (fingerprint ->
    (occurrence, pool id))."""
    out = {}
    for warning in open_warnings():
        what = warning_occurrence(rule, warning)
        out[what.fingerprint] = (what, warning.lease.pool_id)
    return out


def sync_warning(warning_id: int) -> None:
    """Fire or clear each reclaim-warning rule's event for this warning, as it stands."""
    warning = (ReclaimWarning.objects.select_related("lease__pool", "lease__holder")
               .filter(pk=warning_id).first())  # fmt: skip
    if warning is None:
        return
    for rule in _reclaim_rules():
        in_scope = scope_allows(rule, warning.tenant_id, warning.lease.pool_id)
        if warning.state in OPEN_WARNING_STATES and in_scope:
            events.fire(rule, warning_occurrence(rule, warning))
            continue
        fingerprint = warning_fingerprint(rule.key, warning.pk)
        for pk in Event.objects.filter(fingerprint=fingerprint, state__in=OPEN_EVENT_STATES
                                       ).values_list("pk", flat=True):  # fmt: skip
            events.clear(pk)


def _rule_id(key: str) -> int | None:
    """The notice rule's id, or None when it is disabled (then nothing is sent)."""
    row = Rule.objects.filter(key=key).values_list("pk", "enabled").first()
    return row[0] if row and row[1] else None


def deliver_reclaim_notice(*, step: str, warning_id: int, lease_id: int,
                           tenant_id: int | None, holder_id: int) -> list[int]:  # fmt: skip
    """One reclaim step to the lease's owner and the tenant's admins."""
    rule_id = _rule_id(RECLAIM_NOTICE_RULE)
    if rule_id is None:
        return []
    severity = STEP_SEVERITY.get(step, Severity.INFO)
    notice = {"topic": NoticeTopic.RECLAIM, "kind": step, "warning": warning_id,
              "lease": lease_id, "severity": severity}  # fmt: skip
    people = {holder_id, *tenant_admin_ids(tenant_id)}
    return route_notice(people, notice, severity, rule_id)


def _platform_admin_ids(user_ids: Iterable[int]) -> set[int]:
    users = get_user_model().objects.filter(pk__in=list(user_ids)).filter(platform_admins())
    return set(users.values_list("pk", flat=True))


def digest_for(user_id: int, digest: dict[str, Any], platform: bool) -> dict[str, Any] | None:
    """What one recipient may read of the digest: every tenant for a platform admin, the
    tenants they administer for a tenant admin (None: nothing for them)."""
    if platform:
        return digest
    mine = set(administered_tenant_ids(user_id).values_list("tenant_id", flat=True))
    tenants = [t for t in digest.get("tenants", []) if t.get("tenant_id") in mine]
    if not tenants:
        return None
    # Idle cards are the fleet's, which tenant admins do not see.
    return {"day": digest.get("day"), "tenants": tenants}


def deliver_digest(*, day: str, recipient_ids: Iterable[int], digest: dict[str, Any]) -> list[int]:
    rule_id = _rule_id(IDLE_DIGEST_RULE)
    if rule_id is None:
        return []
    recipients = set(recipient_ids)
    platform = _platform_admin_ids(recipients)
    ids = []
    for user_id in sorted(recipients):
        content = digest_for(user_id, digest, user_id in platform)
        if content is None:
            continue
        notice = {"topic": NoticeTopic.DIGEST, "kind": "idle_digest", "day": day,
                  "digest": content, "severity": Severity.INFO}  # fmt: skip
        ids += route_notice([user_id], notice, Severity.INFO, rule_id)
    return ids


# Signal receivers (connected in AlertsConfig.ready). Each runs after reports' commit; a
# failure is logged and leaves reports' step standing.


def on_reclaim_warned(sender, *, warning_id: int, lease_id: int, tenant_id: int | None,
                      holder_id: int, **kwargs) -> None:  # fmt: skip
    _safely(warning_id, "warned", lease_id, tenant_id, holder_id)


def on_reclaimed(sender, *, warning_id: int, lease_id: int, tenant_id: int | None,
                 holder_id: int, **kwargs) -> None:  # fmt: skip
    _safely(warning_id, "reclaimed", lease_id, tenant_id, holder_id)


def on_appeal_event(sender, *, warning_id: int, lease_id: int, tenant_id: int | None,
                    holder_id: int, decided: bool = False, granted: bool = False,
                    **kwargs) -> None:  # fmt: skip
    step = ("granted" if granted else "refused") if decided else "appealed"
    _safely(warning_id, step, lease_id, tenant_id, holder_id)


def _safely(warning_id: int, step: str, lease_id: int, tenant_id: int | None,
            holder_id: int) -> None:  # fmt: skip
    try:
        sync_warning(warning_id)
    except Exception:
        logger.exception("reclaim warning %s: event not updated", warning_id)
    try:
        deliver_reclaim_notice(step=step, warning_id=warning_id, lease_id=lease_id,
                               tenant_id=tenant_id, holder_id=holder_id)  # fmt: skip
    except Exception:
        logger.exception("reclaim notice %s of warning %s not queued", step, warning_id)


def on_idle_digest(sender, *, day, recipient_ids=(), digest=None, **kwargs) -> None:
    # Reports sends the digest inside the transaction that claims its day (once a day); a
    # savepoint keeps a failure here from breaking that transaction.
    try:
        with transaction.atomic():
            deliver_digest(day=str(day), recipient_ids=recipient_ids, digest=digest or {})
    except Exception:
        logger.exception("idle digest of %s not queued", day)

"""Alerts from an existing Prometheus Alertmanager become events (its webhook format,
version 4). The whole message is checked before anything changes: a malformed one is
refused with the fields at fault and changes nothing.

Each alert is an event of the "Prometheus Alertmanager" rule, named by its ``alertname``
label, de-duplicated by Alertmanager's fingerprint (or its labels), with the severity of
its ``severity`` label. A ``tenant`` label naming a tenant's slug makes it that tenant's
event; ``Hostname`` (dcgm-exporter's), ``node`` or ``instance`` names its node.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from alerts import events
from alerts.choices import OPEN_EVENT_STATES, Severity
from alerts.defaults import ALERTMANAGER_RULE
from alerts.models import Event, Rule
from alerts.rules import fingerprint_of, spec_of
from quotas.models import Tenant

MAX_ALERTS = 1000
MAX_LABELS = 64
KEY_CHARS, VALUE_CHARS = 100, 1000
SEVERITIES = {
    "critical": Severity.CRITICAL, "page": Severity.CRITICAL, "error": Severity.CRITICAL,
    "warning": Severity.WARNING, "warn": Severity.WARNING,
    "info": Severity.INFO, "none": Severity.INFO,
}  # fmt: skip


def _pairs(where: str, value: Any, errors: dict[str, list[str]]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        errors[where] = ["Expected an object of text values."]
        return {}
    if len(value) > MAX_LABELS:
        errors[where] = [f"At most {MAX_LABELS} entries."]
        return {}
    for key, text in value.items():
        if not isinstance(text, str) or len(key) > KEY_CHARS or len(text) > VALUE_CHARS:
            errors[f"{where}.{key[:KEY_CHARS]}"] = [
                f"Expected text of at most {VALUE_CHARS} characters."
            ]
        elif "\x00" in text or "\x00" in key:
            errors[f"{where}.{key[:KEY_CHARS]}"] = ["Holds a NUL character."]
    return dict(value)


def parse(payload: Any) -> list[dict[str, Any]]:
    """The alerts of a webhook message, checked; raises ValidationError naming the
    fields at fault."""
    if not isinstance(payload, dict):
        raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
    alerts = payload.get("alerts")
    if not isinstance(alerts, list):
        raise ValidationError({"alerts": ["Expected a list of alerts."]})
    if len(alerts) > MAX_ALERTS:
        raise ValidationError({"alerts": [f"At most {MAX_ALERTS} alerts a message."]})
    errors: dict[str, list[str]] = {}
    out = []
    for n, alert in enumerate(alerts):
        where = f"alerts[{n}]"
        if not isinstance(alert, dict):
            errors[where] = ["Expected an object."]
            continue
        status = alert.get("status")
        if status not in ("firing", "resolved"):
            errors[f"{where}.status"] = ["Expected 'firing' or 'resolved'."]
        labels = _pairs(f"{where}.labels", alert.get("labels"), errors)
        if not labels.get("alertname"):
            errors.setdefault(f"{where}.labels", ["The alertname label is required."])
        annotations = _pairs(f"{where}.annotations", alert.get("annotations"), errors)
        fingerprint = alert.get("fingerprint", "")
        if not isinstance(fingerprint, str) or len(fingerprint) > 64:
            errors[f"{where}.fingerprint"] = ["Expected text of at most 64 characters."]
        out.append({"status": status, "labels": labels, "annotations": annotations,
                    "fingerprint": fingerprint})  # fmt: skip
    if errors:
        raise ValidationError(errors)
    return out


def receive(payload: Any) -> dict[str, int]:
    """Fire or resolve an event for each alert of the message; counts by outcome."""
    alerts = parse(payload)
    rule = Rule.objects.filter(key=ALERTMANAGER_RULE).first()
    counts = {"firing": 0, "resolved": 0, "ignored": 0}
    if rule is None or not rule.enabled:
        counts["ignored"] = len(alerts)
        return counts
    base = spec_of(rule)
    slugs = {a["labels"]["tenant"] for a in alerts if a["labels"].get("tenant")}
    tenants = dict(Tenant.objects.filter(slug__in=slugs).values_list("slug", "pk"))
    now = timezone.now()
    with transaction.atomic():
        for alert in alerts:
            labels = alert["labels"]
            fingerprint = fingerprint_of(ALERTMANAGER_RULE, alert["fingerprint"],
                                         {} if alert["fingerprint"] else labels)  # fmt: skip
            if alert["status"] == "resolved":
                open_ids = Event.objects.filter(
                    fingerprint=fingerprint, state__in=OPEN_EVENT_STATES
                ).values_list("pk", flat=True)
                counts["resolved"] += sum(events.clear(pk, now=now) for pk in open_ids)
                continue
            node = labels.get("Hostname") or labels.get("node") or labels.get("instance", "")
            shown = {**labels, **({"node": node} if node else {})}
            spec = dataclasses.replace(
                base, name=labels["alertname"][:200],
                severity=SEVERITIES.get(labels.get("severity", "").lower(), base.severity),
            )  # fmt: skip
            annotations = alert["annotations"]
            summary = annotations.get("summary") or annotations.get("description") or ""
            events.fire(spec, events.Occurrence(
                fingerprint=fingerprint, scope=f"node:{node}" if node else "alertmanager",
                summary=summary[:2000], labels=shown, tenant_id=tenants.get(labels.get("tenant")),
            ), now=now)  # fmt: skip
            counts["firing"] += 1
    return counts

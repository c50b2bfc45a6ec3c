"""Examples the API documentation shows of the Alertmanager webhook: the message
Alertmanager sends (its webhook format, version 4) and the receiver's counts."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample

ALERTMANAGER_EXAMPLES = [
    OpenApiExample(
        "One firing alert", request_only=True,
        value={
            "version": "4", "groupKey": '{}:{alertname="GpuHot"}', "status": "firing",
            "receiver": "portal", "groupLabels": {"alertname": "GpuHot"},
            "commonLabels": {"alertname": "GpuHot", "severity": "critical"},
            "commonAnnotations": {"summary": "GPU 2 at 93 °C"},
            "externalURL": "http://alertmanager:9093",
            "alerts": [{
                "status": "firing", "fingerprint": "c0ffee0123456789",
                "labels": {"alertname": "GpuHot", "Hostname": "gpu-node-03",
                           "severity": "critical", "tenant": "vision"},
                "annotations": {"summary": "GPU 2 at 93 °C"},
                "startsAt": "2026-12-01T03:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
            }],
        },
    ),
    OpenApiExample("What became of the alerts", response_only=True, status_codes=["200"],
                   value={"firing": 1, "resolved": 0, "ignored": 0}),
]  # fmt: skip

# Bodies a caller can send as they are (the ids are those of docs/api.md's examples): a
# CI engineer's starting point, and schemathesis' valid creates for its stateful phase.
CHANNEL_EXAMPLES = [
    OpenApiExample(
        "The team's mailbox", request_only=True,
        value={"name": "GPU team mail", "kind": "email", "tenant": None, "enabled": True,
               "language": "en", "settings": {"address": "gpu-team@example.com"}},
    ),
]  # fmt: skip

RULE_EXAMPLES = [
    OpenApiExample(
        "A card hotter than 85 °C for five minutes", request_only=True,
        value={"key": "card-hot", "name": "A card runs hot",
               "description": "Check the node's fans and airflow.",
               "condition": "temperature_c", "comparison": "gt", "threshold": 85.0,
               "for_seconds": 300, "severity": "warning", "scope_kind": "all",
               "renotify_seconds": 3600, "enabled": True},
    ),
]  # fmt: skip

SUBSCRIPTION_EXAMPLES = [
    OpenApiExample(
        "Warnings and worse to channel 1, quiet at night", request_only=True,
        value={"channel": 1, "tenant": None, "rules": [], "min_severity": "warning",
               "scope_kind": "all", "scope_name": "", "quiet_start": "22:00:00",
               "quiet_end": "07:00:00", "enabled": True},
    ),
]  # fmt: skip

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

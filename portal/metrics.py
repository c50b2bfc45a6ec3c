"""The portal's own /metrics for Prometheus: one registry that each app adds collectors to.

Apps register a collector in their ``AppConfig.ready`` (the fleet's lives in
``telemetry.metrics``); allocation, quota and request gauges join the same way.
Values are computed at scrape time from the database and the cache, so every
web process answers the same, whichever process did the work.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry(auto_describe=False)


def register(collector: Collector) -> None:
    # ready() can run twice (tests, some servers): register each collector class once.
    if not any(type(c) is type(collector) for c in REGISTRY._collector_to_names):
        REGISTRY.register(collector)


def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.PORTAL_METRICS_TOKEN
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.encode()):
            return HttpResponse("missing or invalid bearer token\n", status=401,
                                content_type="text/plain; charset=utf-8")  # fmt: skip
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)

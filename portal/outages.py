"""When PostgreSQL or Redis does not answer: 503 with Retry-After, not 500, and a
readiness check that sees both.

A load balancer, Kubernetes and ``gpuctl`` (which retries 503) then treat a restart of
either store as the short outage it is, not as a bug in the portal.
"""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader
from django.utils.translation import gettext as _
from kombu.exceptions import OperationalError as BrokerError

from portal import redis_client
from portal.api_errors import API_PREFIX, error_body

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5
# What a store that is down or restarting raises (Celery's publish raises kombu's).
UNAVAILABLE = (
    OperationalError,
    InterfaceError,
    redis.ConnectionError,
    redis.TimeoutError,
    BrokerError,
)


def unavailable(request: HttpRequest) -> HttpResponse:
    """The 503 answer: JSON under /api/, the portal's page elsewhere (rendered without
    the request, whose user and session live in the store that failed)."""
    if request.path.startswith(API_PREFIX):
        body = error_body("unavailable", _("The portal's database or Redis does not answer."))
        response: HttpResponse = JsonResponse(body, status=503)
    else:
        page = loader.get_template("503.html").render({"code": 503})
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class OutageMiddleware:
    """Turns a store's outage raised by a view into ``unavailable``."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception):
        if not isinstance(exception, UNAVAILABLE):
            return None
        log.warning("%s %s: a store does not answer: %r", request.method, request.path, exception)
        return unavailable(request)


def checks() -> dict[str, str]:
    """``{"database": "ok" | why, "redis": ...}``: each store asked once, now."""
    found = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        found["database"] = "ok"
    except UNAVAILABLE as exc:
        found["database"] = type(exc).__name__
    if settings.REDIS_URL:
        try:
            redis_client.client().ping()
            found["redis"] = "ok"
        except UNAVAILABLE as exc:
            found["redis"] = type(exc).__name__
    return found


def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 while the database and Redis answer, else 503 naming which not."""
    found = checks()
    ready = all(value == "ok" for value in found.values())
    response = JsonResponse({"status": "ok" if ready else "unavailable", "checks": found},
                            status=200 if ready else 503)  # fmt: skip
    if not ready:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response

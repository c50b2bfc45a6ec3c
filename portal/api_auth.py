"""The API's token authentication: one answer for every bad token, and a limit on guessing.

DRF's own class tells a caller whether the header was malformed, the key unknown or its user
inactive; here each of these is the same 401, so a caller learns nothing about which part was
wrong. Each failure is logged on ``portal.security`` with the caller's address and counted
against it; at API_TOKEN_FAILURE_LIMIT failures within LOGIN_LOCKOUT_MINUTES, tokens from that
address are refused with 429 for LOGIN_LOCKOUT_MINUTES, good ones included, so guessing keys
cannot go on by mixing in a known one.

The audit log gets one entry per lockout, when it begins (``api_token.locked_out``, with the
address and the count), not one per bad token: a bad token costs a caller almost nothing,
so an entry for each would let anyone grow the table as fast as they can send requests.
This way each entry costs an address API_TOKEN_FAILURE_LIMIT tries and blocks it for
LOGIN_LOCKOUT_MINUTES. The single failures stay in the ``portal.security`` log.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.request import Request

from audit.interface import AuditAction, record
from portal.security import client_ip

log = logging.getLogger("portal.security")

INVALID_TOKEN = _("Invalid API token.")
TOO_MANY_FAILURES = _("Too many invalid API tokens from this address. Try again later.")
_FAILURES_KEY = "portal:api-token-failures:{}"
_BLOCKED_KEY = "portal:api-token-blocked:{}"


def _lockout_seconds() -> int:
    return int(settings.AXES_COOLOFF_TIME.total_seconds())


def _record_failure(address: str) -> None:
    key = _FAILURES_KEY.format(address)
    # add() starts the window only at the first failure; incr() counts within it.
    cache.add(key, 0, timeout=_lockout_seconds())
    try:
        failures = cache.incr(key)
    except ValueError:  # the window ended between add() and incr()
        cache.set(key, 1, timeout=_lockout_seconds())
        failures = 1
    if failures >= settings.API_TOKEN_FAILURE_LIMIT:
        cache.set(_BLOCKED_KEY.format(address), True, timeout=_lockout_seconds())
        log.warning("api token locked out: address=%s failures=%d", address, failures)
    if failures == settings.API_TOKEN_FAILURE_LIMIT:  # once: blocked callers are not counted
        record(
            AuditAction.API_TOKEN_LOCKED_OUT,
            target_type="authtoken.token",
            target_repr=address,
            address=address,
            after={"failures": failures, "minutes": _lockout_seconds() // 60},
        )


class PortalTokenAuthentication(TokenAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None  # no token offered: the next class (the session) may apply
        address = client_ip(request)
        if cache.get(_BLOCKED_KEY.format(address)):
            raise exceptions.Throttled(wait=_lockout_seconds(), detail=str(TOO_MANY_FAILURES))
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            log.warning("api token refused: address=%s path=%s", address, request.path)
            _record_failure(address)
            raise exceptions.AuthenticationFailed(INVALID_TOKEN) from None

"""``Authorization: Bearer gpp_…``: the API's token authentication.

Every bad token gets the same 401, so a caller learns nothing about which part was wrong;
each failure is logged on ``portal.security`` and counted against the caller's address, and
at API_TOKEN_FAILURE_LIMIT failures within the lockout window tokens from that address are
refused with 429 (good ones included, so a known key cannot be mixed in to keep guessing).
The audit log gets one entry per lockout, not one per guess: a guess costs a caller nothing,
an entry each would let anyone grow the table as fast as they can send requests.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request

from audit.interface import AuditAction, record, request_address
from tokens import interface
from tokens.choices import Scope
from tokens.throttling import hit

log = logging.getLogger("portal.security")

KEYWORD = "Bearer"
INVALID_TOKEN = _("Invalid, expired or revoked API token.")
READ_ONLY = _("This API token is read-only.")
TOO_MANY_FAILURES = _("Too many invalid API tokens from this address. Try again later.")
_FAILURES_KEY = "tokens:failures:{}"
_BLOCKED_KEY = "tokens:blocked:{}"


def _lockout_seconds() -> int:
    return int(settings.AXES_COOLOFF_TIME.total_seconds())


def _record_failure(address: str) -> None:
    # The window starts at the first failure.
    failures = hit(_FAILURES_KEY.format(address), _lockout_seconds())
    if failures >= settings.API_TOKEN_FAILURE_LIMIT:
        cache.set(_BLOCKED_KEY.format(address), True, timeout=_lockout_seconds())
        log.warning("api token locked out: address=%s failures=%d", address, failures)
    if failures == settings.API_TOKEN_FAILURE_LIMIT:  # once: blocked callers are not counted
        record(
            AuditAction.API_TOKEN_LOCKED_OUT, target_type="tokens.apitoken",
            target_repr=address, address=address,
            after={"failures": failures, "minutes": _lockout_seconds() // 60},
        )  # fmt: skip


class BearerTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD.lower().encode():
            return None  # no token offered: the next class (the session) may apply
        address = request_address(request)
        if cache.get(_BLOCKED_KEY.format(address)):
            raise exceptions.Throttled(wait=_lockout_seconds(), detail=str(TOO_MANY_FAILURES))
        token = None
        if len(parts) == 2:
            try:
                token = interface.find(parts[1].decode("ascii"))
            except UnicodeDecodeError:
                token = None
        if token is not None and not interface.user_may_use_tokens(token.user):
            token = None  # e.g. disabled in the company directory a moment ago
        if token is None:
            log.warning("api token refused: address=%s path=%s", address, request.path)
            _record_failure(address)
            raise exceptions.AuthenticationFailed(INVALID_TOKEN)
        interface.touch(token, address)
        # Here rather than in each view's permission classes: no view can forget it.
        if token.scope != Scope.WRITE and request.method not in SAFE_METHODS:
            raise exceptions.PermissionDenied(READ_ONLY)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return f'{KEYWORD} realm="api"'

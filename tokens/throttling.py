"""Rate limits of the API, per caller: a token's own budget, else the signed-in user's
(the browser's session), else the address's.

The rates are read from the settings at each request (``API_RATE_TOKEN``,
``API_RATE_USER``, ``API_RATE_ANON``, e.g. ``"1200/min"``; empty: no limit). The counts
live in the default cache (Redis in production), so every web process counts the same
calls. Over the rate: 429 with ``Retry-After``.

A fixed window counted with one atomic increment, rather than DRF's list of timestamps:
that list is read and rewritten whole on every call (1,200 floats at the default rate)
and two processes writing it at once lose calls. A window lets a caller burst up to
twice the rate across its edge; for a budget against runaway scripts that is fine.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from tokens.models import ApiToken

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def hit(key: str, seconds: int) -> int:
    """Count one more under ``key``, a window that ends ``seconds`` after its first count;
    the count so far, this one included. One atomic increment, so processes never lose one."""
    cache.add(key, 0, timeout=seconds)
    try:
        return cache.incr(key)
    except ValueError:  # the window's key expired between add() and incr()
        cache.set(key, 1, timeout=seconds)
        return 1


def parse_rate(rate: str) -> tuple[int, int]:
    """``"1200/min"`` to (1200, 60): the count and the window in seconds."""
    count, _sep, period = rate.partition("/")
    return int(count), _PERIODS[period.strip()[:1].lower()]


class ApiRateThrottle(BaseThrottle):
    def __init__(self) -> None:
        self._wait: float | None = None

    def _caller(self, request: Request) -> tuple[str, str]:
        if isinstance(request.auth, ApiToken):
            return "token", str(request.auth.pk)
        if request.user and request.user.is_authenticated:
            return "user", str(request.user.pk)
        from portal.security import client_ip  # the project's one rule for the address

        return "anon", client_ip(request)

    def allow_request(self, request: Request, view: Any) -> bool:
        kind, ident = self._caller(request)
        rate = getattr(settings, f"API_RATE_{kind.upper()}", "")
        if not rate:
            return True
        limit, window = parse_rate(rate)
        now = time.time()
        start = int(now // window) * window
        # The key names the window's start, so every caller's window has the same edges.
        count = hit(f"throttle:{kind}:{ident}:{window}:{start}", window + 1)
        if count <= limit:
            return True
        self._wait = max(start + window - now, 1)
        return False

    def wait(self) -> float | None:
        return self._wait

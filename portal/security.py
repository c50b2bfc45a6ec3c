"""Who is knocking: the client's address, who may open a page (``allowed_if``), failed
logins and their lockout (django-axes).

Every failed login is logged on the ``portal.security`` logger with the user name tried and
the source address; django-axes counts them and locks the pair (user name, address) out for
``LOGIN_LOCKOUT_MINUTES`` after ``LOGIN_FAILURE_LIMIT`` failures. A success resets the pair.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from functools import wraps
from typing import Any

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import ngettext

log = logging.getLogger("portal.security")

View = Callable[..., HttpResponse]


def allowed_if(check: Callable[..., bool]) -> Callable[[View], View]:
    """Signed in, and ``check(user)`` true; otherwise the login page or 403.

    403 rather than the login page for a signed-in user: the page exists but is not theirs,
    and sending them to log in again would only loop.
    """

    def decorate(view: View) -> View:
        @wraps(view)
        @login_required
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not check(request.user):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


def _address(value: str) -> str | None:
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return None


def client_ip(request: HttpRequest) -> str:
    """The caller's address: the TCP peer, or behind a trusted TLS proxy what it forwarded.

    X-Forwarded-For is read only with BEHIND_TLS_PROXY: anyone can send the header, so
    without a proxy that overwrites it, trusting it would let a caller pick its own address.
    The proxy appends the address it saw, so the entry TRUSTED_PROXY_HOPS from the right is
    the client's; entries to its left are the client's own claims and are ignored.
    """
    peer = request.META.get("REMOTE_ADDR", "") or ""
    if settings.BEHIND_TLS_PROXY:
        forwarded = [
            part for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part
        ]
        hops = settings.TRUSTED_PROXY_HOPS
        if len(forwarded) >= hops:
            found = _address(forwarded[-hops])
            if found:
                return found
    return _address(peer) or peer


def lockout_username(request: HttpRequest, credentials: dict | None = None) -> str | None:
    """The user name django-axes counts failures under (AXES_USERNAME_CALLABLE), cut to the
    length of its column: Django's login form does not enforce its own 150, and a longer
    name made every such login a 500."""
    if credentials:
        name = credentials.get("username")
    else:
        name = getattr(request, "data", request.POST).get("username")
    return name[:255] if isinstance(name, str) else name


class LoginLockoutBackend(AxesStandaloneBackend):
    """django-axes' lockout check, for logins that come with a request.

    Code that authenticates without one (Django's test client, a management command) is
    not a login over the network, so there is no address to count it against.
    """

    def authenticate(self, request: HttpRequest | None, *args: Any, **kwargs: Any) -> None:
        if request is None:
            return None
        try:
            return super().authenticate(request, *args, **kwargs)
        except PermissionDenied:
            # Refused before any password was read: the audit log does not record these
            # (audit/logins.py), they cost a caller nothing to send.
            request.refused_by_lockout = True
            raise


def lockout_message() -> str:
    minutes = max(1, int(settings.AXES_COOLOFF_TIME.total_seconds() // 60))
    return ngettext(
        "Too many failed logins. Try again in %(minutes)d minute.",
        "Too many failed logins. Try again in %(minutes)d minutes.",
        minutes,
    ) % {"minutes": minutes}


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: Any = None
) -> HttpResponse:
    """The login page again, with the lockout explained (django-axes' AXES_LOCKOUT_CALLABLE)."""
    context = {
        "form": AuthenticationForm(request),
        "lockout_message": lockout_message(),
        "next": request.POST.get("next", "") if request.method == "POST" else "",
    }
    return render(
        request, "registration/login.html", context, status=settings.AXES_HTTP_RESPONSE_CODE
    )


def log_failed_login(
    sender: Any, credentials: dict, request: HttpRequest | None = None, **kwargs: Any
) -> None:
    """Receiver of Django's user_login_failed: one line per failure, with its address."""
    username = credentials.get("username", "")
    address = client_ip(request) if request is not None else "-"
    path = request.path if request is not None else "-"
    log.warning("login failed: user=%r address=%s path=%s", username, address, path)


def log_lockout(
    sender: Any, request: HttpRequest | None = None, username: str = "", **kwargs: Any
) -> None:
    """Receiver of django-axes' user_locked_out."""
    address = client_ip(request) if request is not None else "-"
    log.warning("login locked out: user=%r address=%s", username, address)

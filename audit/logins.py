"""Logins, logouts and failed logins into the audit log (receivers of Django's auth signals
and of django-axes' lockout, connected in ``AuditConfig.ready``).

What a caller can make the portal write must stay bounded. A failed login reaches this
log only after the password check ran (a password hash costs the portal far more than
the row), never for attempts the lockout refused before reading the password: those
arrive as often as a caller can send them, and are counted by django-axes alone. The
lockout itself is recorded once, when it begins.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.http import HttpRequest

from audit.choices import AuditAction
from audit.interface import record, request_address

USER_TYPE = "auth.user"
# Where a password was checked when no directory backend says otherwise.
LOCAL = "local"


def _user_id(username: str) -> str:
    """The id of the user who has this name, if any: failed logins show under that user."""
    model = get_user_model()
    found = model._default_manager.filter(**{model.USERNAME_FIELD: username}).values_list(
        "pk", flat=True
    )
    return str(found.first() or "")


def _refused_before_password(request: HttpRequest) -> bool:
    # Marked by the lockout backend (portal.security.LoginLockoutBackend) when it refused
    # the attempt before any password check ran.
    return bool(getattr(request, "refused_by_lockout", False))


def _directories(request: HttpRequest) -> list[str]:
    # Each backend that checked the password notes its directory on the request
    # (directory.backends for LDAP, tokens.backends for the portal's own passwords).
    return list(getattr(request, "login_directories", None) or [LOCAL])


def logged_in(sender: Any, request: HttpRequest | None, user, **kwargs: Any) -> None:
    # The directory backend marks the user it signed in; any other sign-in is local.
    directory = getattr(user, "login_directory", "") or LOCAL
    record(AuditAction.LOGIN, user, actor=user, address=request_address(request),
           after={"directory": directory})  # fmt: skip


def logged_out(sender: Any, request: HttpRequest | None, user=None, **kwargs: Any) -> None:
    if user is None:  # a logout without a session: nothing happened
        return
    record(AuditAction.LOGOUT, user, actor=user, address=request_address(request))


def login_failed(
    sender: Any, credentials: dict, request: HttpRequest | None = None, **kwargs: Any
) -> None:
    if request is None:
        return  # not over the network (a test client's login(), a command): no caller
    if _refused_before_password(request):
        return
    # An OpenID Connect sign-in has no username in its credentials: the directory backend
    # notes the name the provider gave, and why it refused, on the request.
    username = str(
        credentials.get(get_user_model().USERNAME_FIELD, "")
        or getattr(request, "login_username", "") or ""
    )[:150]  # fmt: skip
    after = {"username": username, "path": request.path[:200],
             "directories": _directories(request)}  # fmt: skip
    if reason := getattr(request, "login_refusal", ""):
        after["reason"] = str(reason)[:50]
    record(
        AuditAction.LOGIN_FAILED,
        target_type=USER_TYPE,
        target_id=_user_id(username),
        target_repr=username,
        address=request_address(request),
        after=after,
    )


def locked_out(
    sender: Any, request: HttpRequest | None = None, username: str | None = "", **kwargs: Any
) -> None:
    """django-axes sends this when a failure starts a lockout, and again for each attempt
    refused during it: only the first is recorded (see ``_refused_before_password``)."""
    if request is None or _refused_before_password(request):
        return
    username = str(username or "")[:150]
    record(
        AuditAction.LOGIN_LOCKED_OUT,
        target_type=USER_TYPE,
        target_id=_user_id(username),
        target_repr=username,
        address=request_address(request),
        after={
            "username": username,
            "failures": getattr(request, "axes_failures_since_start", None),
        },
    )

"""Asking the directory about users it signed in (``sync`` applies the answer): all of
them, every ``LDAP_SYNC_EVERY_S`` (``tasks.check_accounts_task``), and one, at the use of
its API token when its last answer is older than ``LDAP_TOKEN_RECHECK_S``
(``still_enabled``, registered with ``tokens.interface.add_user_check``).

With the directory unreachable nothing is changed: the periodic check stops, and a token
is let through on the account's last answer (the directory away must not stop everyone).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from directory import sync
from directory.models import DirectoryAccount, Source

log = logging.getLogger("directory")


class DirectoryAway(Exception):
    pass


def _lookup(backend: Any, account: DirectoryAccount, errors: list[Any]) -> bool:
    """Ask about one account and apply the answer: True while enabled, False once
    deactivated; DirectoryAway on an LDAP error (nothing changed)."""
    errors.clear()
    user = backend.populate_user(account.user.get_username())
    if errors:
        raise DirectoryAway(str(errors[0]))
    if user is None:
        sync.deactivate(account)
        return False
    sync.apply(user, user.ldap_user)
    return True


class _Asking:
    """The backend and the LDAP errors django-auth-ldap reports (as a signal) meanwhile."""

    def __enter__(self) -> tuple[Any, list[Any]]:
        # Here, not at the top: without the ldap extra the worker still imports this module.
        from django_auth_ldap.backend import ldap_error

        from directory.backends import PortalLDAPBackend

        self.errors: list[Any] = []
        self.signal = ldap_error

        def on_error(sender: Any, exception: Any = None, **kwargs: Any) -> None:
            self.errors.append(exception)

        self.receiver = on_error
        ldap_error.connect(on_error, weak=False)
        return PortalLDAPBackend(), self.errors

    def __exit__(self, *exc: Any) -> None:
        self.signal.disconnect(self.receiver)


def check_accounts() -> dict[str, int | str]:
    """Look up every active directory user: apply what the directory says, deactivate
    those it no longer has enabled. Stops, changing nothing more, at the first LDAP error
    (the directory away must not deactivate everyone)."""
    if not getattr(settings, "LDAP", None):
        return {"checked": 0, "deactivated": 0}
    # Here, not at the top: without the ldap extra the worker still imports this module.
    checked = deactivated = 0
    with _Asking() as (backend, errors):
        # Only LDAP's: an OpenID Connect provider's users are not there to look up.
        accounts = DirectoryAccount.objects.select_related("user").filter(
            user__is_active=True, source=Source.LDAP
        )
        for account in accounts.order_by("pk").iterator():
            try:
                enabled = _lookup(backend, account, errors)
            except DirectoryAway as exc:
                log.warning("directory check stopped: %s", exc)
                return {"checked": checked, "deactivated": deactivated, "error": str(exc)}
            checked += 1
            deactivated += not enabled
    return {"checked": checked, "deactivated": deactivated}


def still_enabled(user: Any) -> bool:
    """At a token's use: whether the directory still has ``user`` enabled, asked again when
    its last answer is older than LDAP_TOKEN_RECHECK_S (0: at every use)."""
    if not getattr(settings, "LDAP", None):
        return True
    account = (
        DirectoryAccount.objects.select_related("user").filter(user=user, source=Source.LDAP)
    ).first()
    if account is None:
        return True  # a local account (or an OpenID Connect one): not LDAP's to say
    fresh = timedelta(seconds=settings.LDAP_TOKEN_RECHECK_S)
    if account.last_sync and timezone.now() - account.last_sync < fresh:
        return True
    with _Asking() as (backend, errors):
        try:
            return _lookup(backend, account, errors)
        except DirectoryAway as exc:
            log.warning("directory away at a token's use: user=%s %s", user, exc)
            return True

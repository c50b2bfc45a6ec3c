"""The periodic check of directory users (``sync``): a Celery beat entry every
``LDAP_SYNC_EVERY_S`` when a directory is configured."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.conf import settings

from directory import sync
from directory.models import DirectoryAccount

log = logging.getLogger("directory")


@shared_task(ignore_result=True)
def check_accounts_task() -> dict:
    """Every LDAP_SYNC_EVERY_S: directory users disabled or gone are deactivated."""
    return check_accounts()


def check_accounts() -> dict[str, int | str]:
    """Look up every active directory user: apply what the directory says, deactivate
    those it no longer has enabled. Stops, changing nothing more, at the first LDAP error
    (the directory away must not deactivate everyone)."""
    if not getattr(settings, "LDAP", None):
        return {"checked": 0, "deactivated": 0}
    # Here, not at the top: without the ldap extra the worker still imports this module.
    from django_auth_ldap.backend import ldap_error

    from directory.backends import PortalLDAPBackend

    errors: list[Any] = []

    def on_error(sender: Any, context: str = "", exception: Any = None, **kwargs: Any) -> None:
        errors.append(exception)

    backend = PortalLDAPBackend()
    checked = deactivated = 0
    ldap_error.connect(on_error, weak=False, dispatch_uid="directory.check")
    try:
        accounts = DirectoryAccount.objects.select_related("user").filter(user__is_active=True)
        for account in accounts.order_by("pk").iterator():
            user = backend.populate_user(account.user.get_username())
            if errors:
                log.warning("directory check stopped: %s", errors[0])
                return {"checked": checked, "deactivated": deactivated, "error": str(errors[0])}
            checked += 1
            if user is None:
                sync.deactivate(account)
                deactivated += 1
            else:
                sync.apply(user, user.ldap_user)
    finally:
        ldap_error.disconnect(dispatch_uid="directory.check")
    return {"checked": checked, "deactivated": deactivated}

"""At an API token's use, whether the OpenID Connect provider still honours its user: with
``OIDC_TOKEN_RECHECK_S`` set (off by default), once the account's last answer is older than
that, the refresh token of the user's last sign-in is tried at the provider's token endpoint
(registered with ``tokens.interface.add_user_check``).

- Honoured: the answer's refresh token is kept (providers rotate them), the token works.
- Refused (400/401: the user disabled or removed there, the session revoked or expired):
  the refresh token is dropped and the API token is refused, now and at each use until the
  user signs in through the provider again. The account itself is not deactivated here: an
  expired provider session says nothing about the person.
- No refresh token kept (the provider issues none: ask for ``offline_access``): refused.
- The provider away or failing (5xx): let through on the last answer, as LDAP's check is.

OpenID Connect's own modules are imported only when configured: this one stays importable
without the ``oidc`` extra.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import requests
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from directory.models import DirectoryAccount, Source
from portal import crypto

log = logging.getLogger("directory")


def _fresh(account: DirectoryAccount, every: int) -> bool:
    return bool(account.last_sync and timezone.now() - account.last_sync < timedelta(seconds=every))


def still_honoured(user: Any) -> bool:
    every = getattr(settings, "OIDC_TOKEN_RECHECK_S", 0)
    if not getattr(settings, "OIDC", None) or not every:
        return True
    account = DirectoryAccount.objects.filter(user=user, source=Source.OIDC).first()
    if account is None or _fresh(account, every):
        return True  # a local or LDAP account, or an answer recent enough
    from directory.oidc import Refused, discovery

    # One refresh per account at a time: a rotated refresh token works once, so two calls
    # racing with the same one would end with the second refused.
    with transaction.atomic():
        account = DirectoryAccount.objects.select_for_update().get(pk=account.pk)
        if _fresh(account, every):
            return True
        try:
            refresh = crypto.decrypt(account.refresh_token) if account.refresh_token else ""
        except crypto.DecryptionError:
            refresh = ""
        if not refresh:
            return False
        try:
            response = requests.post(
                discovery()["token_endpoint"],
                data={"grant_type": "refresh_token", "refresh_token": refresh,
                      "client_id": settings.OIDC_RP_CLIENT_ID,
                      "client_secret": settings.OIDC_RP_CLIENT_SECRET},
                timeout=settings.OIDC_TIMEOUT, verify=settings.OIDC_VERIFY_SSL,
            )  # fmt: skip
        except (Refused, requests.RequestException, KeyError) as exc:
            log.warning("identity provider away at a token's use: user=%s %s", user, exc)
            return True
        if response.status_code in (400, 401):
            log.info("identity provider no longer honours user=%s: %s", user, response.text[:200])
            account.refresh_token = ""
            account.save(update_fields=["refresh_token"])
            return False
        if response.status_code != 200:
            log.warning("identity provider answered %s at a token's use", response.status_code)
            return True
        try:
            rotated = str(response.json().get("refresh_token") or refresh)
        except ValueError:
            rotated = refresh
        account.refresh_token = crypto.encrypt(rotated)
        account.last_sync = timezone.now()
        account.save(update_fields=["refresh_token", "last_sync"])
        return True

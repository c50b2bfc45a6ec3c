"""What other code may do with API tokens: issue one, find the token for a key, revoke it,
and ask more of a token's user at each use (``add_user_check``: a company directory).

Everything that changes a token is audited (``api_token.created`` / ``api_token.revoked``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from audit.interface import record
from tokens.choices import Scope
from tokens.models import ApiToken

KEY_PREFIX = "gpp_"
# last_used_at is written at most this often per token: an API call must not cost a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


# Checks a token's user must pass at each use, besides being active (``add_user_check``).
_user_checks: list[Callable[[AbstractBaseUser], bool]] = []


def add_user_check(check: Callable[[AbstractBaseUser], bool]) -> None:
    """Register ``check(user)``, asked at each use of a token: False refuses the token (the
    same 401 as any bad token). From an app above's ``AppConfig.ready``."""
    _user_checks.append(check)


def user_may_use_tokens(user: AbstractBaseUser) -> bool:
    return all(check(user) for check in _user_checks)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _split(key: str) -> str | None:
    """The prefix of a well-formed key, or None."""
    if not key.startswith(KEY_PREFIX) or len(key) > 128:
        return None
    prefix, sep, secret = key[len(KEY_PREFIX) :].partition("_")
    if not sep or len(prefix) != 8 or not secret or not prefix.isalnum():
        return None
    return prefix


@transaction.atomic
def issue(
    user: AbstractBaseUser,
    *,
    name: str,
    scope: str = Scope.WRITE,
    expires_at: datetime | None = None,
    created_by: AbstractBaseUser | None = None,
    address: str | None = None,
    tenant_id: int | None = None,
) -> tuple[ApiToken, str]:
    """A new token for ``user``; returns it and its key, which is never stored or shown again."""
    prefix = secrets.token_hex(4)
    key = f"{KEY_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    token = ApiToken.objects.create(
        user=user, name=name, prefix=prefix, digest=_digest(key), scope=scope,
        expires_at=expires_at, created_by=created_by or user,
    )  # fmt: skip
    record(
        "api_token.created", token, actor=created_by or user, address=address,
        tenant_id=tenant_id,
        after={"user": user.get_username(), "name": name, "scope": scope,
               "expires_at": expires_at.isoformat() if expires_at else None},
    )  # fmt: skip
    return token, key


def find(key: str) -> ApiToken | None:
    """The usable token whose key this is (not revoked, not expired, its user active)."""
    prefix = _split(key)
    if prefix is None:
        return None
    token = ApiToken.objects.usable().select_related("user").filter(prefix=prefix).first()
    if token is None or not hmac.compare_digest(token.digest, _digest(key)):
        return None
    return token


def touch(token: ApiToken, address: str | None) -> None:
    """Note that the token was used, at most once per LAST_USED_RESOLUTION."""
    now = timezone.now()
    if token.last_used_at and now - token.last_used_at < LAST_USED_RESOLUTION:
        return
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now, last_used_from=address)
    token.last_used_at, token.last_used_from = now, address


@transaction.atomic
def revoke(
    token: ApiToken, *, actor: AbstractBaseUser, address: str | None = None,
    tenant_id: int | None = None,
) -> bool:  # fmt: skip
    """Stop the token working now; False when it was already revoked."""
    updated = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    if updated:
        record(
            "api_token.revoked", token, actor=actor, address=address, tenant_id=tenant_id,
            before={"user": token.user.get_username(), "name": token.name},
        )  # fmt: skip
    return bool(updated)

"""A user's own API token: issue (or replace) and revoke. One token per user, DRF's authtoken.

The key is shown to its owner once, right after it is made; afterwards only its hint.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from rest_framework.authtoken.models import Token


@dataclass(frozen=True)
class TokenInfo:
    hint: str
    created: datetime


def token_info(user: AbstractBaseUser) -> TokenInfo | None:
    token = Token.objects.filter(user=user).first()
    return TokenInfo(hint=hint(token.key), created=token.created) if token else None


def hint(key: str) -> str:
    """The last four characters: enough to tell tokens apart, too few to guess the rest."""
    return "…" + key[-4:]


@transaction.atomic
def issue_token(user: AbstractBaseUser) -> str:
    """A new key for the user; the old one, if any, stops working in the same transaction."""
    Token.objects.filter(user=user).delete()
    return Token.objects.create(user=user).key


def revoke_token(user: AbstractBaseUser) -> bool:
    deleted, _ = Token.objects.filter(user=user).delete()
    return bool(deleted)

"""Encryption for secrets the portal must read back, such as agent tokens.

A hash would not do: the poller presents the token to the agent. Fernet (AES-CBC with
an HMAC) from ``settings.FIELD_ENCRYPTION_KEYS``; MultiFernet tries every key, so a
new key is put first, stored values are re-encrypted (``reencrypt``), then the old key
is dropped. Without configured keys one is derived from SECRET_KEY, which is enough for
the demo; production sets its own so that rotating SECRET_KEY leaves tokens readable.
"""

from __future__ import annotations

import base64
import functools
import logging

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

logger = logging.getLogger(__name__)


class DecryptionError(ValueError):
    """A stored value none of the configured keys can open (a key was dropped too early)."""


def generate_key() -> str:
    return Fernet.generate_key().decode()


def derived_key(secret_key: str) -> str:
    """A Fernet key from SECRET_KEY; HKDF keeps it unrelated to SECRET_KEY's other uses."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"gpu-portal fields v1")
    return base64.urlsafe_b64encode(hkdf.derive(secret_key.encode())).decode()


def _configured_keys() -> tuple[str, ...]:
    return tuple(settings.FIELD_ENCRYPTION_KEYS) or (derived_key(settings.SECRET_KEY),)


@functools.lru_cache(maxsize=8)
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    fernets = []
    for position, key in enumerate(keys, start=1):
        try:
            fernets.append(Fernet(key))
        except ValueError:
            raise ImproperlyConfigured(
                f"FIELD_ENCRYPTION_KEY: key {position} is not a Fernet key (32 bytes, url-safe"
                " base64); make one with: python -c 'from cryptography.fernet import Fernet;"
                " print(Fernet.generate_key().decode())'"
            ) from None
    return MultiFernet(fernets)


def fernet() -> MultiFernet:
    # Cached per key list, so tests and rotations that change the setting take effect.
    return _fernet(_configured_keys())


def encrypt(plaintext: str) -> str:
    return fernet().encrypt(plaintext.encode()).decode()


def decrypt(ciphertext: str) -> str:
    try:
        return fernet().decrypt(ciphertext.encode()).decode()
    except InvalidToken:
        raise DecryptionError("no configured FIELD_ENCRYPTION_KEY opens this value") from None


def decrypt_or_blank(ciphertext: str) -> str:
    """For the poller: one unreadable token must not stop a whole cycle."""
    if not ciphertext:
        return ""
    try:
        return decrypt(ciphertext)
    except DecryptionError:
        logger.error("a stored agent token cannot be decrypted; check FIELD_ENCRYPTION_KEY")
        return ""


def reencrypt(ciphertext: str) -> str:
    """The same value under the first (newest) key."""
    try:
        return fernet().rotate(ciphertext.encode()).decode()
    except InvalidToken:
        raise DecryptionError("no configured FIELD_ENCRYPTION_KEY opens this value") from None


# Fail at start-up, not at the first poll, when a configured key is malformed.
fernet()


@checks.register(checks.Tags.security, deploy=True)
def check_field_encryption_key(app_configs, **kwargs) -> list[checks.CheckMessage]:
    if settings.FIELD_ENCRYPTION_KEYS or settings.EMBEDDED or settings.DEBUG:
        return []
    return [
        checks.Error(
            "FIELD_ENCRYPTION_KEY is not set: agent tokens are encrypted with a key derived "
            "from SECRET_KEY, and rotating SECRET_KEY would make them unreadable.",
            hint="Set FIELD_ENCRYPTION_KEY to a Fernet key (see docs/nodes.md).",
            id="portal.E001",
        )
    ]

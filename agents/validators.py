"""Field rules shared by the model, the admin and agents.registration (with its labels and
tokens, which every entry point checks the same way: pages, API, import, admin)."""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# Dot-separated labels of at most 63 characters (what name resolution accepts).
_HOST = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*\.?$")
AGENT_URL_MAX_LENGTH = 200
# Kubernetes' label rules: an optional DNS-name prefix of at most 253 characters and a
# slash, then a name of at most 63; values of at most 63 (here any plain text).
_LABEL_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?"
_LABEL_PREFIX = r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"^(?:{_LABEL_PREFIX}/)?{_LABEL_NAME}$")
MAX_LABELS = 64
MAX_LABEL_VALUE = 63
MAX_TOKEN = 1024


def valid_agent_url(text: str) -> bool:
    """http(s)://host[:port][/path]; unlike URLValidator, a bare host name such as
    ``gpu-node-01`` is fine: agents live on private networks without public domains."""
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError when out of range or not a number
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or parts.query or parts.fragment:
        return False
    if parts.username or parts.password or port == 0 or not parts.hostname:
        return False
    if any(c.isspace() for c in text) or len(text) > AGENT_URL_MAX_LENGTH:
        return False
    try:
        ipaddress.ip_address(parts.hostname)
        return True
    except ValueError:
        return len(parts.hostname) <= 253 and bool(_HOST.match(parts.hostname))


def validate_agent_url(value: str) -> None:
    if value and not valid_agent_url(value):
        raise ValidationError(_("Enter an http:// or https:// URL."), code="invalid")


def _plain_text(text: str) -> bool:
    """No control, format (bidirectional marks among them) or separator characters."""
    return not any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in text)


def parse_labels(raw: Any) -> dict[str, str]:
    """Labels as a mapping, or as text ``k=v;k2=v2`` (newlines separate too)."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        if raw.count("=") > MAX_LABELS:  # before splitting text of any length into pairs
            raise ValueError(_("At most %(count)s labels.") % {"count": MAX_LABELS})
        pairs: dict[str, str] = {}
        for item in re.split(r"[;\n]", raw):
            if not item.strip():
                continue
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(_("“%(item)s” is not key=value.") % {"item": item.strip()[:64]})
            if key.strip() in pairs:
                raise ValueError(_("Label “%(key)s” appears twice.") % {"key": key.strip()[:64]})
            pairs[key.strip()] = value.strip()
        raw = pairs
    if not isinstance(raw, Mapping):
        raise ValueError(_("Labels must be a mapping of names to values."))
    if len(raw) > MAX_LABELS:
        raise ValueError(_("At most %(count)s labels.") % {"count": MAX_LABELS})
    labels = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not _LABEL_KEY.match(key):
            raise ValueError(
                _(
                    "Label name “%(key)s” must be letters, digits, . _ - (at most 63), "
                    "optionally after a DNS name and a slash (at most 253)."
                )
                % {"key": str(key)[:64]}
            )
        # Checked before str(): a list or mapping could stand for millions of values.
        if not isinstance(value, str | int | float):
            raise ValueError(_("Label “%(key)s” must have a plain value.") % {"key": key})
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if len(text) > MAX_LABEL_VALUE:
            raise ValueError(
                _("Label “%(key)s” has a value longer than %(count)s characters.")
                % {"key": key, "count": MAX_LABEL_VALUE}
            )
        if any(c in text for c in ";=") or not _plain_text(text):
            raise ValueError(_("Label “%(key)s” has an invalid value.") % {"key": key})
        labels[key] = text
    return labels


def clean_token(raw: str) -> str:
    """The token as it will be sent: an HTTP header carries ASCII only (latin-1 at most, and
    agents compare bytes), so anything else could never reach the agent."""
    text = raw.strip()
    if len(text) > MAX_TOKEN:
        raise ValueError(_("A token is at most %(count)s characters.") % {"count": MAX_TOKEN})
    if not text.isascii():
        raise ValueError(
            _(
                "A token can hold only ASCII letters, digits and punctuation: an HTTP header "
                "cannot carry other characters."
            )
        )
    if any(ord(c) < 33 or ord(c) == 127 for c in text):
        raise ValueError(_("A token cannot contain spaces, line breaks or control characters."))
    return text

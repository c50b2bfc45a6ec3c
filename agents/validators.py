"""Field rules shared by the model, the admin and agents.registration."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# Dot-separated labels of at most 63 characters (what name resolution accepts).
_HOST = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*\.?$")
AGENT_URL_MAX_LENGTH = 200


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

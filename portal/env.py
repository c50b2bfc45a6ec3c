"""Small typed readers for settings that come from the environment.

A malformed value fails at start-up with the variable's name, instead of
surfacing later as a confusing error deep inside Django or Celery.
"""

from __future__ import annotations

import os
import re
from typing import TypeVar

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {raw!r}")


N = TypeVar("N", int, float)


def _env_number(name: str, default: N, kind: type[N], minimum: N | None, what: str) -> N:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be {what}, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    return value


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    return _env_number(name, default, int, minimum, "an integer")


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    return _env_number(name, default, float, minimum, "a number")


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_networks(name: str, default: list[str]) -> list[str]:
    """A comma-separated list of networks in CIDR notation (an address alone is one host)."""
    import ipaddress

    values = env_list(name, default)
    for value in values:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name} must list networks such as 10.0.0.0/8 or fd00::/8, not {value!r}"
            ) from None
    return values


_RATE = re.compile(r"^\d+/(s|sec|second|m|min|minute|h|hour|d|day)$")


def env_rate(name: str, default: str) -> str:
    """A request rate such as ``1200/min`` (count per s, min, hour or day); empty: none."""
    value = env_str(name, default).replace(" ", "")
    if value and not _RATE.match(value):
        raise ImproperlyConfigured(f"{name} must be a rate like 1200/min, not {value!r}")
    return value

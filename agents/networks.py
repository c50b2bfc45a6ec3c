"""Where agents may be: the settings' allowed and denied networks, applied at registration
(an address in the URL) and at every connection (portal/egress.py, through
the pools of ``agents.client``: the poller's and the connection test's).

``AGENT_NETWORKS_ALLOW`` (empty: any) and ``AGENT_NETWORKS_DENY`` (by default link-local,
where clouds serve instance metadata) are CIDR lists; the portal's own database and Redis
are always denied. A host name is checked when it is resolved, not when it is registered:
an inventory may be imported before its names are in DNS, and DNS can change.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.translation import gettext as _

from portal.egress import (
    AddressPolicy,
    AddressRefused,
    build_policy,
    literal_refusal,
    portal_services,
    resolve_now,
)

_SETTINGS = ("AGENT_NETWORKS_ALLOW", "AGENT_NETWORKS_DENY", "DATABASES", "REDIS_URL")
_policy: AddressPolicy | None = None


def policy() -> AddressPolicy:
    """The policy from the settings, built once (resolving the services' host names)."""
    global _policy
    if _policy is None:
        _policy = build_policy(
            settings.AGENT_NETWORKS_ALLOW, settings.AGENT_NETWORKS_DENY, portal_services()
        )
    return _policy


@receiver(setting_changed)
def _forget_policy(setting: str, **kwargs) -> None:
    global _policy
    if setting in _SETTINGS:
        _policy = None


def _host_and_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def explain(refused: AddressRefused, host: str) -> str:
    """What to tell the person who typed the URL (its host, never what a name resolved to)."""
    texts = {
        "outside": _("%(host)s is outside the networks allowed for agents."),
        "denied": _("%(host)s is in a network the portal never connects to for agents."),
        "service": _("%(host)s port %(port)s is one of the portal's own services."),
    }
    return texts[refused.reason] % {"host": host, "port": refused.port}


def url_refusal(url: str) -> str | None:
    """At registration: why an agent URL may not be used, judged by its address if it
    names one (or localhost); None if it may, host names being checked at connect time."""
    host, port = _host_and_port(url)
    refused = literal_refusal(host, port, policy())
    return None if refused is None else explain(refused, host)


def connect_refusal(url: str) -> str | None:
    """Before a connection test: the host's addresses now, resolved and checked, so that the
    person gets a clear reason. The connection itself checks again (``agents.client``)."""
    host, port = _host_and_port(url)
    try:
        resolve_now(host, port, policy())
    except AddressRefused as refused:
        return explain(refused, host)
    except (OSError, UnicodeError):
        return None  # the connection test reports the name that does not resolve
    return None

"""Test an agent before saving it: fetch one snapshot as the poller would, save nothing.

Used by the add and edit pages and the API's test-connection action. It is a way to
make the portal send an HTTP request, so it is for those who may add or change nodes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _

from agents import client as agent_client
from agents import networks
from agents.gpu_agent import schema
from agents.models import Node
from agents.registration import clean_node_values, move_needs_token

log = logging.getLogger(__name__)

# The compact view the poller asks for; an agent without views sends the whole snapshot.
_SNAPSHOT_PATH = "/v1/snapshot?view=portal"
LOGGED_BODY_BYTES = 500


@dataclass(frozen=True)
class ConnectionResult:
    ok: bool
    error: str = ""
    hostname: str = ""
    agent_version: str = ""
    gpu_count: int = 0
    models: dict[str, int] = field(default_factory=dict)
    latency_ms: float = 0.0


def test_connection(url: str, token: str) -> ConnectionResult:
    """Fetch one snapshot with the poller's client, timeout and retries; nothing is saved."""
    cleaned, errors = clean_node_values({"agent_url": url, "token": token}, partial=True)
    if errors:
        return ConnectionResult(ok=False, error=" ".join(m for ms in errors.values() for m in ms))
    if (refused := networks.connect_refusal(cleaned["agent_url"])) is not None:
        return ConnectionResult(ok=False, error=refused)
    request = agent_client.Request("GET", cleaned["agent_url"] + _SNAPSHOT_PATH, cleaned["token"])
    response = agent_client.send(
        request,
        timeout=settings.GPU_POLL_TIMEOUT,
        retries=settings.GPU_POLL_RETRIES,
        backoff=settings.GPU_POLL_RETRY_BACKOFF,
    )
    latency_ms = round(response.duration_s * 1000, 1)
    if not response.ok:
        return ConnectionResult(ok=False, error=response.error, latency_ms=latency_ms)
    snapshot = _snapshot(response, cleaned["agent_url"])
    if isinstance(snapshot, str):
        return ConnectionResult(ok=False, error=snapshot, latency_ms=latency_ms)
    models: dict[str, int] = {}
    for gpu in snapshot["gpus"]:
        model = str(gpu.get("name") or "unknown")
        models[model] = models.get(model, 0) + 1
    return ConnectionResult(
        ok=True,
        hostname=str(snapshot.get("hostname") or ""),
        agent_version=str((snapshot.get("agent") or {}).get("version") or ""),
        gpu_count=len(snapshot["gpus"]),
        models=models,
        latency_ms=latency_ms,
    )


def test_stored_connection(node: Node, url: str) -> ConnectionResult:
    """Test with the node's stored token, which only ever goes to the node's stored URL:
    a test of another URL takes the token typed again, as moving the node does."""
    cleaned, errors = clean_node_values({"agent_url": url}, partial=True)
    if not errors and cleaned["agent_url"] != node.agent_url and node.agent_token_encrypted:
        return ConnectionResult(ok=False, error=move_needs_token())
    return test_connection(url, node.agent_token)


def status_problem(status: int) -> str:
    """What an HTTP status other than 200 means here, in words of our own: the body is
    never shown, or the test would read any web page the portal can reach."""
    texts = {
        401: _("The agent refused the token (HTTP 401)."),
        403: _("The server refused access (HTTP 403)."),
        404: _("No agent answers at this URL (HTTP 404): check its port and path."),
        407: _("A proxy asks for credentials (HTTP 407)."),
    }
    if status in texts:
        return texts[status]
    if 300 <= status < 400:
        text = _("The server redirects elsewhere (HTTP %(status)s): enter the agent's own URL.")
    elif status >= 500:
        text = _("The agent reported an error (HTTP %(status)s); its log says more.")
    else:
        text = _("The server answered HTTP %(status)s, which no agent answers.")
    return text % {"status": status}


def _snapshot(response: agent_client.Response, url: str) -> dict[str, Any] | str:
    """The snapshot, or what is wrong with the answer: checked against the reading schema
    as the poller checks it, so an agent that passes here is recorded at the first cycle."""
    if response.status != 200:
        # For whoever runs the portal: the start of the body, in the server's log only.
        log.info(
            "connection test of %s: HTTP %s, body starts %r",
            url, response.status, response.body[:LOGGED_BODY_BYTES],
        )  # fmt: skip
        return status_problem(response.status)
    try:
        snapshot = response.json()
    except ValueError:
        return _("The answer is not valid JSON.")
    gpus = snapshot.get("gpus") if isinstance(snapshot, dict) else None
    if not isinstance(gpus, list) or not all(isinstance(gpu, dict) for gpu in gpus):
        return _("The answer is not an agent snapshot: it has no list of GPUs.")
    try:
        return schema.check_snapshot(snapshot)
    except schema.SnapshotError as exc:
        return _("The agent's answer cannot be recorded: %(problem)s") % {"problem": exc}


# The name reads as a pytest test when imported into a test module; it is not one.
test_connection.__test__ = False  # type: ignore[attr-defined]
test_stored_connection.__test__ = False  # type: ignore[attr-defined]

"""Test an agent before saving it: fetch one snapshot as the poller would, save nothing.

Used by the add and edit pages and the API's test-connection action. It is a way to
make the portal send an HTTP request, so it is for those who may add or change nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _

from agents import fanout
from agents.gpu_agent import schema
from agents.models import Node
from agents.registration import _clean, move_needs_token

# The compact view the poller asks for; an agent without views sends the whole snapshot.
_SNAPSHOT_PATH = "/v1/snapshot?view=portal"


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
    cleaned, errors = _clean({"agent_url": url, "token": token}, partial=True)
    if errors:
        return ConnectionResult(ok=False, error=" ".join(m for ms in errors.values() for m in ms))
    request = fanout.Request("GET", cleaned["agent_url"] + _SNAPSHOT_PATH, cleaned["token"])
    response = fanout.send(
        request,
        timeout=settings.GPU_POLL_TIMEOUT,
        retries=settings.GPU_POLL_RETRIES,
        backoff=settings.GPU_POLL_RETRY_BACKOFF,
    )
    latency_ms = round(response.duration_s * 1000, 1)
    if not response.ok:
        return ConnectionResult(ok=False, error=response.error, latency_ms=latency_ms)
    if response.status == 401:
        error = _("The agent refused the token (HTTP 401).")
        return ConnectionResult(ok=False, error=error, latency_ms=latency_ms)
    snapshot = _snapshot(response)
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
    cleaned, errors = _clean({"agent_url": url}, partial=True)
    if not errors and cleaned["agent_url"] != node.agent_url and node.agent_token_encrypted:
        return ConnectionResult(ok=False, error=move_needs_token())
    return test_connection(url, node.agent_token)


def _snapshot(response: fanout.Response) -> dict[str, Any] | str:
    """The snapshot, or what is wrong with the answer: checked against the reading schema
    as the poller checks it, so an agent that passes here is recorded at the first cycle."""
    if response.status != 200:
        reason = response.body[:200].decode("utf-8", "replace").strip()
        return f"HTTP {response.status}: {reason}"
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

"""PUT /v1/desired-state: read, check and store the portal's slices, or change nothing."""

from __future__ import annotations

import json
import logging
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol

from agents.gpu_agent.desired import InvalidDesiredState, parse_slices

log = logging.getLogger(__name__)

DESIRED_PATH = "/v1/desired-state"
# Thousands of slices fit in well under this; anything larger is a mistake or an attack.
MAX_BODY_BYTES = 1024 * 1024


class _Handler(Protocol):
    server: Any
    headers: Any
    rfile: Any
    close_connection: bool


def put_desired_state(handler: _Handler | BaseHTTPRequestHandler) -> tuple[int, dict[str, Any]]:
    """Returns (status, JSON body); on any 4xx the stored state is untouched."""
    length_header = handler.headers.get("Content-Length")
    if length_header is None or not length_header.isdigit():
        handler.close_connection = True
        return 411, {"error": "a Content-Length header is required"}
    length = int(length_header)
    if length > MAX_BODY_BYTES:
        handler.close_connection = True  # the body stays unread
        return 413, {"error": f"body larger than {MAX_BODY_BYTES} bytes"}
    content_type = handler.headers.get("Content-Type", "").split(";")[0].strip().lower()
    raw = handler.rfile.read(length)
    if content_type != "application/json":
        return 415, {"error": "send the slices as application/json"}
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return 400, {"error": f"invalid JSON: {exc}"}
    collector = handler.server.collector
    try:
        slices = parse_slices(body, collector.known_gpu_uuids())
    except InvalidDesiredState as exc:
        return 422, {"error": str(exc)}
    try:
        document = collector.desired.replace(slices)
    except OSError as exc:
        log.error("cannot store the desired state: %s", exc)
        return 503, {"error": f"cannot store the desired state: {exc}"}
    log.info("desired state generation %d: %d slices", document["generation"], len(slices))
    return 200, document

"""PUT /v1/desired-state: read, check and store the portal's slices, or change nothing."""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from agents.gpu_agent.desired import DesiredStateStore, InvalidDesiredState, parse_slices

log = logging.getLogger(__name__)

DESIRED_PATH = "/v1/desired-state"
# Thousands of slices fit in well under this; anything larger is a mistake or an attack.
MAX_BODY_BYTES = 1024 * 1024

Answer = tuple[int, dict[str, Any]]


class DesiredNode(Protocol):
    """A node whose slices the portal sets: a ``Collector`` or a ``LazyNode``."""

    desired: DesiredStateStore

    def known_gpu_uuids(self) -> set[str] | None: ...


def body_length(content_length: str | None) -> int | Answer:
    """The body's length, or the answer (411, 413) when it will not be read."""
    if content_length is None or not content_length.isdigit():
        return 411, {"error": "a Content-Length header is required"}
    length = int(content_length)
    if length > MAX_BODY_BYTES:
        return 413, {"error": f"body larger than {MAX_BODY_BYTES} bytes"}
    return length


def put_desired_state(node: DesiredNode, content_type: str, raw: bytes) -> Answer:
    """Returns (status, JSON body); on any 4xx the stored state is untouched."""
    if content_type.split(";")[0].strip().lower() != "application/json":
        return 415, {"error": "send the slices as application/json"}
    try:
        body = json.loads(raw)
    except RecursionError:
        # The C decoder recurses per level; the body cap alone still allows a million.
        return 400, {"error": "invalid JSON: nested too deeply"}
    except ValueError as exc:
        # JSONDecodeError, UnicodeDecodeError, and an integer past Python's digit limit.
        return 400, {"error": f"invalid JSON: {str(exc)[:200]}"}
    try:
        slices = parse_slices(body, node.known_gpu_uuids())
    except InvalidDesiredState as exc:
        return 422, {"error": str(exc)}
    try:
        document = node.desired.replace(slices)
    except OSError as exc:
        log.error("cannot store the desired state: %s", exc)
        return 503, {"error": f"cannot store the desired state: {exc}"}
    log.info("desired state generation %d: %d slices", document["generation"], len(slices))
    return 200, document

"""The views of a snapshot that ``/v1/snapshot?view=...`` serves, and their encoding.

``full`` (also what a request without ``view`` gets) is the whole document; ``portal``
keeps only what the portal reads (``model.PORTAL_GPU_FIELDS``): about a quarter of
the bytes, so cheaper to send and much cheaper for the portal to parse. Each view is
encoded once per collection and served as cached bytes by the server.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from agents.gpu_agent.model import NodeSnapshot

FULL = "full"
PORTAL = "portal"
_BUILDERS: dict[str, Callable[[NodeSnapshot], dict[str, Any]]] = {
    FULL: NodeSnapshot.to_dict,
    PORTAL: NodeSnapshot.to_portal_dict,
}
VIEWS = tuple(_BUILDERS)
_PLAIN_QUERIES = {"": FULL, **{f"view={view}": view for view in VIEWS}}
# The C encoder without the cycle check: the documents are trees built just above.
_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)


class UnknownView(ValueError):
    """A query that names no view this agent has (or several); the servers answer 400."""


def requested_view(query: str) -> str:
    """The view a request's query string asks for: ``full`` when it names none.

    Other parameters are ignored, as they always were. Raises ``UnknownView``.
    """
    view = _PLAIN_QUERIES.get(query)
    if view is not None:
        return view  # what the portal and people send, without parsing
    asked = [value for name, value in parse_qsl(query, keep_blank_values=True) if name == "view"]
    if not asked:
        return FULL
    if len(asked) > 1:
        raise UnknownView("give view at most once")
    if asked[0] not in _BUILDERS:
        raise UnknownView(f"unknown view {asked[0]!r}; known views: {', '.join(VIEWS)}")
    return asked[0]


def encode(snapshot: NodeSnapshot, view: str) -> bytes:
    """One view as compact JSON bytes."""
    return _ENCODER.encode(_BUILDERS[view](snapshot)).encode()

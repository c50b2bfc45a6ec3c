"""An entry's before and after as rows a person reads: one per field, the changed ones
marked. Values stay data (JSON text); the template escapes them like any other text."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# A value longer than this is cut on the page (the API and the export carry it whole).
SHOWN_CHARS = 500
_ABSENT = object()


@dataclass(frozen=True)
class DiffRow:
    field: str
    before: str  # "" when the field was not there
    after: str
    changed: bool


def _text(value: Any) -> str:
    if value is _ABSENT:
        return ""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def diff_rows(before: Any, after: Any) -> list[DiffRow]:
    """Each field of either side in order (before's first), or one row when a side is not a
    mapping. A side that is None (a creation, a deletion) shows as absent."""
    if before is None and after is None:
        return []
    if not isinstance(before or {}, dict) or not isinstance(after or {}, dict):
        old = _ABSENT if before is None else before
        new = _ABSENT if after is None else after
        return [DiffRow("", _text(old), _text(new), old != new)]
    old_map, new_map = before or {}, after or {}
    fields = list(old_map) + [key for key in new_map if key not in old_map]
    rows = []
    for key in fields:
        old, new = old_map.get(key, _ABSENT), new_map.get(key, _ABSENT)
        rows.append(DiffRow(str(key), _text(old), _text(new), old != new))
    return rows

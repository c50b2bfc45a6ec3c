"""Node files: the CSV and YAML shapes that the node import reads (docs/nodes.md).

Parsing only: rows come out as dicts of text, and ``agents.registration.import_nodes``
applies the same rules to them as to one node added by hand.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext as _


class ParseError(ValueError):
    """The file is not the CSV or YAML shape the import reads; ``row`` (from 1, 0 for the
    whole file) and ``field`` say where, when known."""

    def __init__(self, message: str, *, row: int = 0, field: str = "") -> None:
        super().__init__(message)
        self.row = row
        self.field = field


class _Lines:
    """The file's lines for csv.reader, keeping those of the record being read, so an error
    can be placed in its column."""

    def __init__(self, text: str) -> None:
        # newline="": the csv module reads CRLF, CR and LF endings itself, and keeps line
        # breaks inside quoted cells (a lone CR elsewhere used to be an error, a 500).
        self._lines = io.StringIO(text, newline="")
        self.record: list[str] = []

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.record.append(line)
        return line


def _long_cell(record: str) -> int:
    """The index of the first cell past the csv module's size limit in a record's text."""
    limit, index, length, quoted = csv.field_size_limit(), 0, 0, False
    for char in record:
        if char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            index, length = index + 1, 0
            continue
        length += 1
        if length > limit:
            return index
    return index


def parse_csv(text: str, *, update: bool = False) -> list[dict[str, Any]]:
    """A header row naming the columns (name, agent_url, token, labels, state), then nodes.

    ``agent_url`` may be left out only for an update import (rows changing registered nodes).
    """
    lines = _Lines(text.lstrip("\ufeff"))
    reader = csv.DictReader(lines, skipinitialspace=True)
    rows: list[dict[str, Any]] = []
    header: list[str] = []
    try:
        header = [h.strip().lower() for h in reader.fieldnames or []]
        if not header:
            raise ParseError(_("The CSV file is empty."))
        required = ("name",) if update else ("name", "agent_url")
        missing = [c for c in required if c not in header]
        if missing:
            raise ParseError(_("The CSV header lacks: %(names)s.") % {"names": ", ".join(missing)})
        reader.fieldnames = header
        lines.record = []
        for record in reader:
            lines.record = []
            if None in record:
                raise ParseError(
                    _("Line %(line)s has more cells than the header.") % {"line": reader.line_num},
                    row=len(rows) + 1,
                )
            if any((v or "").strip() for v in record.values()):
                rows.append({k: (v or "").strip() for k, v in record.items() if k})
    except csv.Error as exc:
        if not header:
            raise ParseError(_("The CSV header is not valid: %(error)s") % {"error": exc}) from None
        raise _csv_error(exc, "".join(lines.record), header, len(rows) + 1) from None
    return rows


def _csv_error(exc: csv.Error, record: str, header: list[str], row: int) -> ParseError:
    if "field limit" not in str(exc):
        message = _("Row %(row)s is not valid CSV: %(error)s") % {"row": row, "error": exc}
        return ParseError(message, row=row)
    index = _long_cell(record)
    column = header[index] if index < len(header) else str(index + 1)
    message = _("Row %(row)s, column %(column)s: a cell is longer than %(limit)s characters.") % {
        "row": row,
        "column": column,
        "limit": csv.field_size_limit(),
    }
    return ParseError(message, row=row, field=column if column in header else "")


def parse_yaml(text: str) -> list[dict[str, Any]]:
    """A list of mappings, or a mapping whose ``nodes`` key holds that list."""
    try:
        import yaml  # optional: the agent's 'yaml' extra and the test extras install it

        from agents import node_yaml
    except ImportError:
        raise ParseError(_("YAML import needs PyYAML: pip install PyYAML.")) from None
    try:
        data = node_yaml.load(text)
    except yaml.YAMLError as exc:
        raise ParseError(_("Not valid YAML: %(error)s") % {"error": exc}) from None
    except node_yaml.LimitError as exc:
        raise ParseError(str(exc)) from None
    if isinstance(data, Mapping) and "nodes" in data:
        data = data["nodes"]
    if not isinstance(data, list) or not all(isinstance(item, Mapping) for item in data):
        raise ParseError(_("The YAML file must be a list of nodes (or hold one under 'nodes')."))
    return [{str(k): v for k, v in item.items()} for item in data]


def parse(text: str, fmt: str, *, update: bool = False) -> list[dict[str, Any]]:
    if fmt == "csv":
        return parse_csv(text, update=update)
    if fmt == "yaml":
        return parse_yaml(text)
    raise ParseError(_("Unknown format “%(format)s”: use csv or yaml.") % {"format": fmt})

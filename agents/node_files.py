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
    """The file is not the CSV or YAML shape the import reads."""


def parse_csv(text: str, *, update: bool = False) -> list[dict[str, Any]]:
    """A header row naming the columns (name, agent_url, token, labels, state), then nodes.

    ``agent_url`` may be left out only for an update import (rows changing registered nodes).
    """
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")), skipinitialspace=True)
    header = [h.strip().lower() for h in reader.fieldnames or []]
    if not header:
        raise ParseError(_("The CSV file is empty."))
    required = ("name",) if update else ("name", "agent_url")
    missing = [c for c in required if c not in header]
    if missing:
        raise ParseError(_("The CSV header lacks: %(names)s.") % {"names": ", ".join(missing)})
    reader.fieldnames = header
    rows = []
    for record in reader:
        if None in record:
            raise ParseError(
                _("Line %(line)s has more cells than the header.") % {"line": reader.line_num}
            )
        if any((v or "").strip() for v in record.values()):
            rows.append({k: (v or "").strip() for k, v in record.items() if k})
    return rows


def parse_yaml(text: str) -> list[dict[str, Any]]:
    """A list of mappings, or a mapping whose ``nodes`` key holds that list."""
    try:
        import yaml  # optional: the agent's 'yaml' extra and the test extras install it
    except ImportError:
        raise ParseError(_("YAML import needs PyYAML: pip install PyYAML.")) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ParseError(_("Not valid YAML: %(error)s") % {"error": exc}) from None
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

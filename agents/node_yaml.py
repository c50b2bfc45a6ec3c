"""The YAML reader of node files: PyYAML's safe loader, bounded.

``yaml.safe_load`` alone lets a 500-byte file of nested aliases (billion laughs) stand for
hundreds of millions of values, recurse past Python's stack on deep nesting, overflow on
5,000-digit integers and merge a key written twice. Here every scalar is read as the text
written (as a CSV cell is; only an empty value or ``null`` is None), nesting stops at
``MAX_DEPTH``, aliases may not make the document larger than ``MAX_NODES`` values, and a
key written twice in one mapping is refused with its line. Imported only where YAML is read:
PyYAML is optional.
"""

from __future__ import annotations

from typing import Any

import yaml
from django.utils.translation import gettext as _

# A node file nests four deep (nodes: - labels: {key: value}); twice that leaves room.
MAX_DEPTH = 10
# No more values than an alias-free file of the import's 2 MiB could write out.
MAX_NODES = 2 * 1024 * 1024
_MERGE = "tag:yaml.org,2002:merge"


class LimitError(ValueError):
    """The document breaks one of the limits; the message names the line and column."""


def _at(mark: Any) -> dict[str, int]:
    return {"line": mark.line + 1, "column": mark.column + 1}


class NodeFileLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        # id(node) -> how many values it stands for with its aliases expanded. Nodes live as
        # long as the document, so their ids are not reused while this loader runs.
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            if id(node) not in self._sizes:  # still being composed: it would contain itself
                raise LimitError(
                    _(
                        "Line %(line)s, column %(column)s: an alias may not refer to a value "
                        "that contains it."
                    )
                    % _at(event.start_mark)
                )
            return node
        if self._depth >= MAX_DEPTH:
            raise LimitError(
                _("Line %(line)s, column %(column)s: nested deeper than %(depth)s levels.")
                % (_at(event.start_mark) | {"depth": MAX_DEPTH})
            )
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        size = 1 + sum(self._sizes[id(child)] for child in children)
        if size > MAX_NODES:
            raise LimitError(
                _(
                    "Line %(line)s, column %(column)s: with its aliases expanded this value "
                    "holds more than %(count)s values."
                )
                % (_at(node.start_mark) | {"count": MAX_NODES})
            )
        self._sizes[id(node)] = size
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _value in node.value:
                if key_node.tag == _MERGE or not isinstance(key_node, yaml.ScalarNode):
                    continue  # merged keys may be overridden; other keys are refused below
                key = self.construct_object(key_node)
                if key in seen:
                    first = seen[key].line + 1
                    raise LimitError(
                        _(
                            "Line %(line)s, column %(column)s: the key “%(key)s” appears twice "
                            "in this mapping (first on line %(first)s)."
                        )
                        % (_at(key_node.start_mark) | {"key": str(key)[:64], "first": first})
                    )
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


# Read as written: "token: 0x1F" is the token 0x1F, not 31; "9" * 5000 is text, not an
# integer Python refuses to make; a version such as 1.10 keeps its zero.
for _tag in ("bool", "int", "float", "timestamp", "binary"):
    NodeFileLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", yaml.SafeLoader.construct_yaml_str)


def load(text: str) -> Any:
    """The document; raises ``yaml.YAMLError`` when it is not YAML, ``LimitError`` past a limit."""
    return yaml.load(text, Loader=NodeFileLoader)  # noqa: S506 (a SafeLoader subclass)

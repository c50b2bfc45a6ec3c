"""The dashboard's summary counts and its utilization heatmap, by node and card, from the
fleet tiles (``readings.summarize``: each card's utilization by index) and the cards'
inventory rows: one query for the cards, none per node.

The heatmap is HTML built here rather than in a template: at 1,000 nodes x 8 cards it is
8,000 links, and Django's template loop costs tens of milliseconds more than a join
(bench/dashboard). Each cell is a link to its card's page whose title (its accessible
name too) says the node, the card's index and the value; its colour is one of eleven
classes (``u0`` .. ``u10``, tenths of utilization; ``un``: no reading), so the live
script only swaps a class and a title, and nothing changes size.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

# A card at or above this utilization is busy; a reporting card below it is idle. The
# same line as the idle report's default policy (reports.ReclaimPolicy.idle_util_pct).
BUSY_UTIL_PCT = 5
# Past this many cards the heatmap draws small cells without node names (a wall of them).
DENSE_AFTER_CARDS = 1024


def bucket(util: float | None) -> str:
    """The cell's colour class: ``u0`` for 0-9 %, ... ``u10`` for 100 %; ``un`` unknown."""
    if util is None:
        return "un"
    return f"u{min(10, max(0, int(util) // 10))}"


@dataclass(frozen=True, slots=True)
class Counts:
    cards: int  # in the inventory (or reporting, where more report than are inventoried)
    busy: int
    idle: int
    silent: int  # no fresh reading


def counts(tiles: Iterable[dict]) -> Counts:
    cards = busy = idle = 0
    for tile in tiles:
        cards += tile["gpu_count"]
        for _index, util in tile.get("cards_util", ()):
            if util is None:
                continue
            if util >= BUSY_UTIL_PCT:
                busy += 1
            else:
                idle += 1
    return Counts(cards=cards, busy=busy, idle=idle, silent=max(0, cards - busy - idle))


@dataclass(frozen=True, slots=True)
class HeatNode:
    node_id: int
    name: str
    cells: list[tuple[int, int, float | None]]  # (gpu id, index, utilization) by index


def heat_nodes(tiles: Iterable[dict], gpus: Iterable[tuple[int, int, int]]) -> list[HeatNode]:
    """One row per tile (in the tiles' order), its inventoried cards (``gpus``: rows of
    id, node id, index) by index, each with its latest utilization or None."""
    by_node: dict[int, list[tuple[int, int]]] = {}
    for gpu_id, node_id, index in gpus:
        by_node.setdefault(node_id, []).append((index, gpu_id))
    out = []
    for tile in tiles:
        utils = dict(tile.get("cards_util", ()))
        cards = sorted(by_node.get(tile["id"], ()))
        out.append(
            HeatNode(
                tile["id"],
                tile["name"],
                [(gpu_id, index, utils.get(index)) for index, gpu_id in cards],
            )
        )
    return out


def _number(util: float) -> str:
    return f"{util:.0f}" if float(util).is_integer() else f"{util:.1f}"


def render(nodes: list[HeatNode]) -> SafeString:
    """The heatmap's cells, grouped by node (``data-node``), every cell a link."""
    # The GPU page's URL once, its id swapped per cell: reverse() 8,000 times is slow.
    head, tail = reverse("telemetry:gpu", args=[123456789]).split("123456789")
    # The translated texts are escaped once, the node's name once per node; what goes in
    # per cell is numbers (escape() per cell was a third of the time).
    pattern = escape(_("%(node)s · GPU %(index)s: %(value)s"))
    unknown = escape(_("no reading"))
    percent = escape(_("%(value)s %%"))
    parts = []
    for node in nodes:
        name = escape(node.name)
        parts.append(
            f'<div class="hm-node" data-node="{node.node_id}">'
            f'<span class="hm-name" aria-hidden="true">{name}</span><span class="hm-cells">'
        )
        for gpu_id, index, util in node.cells:
            value = unknown if util is None else percent % {"value": _number(util)}
            title = pattern % {"node": name, "index": index, "value": value}
            parts.append(
                f'<a class="{bucket(util)}" data-i="{index}" href="{head}{gpu_id}{tail}" '
                f'title="{title}"></a>'
            )
        parts.append("</span></div>")
    # Names and texts are escaped above; the rest is numbers and fixed markup.
    return mark_safe("".join(parts))  # noqa: S308

"""AMD ``amd-smi metric --json`` (and ``static``): a top-level list of ``{"gpu": N, ...}``,
or newer releases' ``{"gpu_data": [...]}``; values are ``{"value": v, "unit": u}`` objects
or ``"N/A"``. The text form (``amd-smi metric --power``) is ``GPU: N`` blocks of
``KEY: value unit`` lines.
"""

from __future__ import annotations

import re
from typing import Any

from agents.gpu_agent.backends.smi.common import (
    SmiCard,
    blank,
    integer,
    lenient_json,
    mib,
    number,
    percent,
    text,
)

VENDOR = "amd"


def _value(node: Any, *path: str) -> tuple[Any, str | None]:
    for key in path:
        if not isinstance(node, dict):
            return None, None
        node = node.get(key)
    if isinstance(node, dict):
        return node.get("value"), node.get("unit")
    return node, None


def _watts(node: Any, *path: str) -> float | None:
    value, unit = _value(node, *path)
    n = number(value)
    if n is None:
        return None
    scale = {"w": 1.0, "mw": 1e-3, "uw": 1e-6, "µw": 1e-6}.get((unit or "W").lower())
    return None if scale is None else n * scale


def card_from_json(raw: dict[str, Any]) -> SmiCard:
    card = SmiCard(vendor=VENDOR, index=integer(raw.get("gpu")) or 0)
    card.power_w = _watts(raw, "power", "socket_power")
    card.utilization_gpu_pct = percent(_value(raw, "usage", "gfx_activity")[0])
    card.utilization_memory_pct = percent(_value(raw, "usage", "umc_activity")[0])
    for key, field in (("total_vram", "memory_total_mib"), ("used_vram", "memory_used_mib")):
        value, unit = _value(raw, "mem_usage", key)
        if not blank(value):
            setattr(card, field, mib(value, unit or "MB"))
    card.temperature_c = integer(
        _value(raw, "temperature", "edge")[0] or _value(raw, "temperature", "hotspot")[0]
    )
    card.memory_temperature_c = integer(_value(raw, "temperature", "mem")[0])
    asic = raw.get("asic") if isinstance(raw.get("asic"), dict) else {}
    card.name = text(asic.get("market_name"))
    bus = raw.get("bus") if isinstance(raw.get("bus"), dict) else {}
    card.pci_bus_id = text(bus.get("bdf"))
    return card


def parse_json(output: str) -> list[SmiCard]:
    data = lenient_json(output)
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    if not isinstance(data, list):
        raise ValueError("amd-smi --json printed neither a list nor gpu_data")
    return [card_from_json(item) for item in data if isinstance(item, dict)]


_GPU = re.compile(r"^GPU:\s*(\d+)\s*$")


def parse_text(output: str) -> list[SmiCard]:
    """``amd-smi metric`` as text: power, usage and memory lines where shown."""
    cards: list[SmiCard] = []
    for line in output.splitlines():
        match = _GPU.match(line.strip())
        if match:
            cards.append(SmiCard(vendor=VENDOR, index=int(match.group(1))))
            continue
        key, sep, value = line.strip().partition(":")
        if not sep or not cards:
            continue
        key, card = key.strip().upper(), cards[-1]
        if key == "SOCKET_POWER":
            card.power_w = _watts({"v": {"value": number(value), "unit": _unit(value)}}, "v")
        elif key == "GFX_ACTIVITY":
            card.utilization_gpu_pct = percent(value)
        elif key == "UMC_ACTIVITY":
            card.utilization_memory_pct = percent(value)
        elif key in ("TOTAL_VRAM", "USED_VRAM"):
            field = "memory_total_mib" if key == "TOTAL_VRAM" else "memory_used_mib"
            setattr(card, field, mib(number(value), _unit(value) or "MB"))
        elif key in ("EDGE", "HOTSPOT") and card.temperature_c is None:
            card.temperature_c = integer(value)
    return cards


def _unit(value: str) -> str | None:
    parts = value.split()
    return parts[1] if len(parts) > 1 else None

"""``rocm-smi --json`` (AMD ROCm) and the same command in Hygon's DTK, also ``hy-smi --json``.

One object per ``cardN`` (plus ``system``, skipped). Keys changed across releases, so each
reading is looked up by several names, case-insensitively: ``GPU use (%)`` / ``DCU use (%)``
/ ``HCU use (%)``; ``VRAM Total Memory (B)`` / ``vram Total Memory (MiB)``; ``GPU memory use
(%)`` (ROCm 6.0) became ``GPU Memory Read/Write Activity (%)`` (6.1); ``Card series`` /
``Card Series``. Newer hyhal prints pairs without the comma between them; ``lenient_json``
reads that too.
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

_CARD = re.compile(r"^card(\d+)$", re.I)
# "VRAM Total Memory (B)" -> ("vram total memory", "B")
_UNIT = re.compile(r"^(.*?)\s*\((B|KB|KiB|MB|MiB|GB|GiB)\)\s*$", re.I)

UTILIZATION_KEYS = ("gpu use (%)", "dcu use (%)", "hcu use (%)")
MEMORY_BUSY_KEYS = ("gpu memory read/write activity (%)", "gpu memory use (%)")
TEMPERATURE_KEYS = (
    "temperature (sensor edge) (c)",
    "temperature (sensor core) (c)",
    "temperature (sensor junction) (c)",
)
MEMORY_TEMPERATURE_KEYS = ("temperature (sensor memory) (c)", "temperature (sensor mem) (c)")
POWER_KEYS = (
    "average graphics package power (w)",
    "current socket graphics package power (w)",
)


def _lower(card: dict[str, Any]) -> dict[str, Any]:
    return {str(k).strip().lower(): v for k, v in card.items()}


def _first(card: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = card.get(key)
        if not blank(value):
            return value
    return None


def _memory(card: dict[str, Any], what: str) -> int | None:
    """``vram total memory`` or ``vram total used memory``, in whatever unit its key names."""
    for key, value in card.items():
        match = _UNIT.match(key)
        if match and match.group(1) == what and not blank(value):
            return mib(value, match.group(2))
    return None


def vendor_of(card: dict[str, Any]) -> str:
    lowered = _lower(card)
    maker = str(lowered.get("card vendor") or "").lower()
    if "haiguang" in maker or "hygon" in maker or "dcu use (%)" in lowered:
        return "hygon"
    if "hcu use (%)" in lowered:
        return "hygon"
    return "amd"


def card_from_json(index: int, raw: dict[str, Any]) -> SmiCard:
    card = _lower(raw)
    name = text(_first(card, ("card series", "device name", "card model")))
    reading = SmiCard(
        vendor=vendor_of(raw),
        index=index,
        name=name,
        uuid=text(card.get("unique id")),
        serial=text(card.get("serial number")),
        pci_bus_id=text(card.get("pci bus")),
        memory_total_mib=_memory(card, "vram total memory"),
        memory_used_mib=_memory(card, "vram total used memory"),
        utilization_gpu_pct=percent(_first(card, UTILIZATION_KEYS)),
        utilization_memory_pct=percent(_first(card, MEMORY_BUSY_KEYS)),
        temperature_c=integer(_first(card, TEMPERATURE_KEYS)),
        memory_temperature_c=integer(_first(card, MEMORY_TEMPERATURE_KEYS)),
        power_w=number(_first(card, POWER_KEYS)),
        power_limit_w=number(card.get("max graphics package power (w)")),
        sm_clock_mhz=integer(card.get("sclk clock speed:")),
        mem_clock_mhz=integer(card.get("mclk clock speed:")),
        fan_speed_pct=percent(card.get("fan speed (%)")),
        pcie_replay_total=integer(card.get("pcie replay count")),
    )
    # Occupancy as a percentage (not NVML's memory-busy figure): kept for /metrics only.
    allocated = percent(_first(card, ("gpu memory allocated (vram%)", "hcu memory use (%)")))
    if allocated is not None:
        reading.extra["vram_used_pct"] = allocated
    return reading


def parse_json(output: str) -> list[SmiCard]:
    data = lenient_json(output)
    if not isinstance(data, dict):
        raise ValueError("rocm-smi --json printed no object of cards")
    cards = []
    for key, value in data.items():
        match = _CARD.match(str(key))
        if match and isinstance(value, dict):
            cards.append(card_from_json(int(match.group(1)), value))
    cards.sort(key=lambda c: c.index)
    return cards

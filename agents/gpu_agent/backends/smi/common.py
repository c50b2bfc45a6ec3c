"""What every vendor parser shares: blank values, numbers with units, memory in MiB."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# What the tools print for "cannot read": NA (npu-smi), - (npu-smi A3's second die),
# N/A (rocm-smi, amd-smi), an empty cell.
BLANKS = frozenset({"", "-", "--", "na", "n/a", "none", "null", "unknown"})

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
# Bytes per unit. The tools' "MB" is binary (npu-smi prints 65536 MB for a 64 GiB HBM
# and rocm-smi 65520 MiB for the same kind of card), so MB and MiB are the same here.
_BYTES = {
    "b": 1,
    "kb": 1024,
    "kib": 1024,
    "mb": 1024**2,
    "mib": 1024**2,
    "gb": 1024**3,
    "gib": 1024**3,
}
MIB = 1024**2
# A PCI address as the tools print it: domain (4 or 8 hex digits), bus, device.function.
BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")


def blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in BLANKS)


def number(value: Any) -> float | None:
    """The first number in ``value`` ("49.0C", "118.0W", "(300Mhz)", 12.5); None if blank."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if blank(value):
        return None
    match = _NUMBER.search(str(value))
    return float(match.group()) if match else None


def integer(value: Any) -> int | None:
    n = number(value)
    return None if n is None else round(n)


def percent(value: Any) -> int | None:
    """A percentage 0-100; anything outside is no reading."""
    n = integer(value)
    return n if n is not None and 0 <= n <= 100 else None


def mib(value: Any, unit: str | None = "MiB") -> int | None:
    """``value`` in ``unit`` as whole MiB. The unit may also trail the value ("2703 MB")."""
    if isinstance(value, str) and unit is None:
        match = re.fullmatch(r"\s*([-+]?\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*", value, re.I)
        if not match:
            return None
        value, unit = match.group(1), match.group(2) or "MiB"
    n = number(value)
    if n is None or n < 0:
        return None
    scale = _BYTES.get((unit or "MiB").strip().lower())
    if scale is None:
        return None
    return round(n * scale / MIB)


def text(value: Any) -> str | None:
    if blank(value):
        return None
    return " ".join(str(value).split())


def lenient_json(raw: str, repairs: int = 200) -> Any:
    """JSON, also when pairs lack the comma between them.

    Newer hyhal ``hy-smi --json`` prints ``"91.0""Average GFX Core Power (W)": "20.0"``;
    the decoder says where it expected the comma, so insert it there and try again.
    """
    for _ in range(repairs):
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            if not exc.msg.startswith("Expecting ',' delimiter"):
                raise
            raw = raw[: exc.pos] + "," + raw[exc.pos :]
    return json.loads(raw)


@dataclass
class SmiProcess:
    pid: int
    name: str | None = None
    memory_used_mib: int | None = None


@dataclass
class SmiCard:
    """One chip as a vendor tool shows it; every reading optional."""

    vendor: str
    index: int  # the tool's own device number (NPU id, DCU id, cardN)
    chip: int | None = None  # Ascend: the chip within the NPU (A3 and 310 cards hold several)
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    utilization_gpu_pct: int | None = None
    utilization_memory_pct: int | None = None
    temperature_c: int | None = None
    memory_temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    fan_speed_pct: int | None = None
    pcie_replay_total: int | None = None
    # The tool's health word as printed ("OK", "Warning", "Alarm"); None when not shown.
    health: str | None = None
    processes: list[SmiProcess] | None = None
    # Readings with no NVML counterpart, kept for the vendor's own /metrics names
    # (e.g. Ascend's DDR beside its HBM, Hygon's VRAM%).
    extra: dict[str, float] = field(default_factory=dict)


@dataclass
class TableInfo:
    """What a tool's default table shows: its own version, the driver's, the cards."""

    version: str | None
    driver_version: str | None
    cards: list[SmiCard]


def table_cells(line: str) -> list[str]:
    """The cells of one ``| a | b |`` table line, stripped."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def two_line_cards(
    output: str,
    *,
    processes_heading: str,
    card: Callable[[list[str], list[str]], SmiCard],
    process: Callable[[list[str], dict[int, SmiCard]], None],
) -> list[SmiCard]:
    """The cards of a table that gives each card two ``|`` lines, the first starting with
    its number and then its bus id (mx-smi, cnmon): ``card(first, second)`` reads one;
    after the line holding ``processes_heading``, ``process(cells, cards_by_index)``."""
    cards: list[SmiCard] = []
    by_index: dict[int, SmiCard] = {}
    pending: list[str] | None = None
    in_processes = False
    for line in output.splitlines():
        stripped = line.strip()
        if processes_heading in stripped:
            in_processes = True
            continue
        if not stripped.startswith("|"):
            continue
        cells = table_cells(line)
        if in_processes:
            process(cells, by_index)
            continue
        if pending is None:
            words = cells[0].split()
            if len(cells) >= 3 and words and words[0].isdigit() and BUS_ID.match(cells[1]):
                pending = cells
            continue
        read = card(pending, cells)
        pending = None
        cards.append(read)
        by_index[read.index] = read
    return cards

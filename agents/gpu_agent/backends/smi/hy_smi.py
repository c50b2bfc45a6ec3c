"""Hygon DCU ``hy-smi`` (and DTK's ``rocm-smi``, which prints the same) as text.

The default table is one whitespace-separated row per DCU under a header; the columns
vary by release (DTK 23.10 compact: ``DCU Temp AvgPwr Fan Perf PwrCap VRAM% DCU%``; 24.04:
no Fan, a Mode column; HAMi's rename makes ``DCU%`` ``HCU%``), so values are read by the
header's names. Units trail the values (``49.0C``, ``30.0c``, ``118.0W``, ``0%``). The
table shows no memory in MiB, only ``VRAM%``: used/total stay absent.

``hy-smi --showproductname`` and friends print ``DCU[i] : key: value`` lines.
"""

from __future__ import annotations

import re

from agents.gpu_agent.backends.smi.common import SmiCard, integer, number, percent, text

VENDOR = "hygon"
_KEYED = re.compile(r"^\s*[DH]CU\[(\d+)\]\s*:\s*([^:]+?)\s*:\s?(.*)$")
_UTILIZATION = ("DCU%", "HCU%", "GPU%")


def parse_table(output: str) -> list[SmiCard]:
    header: list[str] | None = None
    cards = []
    for line in output.splitlines():
        words = line.split()
        if not words or set(line.strip()) <= {"="} or "=" in words[0]:
            continue
        if words[0] in ("DCU", "HCU", "GPU") and len(words) > 1 and not words[1][0].isdigit():
            header = words
            continue
        if header is None or not words[0].isdigit():
            continue
        row = dict(zip(header, words, strict=False))
        card = SmiCard(vendor=VENDOR, index=int(words[0]))
        card.temperature_c = integer(row.get("Temp"))
        card.power_w = number(row.get("AvgPwr"))
        card.power_limit_w = number(row.get("PwrCap"))
        card.fan_speed_pct = percent(row.get("Fan"))
        card.utilization_gpu_pct = percent(next((row[k] for k in _UTILIZATION if k in row), None))
        vram = percent(row.get("VRAM%"))
        if vram is not None:
            card.extra["vram_used_pct"] = vram
        cards.append(card)
    return cards


def parse_keyed(output: str) -> dict[int, dict[str, str | None]]:
    """``DCU[i] : key: value`` lines: per DCU, key -> value (None where the value is empty,
    as ``Card Series`` is on some K100s)."""
    out: dict[int, dict[str, str | None]] = {}
    for line in output.splitlines():
        match = _KEYED.match(line)
        if match:
            out.setdefault(int(match.group(1)), {})[match.group(2)] = text(match.group(3))
    return out

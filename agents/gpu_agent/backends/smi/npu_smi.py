"""Huawei Ascend ``npu-smi``: ``info`` (the table), ``info -m`` (chip names), ``info -t usages``
/ ``-t common`` / ``-t health`` (key : value blocks).

The ``info`` table has two lines per chip whose columns moved between releases: 20.x has
``Chip Device``, 21.x adds ``Hugepages-Usage(page)``, 910 cards add ``HBM-Usage(MB)``, A3
(25.x) prints ``Chip Phy-ID`` and two chips per NPU, the second with power ``-``. Cells are
read by position within the ``|`` columns, never by character offsets (some captures are
mis-aligned), and an ``a / b`` pair counts as one value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agents.gpu_agent.backends.smi.common import (
    BUS_ID,
    SmiCard,
    SmiProcess,
    blank,
    integer,
    mib,
    number,
    percent,
    table_cells,
    text,
)

VENDOR = "ascend"
# "a / b", "52675/ 65536", or a single token.
_TOKEN = re.compile(r"(\S+?)\s*/\s*(\S+)|(\S+)")
_VERSION = re.compile(r"npu-smi\s+(\S+)")


@dataclass
class NpuSmiInfo:
    version: str | None
    cards: list[SmiCard]


def _tokens(cell: str) -> list[str | tuple[str, str]]:
    out: list[str | tuple[str, str]] = []
    for pair_a, pair_b, single in _TOKEN.findall(cell):
        out.append((pair_a, pair_b) if pair_a else single)
    return out


def _pair(token: str | tuple[str, str] | None) -> tuple[int | None, int | None]:
    if not isinstance(token, tuple):
        return None, None
    return mib(token[0]), mib(token[1])


def _at(tokens: list, i: int):
    return tokens[i] if i < len(tokens) else None


def _is_rule(line: str) -> bool:
    return bool(line.strip()) and set(line.strip()) <= set("+-=|")


def _name(raw: str | None) -> str | None:
    raw = text(raw)
    if raw is None:
        return None
    return raw if raw.lower().startswith("ascend") else f"Ascend {raw}"


def parse_info(output: str) -> NpuSmiInfo:
    """``npu-smi info``: one card per chip, in the table's order, with the processes table."""
    version_match = _VERSION.search(output)
    cards: list[SmiCard] = []
    by_chip: dict[tuple[int, int], SmiCard] = {}
    has_hbm = False
    section = None
    first: list[str] | None = None
    for line in output.splitlines():
        if not line.strip().startswith("|") or _is_rule(line):
            continue
        cells = table_cells(line)
        joined = " ".join(cells)
        if "Process id" in joined:
            section = "processes"
            continue
        if cells[0].startswith("NPU") and "Name" in cells[0]:
            section = "chips"
            continue
        if cells[0].startswith("Chip") and section == "chips":
            has_hbm = "HBM-Usage" in joined
            continue
        if section == "chips" and len(cells) >= 3:
            if first is None:
                if cells[0].split() and cells[0].split()[0].isdigit():
                    first = cells
                continue
            second, first_cells = cells, first
            first = None
            card = _chip(first_cells, second, has_hbm)
            if card is not None:
                cards.append(card)
                by_chip[(card.index, card.chip or 0)] = card
        elif section == "processes" and len(cells) >= 4:
            _process(cells, by_chip)
    return NpuSmiInfo(version_match.group(1) if version_match else None, cards)


def _chip(first: list[str], second: list[str], has_hbm: bool) -> SmiCard | None:
    head = first[0].split(None, 1)
    npu = integer(head[0])
    if npu is None:
        return None
    chip_cols = second[0].split()
    values1 = _tokens(first[2])
    values2 = _tokens(second[2])
    bus = second[1] if BUS_ID.match(second[1] or "") else None
    card = SmiCard(
        vendor=VENDOR,
        index=npu,
        chip=integer(chip_cols[0]) if chip_cols else None,
        name=_name(head[1] if len(head) > 1 else None),
        pci_bus_id=bus,
        health=text(first[1]),
    )
    power, temp = _at(values1, 0), _at(values1, 1)
    card.power_w = number(power) if isinstance(power, str) else None
    card.temperature_c = integer(temp) if isinstance(temp, str) else None
    hugepages = _at(values1, 2)
    if isinstance(hugepages, tuple):
        used, total = (integer(v) for v in hugepages)
        if used is not None and total is not None:
            card.extra["hugepages_used"], card.extra["hugepages_total"] = used, total
    aicore = _at(values2, 0)
    card.utilization_gpu_pct = percent(aicore) if isinstance(aicore, str) else None
    ddr_used, ddr_total = _pair(_at(values2, 1))
    hbm_used, hbm_total = _pair(_at(values2, 2)) if has_hbm else (None, None)
    if ddr_total:
        card.extra["ddr_used_mib"], card.extra["ddr_total_mib"] = ddr_used or 0, ddr_total
    # The card's own memory is its HBM where it has one; DDR on 310-class cards.
    if hbm_total:
        card.memory_used_mib, card.memory_total_mib = hbm_used, hbm_total
        card.extra["hbm_used_mib"], card.extra["hbm_total_mib"] = hbm_used or 0, hbm_total
    elif ddr_total:
        card.memory_used_mib, card.memory_total_mib = ddr_used, ddr_total
    return card


def _process(cells: list[str], by_chip: dict[tuple[int, int], SmiCard]) -> None:
    ids = cells[0].split()
    npu = integer(ids[0]) if ids else None
    chip = integer(ids[1]) if len(ids) > 1 else 0
    pid = integer(cells[1])
    card = by_chip.get((npu, chip)) if npu is not None else None
    if card is None or pid is None:
        return
    if card.processes is None:
        card.processes = []
    card.processes.append(SmiProcess(pid, text(cells[2]), mib(cells[3])))


def parse_mapping(output: str) -> list[tuple[int, int, int | None, str | None]]:
    """``npu-smi info -m``: (NPU id, chip id, logic id, chip name) per chip; the ``Mcu``
    rows (the board controller, logic id ``-``) are not chips and are left out."""
    rows = []
    for line in output.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 3 or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        logic = parts[2]
        name = text(parts[3]) if len(parts) > 3 else None
        if blank(logic) or (name or "").lower() == "mcu":
            continue
        rows.append((int(parts[0]), int(parts[1]), integer(logic), name))
    return rows


def parse_keyvalues(output: str) -> list[dict[str, str]]:
    """``npu-smi info -t ...``: one dict per blank-line block of ``key : value`` lines;
    indented continuation lines (``: more text``) are appended to the key before."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    # The key a continuation line extends, and its block: -t health separates its
    # "Error Information" continuations with blank lines.
    last: tuple[dict[str, str], str] | None = None
    for line in output.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
            current = {}
            continue
        key, sep, value = line.partition(":")
        if not sep:
            last = None
            continue
        key = key.strip()
        if not key:
            if last is not None:
                owner, name = last
                owner[name] = f"{owner[name]} {value.strip()}".strip()
            continue
        current[key] = value.strip()
        last = (current, key)
    if current:
        blocks.append(current)
    return blocks


@dataclass
class ChipStats:
    npu: int | None
    chip: int
    memory_total_mib: int | None = None
    memory_usage_pct: int | None = None
    aicore_pct: int | None = None
    aicpu_pct: int | None = None
    vectorcore_pct: int | None = None
    aicore_clock_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None


def parse_chip_stats(output: str) -> list[ChipStats]:
    """``-t usages`` and ``-t common``. A block belongs to the ``Chip ID`` it holds (in
    ``usages`` that line ends the block, in ``common`` it starts it); the ``Chip Name :
    mcu`` block is the board controller and the first block names the NPU."""
    npu = None
    chips = []
    for block in parse_keyvalues(output):
        if "NPU ID" in block:
            npu = integer(block["NPU ID"])
        if "Chip ID" not in block:
            continue
        hbm = mib(block.get("HBM Capacity(MB)"))
        stats = ChipStats(npu=npu, chip=integer(block["Chip ID"]) or 0)
        stats.memory_total_mib = hbm or mib(block.get("DDR Capacity(MB)"))
        if hbm:
            stats.memory_usage_pct = percent(block.get("HBM Usage Rate(%)"))
        else:
            stats.memory_usage_pct = percent(
                block.get("DDR Usage Rate(%)", block.get("Memory Usage Rate(%)"))
            )
        stats.aicore_pct = percent(block.get("Aicore Usage Rate(%)"))
        stats.aicpu_pct = percent(block.get("Aicpu Usage Rate(%)"))
        stats.vectorcore_pct = percent(block.get("Vectorcore Usage Rate(%)"))
        stats.aicore_clock_mhz = integer(block.get("Aicore curFreq(MHZ)"))
        stats.temperature_c = integer(block.get("Temperature(C)"))
        stats.power_w = number(block.get("NPU Real-time Power(W)"))
        chips.append(stats)
    return chips


@dataclass
class ChipHealth:
    status: str | None
    error_codes: list[str]
    information: str | None


def parse_health(output: str) -> ChipHealth | None:
    """``npu-smi info -i N -c C -t health``; None when the output holds no status."""
    for block in parse_keyvalues(output):
        if "Health Status" in block:
            codes = (block.get("Error Code") or "").split()
            return ChipHealth(
                text(block["Health Status"]),
                [c for c in codes if not blank(c)],
                text(block.get("Error Information")),
            )
    return None

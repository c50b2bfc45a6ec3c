"""Cambricon ``cnmon`` (default table). Two lines per card inside ``|`` columns:
``Card VF Name Firmware | Bus-Id | Util Ecc-Error`` then ``Fan Temp Pwr:Usage/Cap |
Memory-Usage | SR-IOV or Mode  Compute-Mode``. Masked values (``xxxxx MiB``) are absent.
"""

from __future__ import annotations

import re

from agents.gpu_agent.backends.smi.common import (
    BUS_ID,
    SmiCard,
    SmiProcess,
    TableInfo,
    integer,
    mib,
    number,
    percent,
    table_cells,
    text,
)

VENDOR = "cambricon"
_POWER = re.compile(r"(\S+)\s*W\s*/\s*(\S+)\s*W")
_MEMORY = re.compile(r"(\S+)\s*(MiB|MB|GiB|KB)\s*/\s*(\S+)\s*(MiB|MB|GiB|KB)")
_HEAD = re.compile(r"CNMON\s+v?(\S+)\s+Driver\s+v?(\S+)")
_PROCESS = re.compile(r"^(\d+)\s+(\S+)\s+(\d+)\s+(.*?)\s+(\d+(?:\.\d+)?)\s*(MiB|MB|GiB|KB)$")


def parse(output: str) -> TableInfo:
    cards: list[SmiCard] = []
    by_index: dict[int, SmiCard] = {}
    pending: list[str] | None = None
    in_processes = False
    for line in output.splitlines():
        stripped = line.strip()
        if "Processes:" in stripped:
            in_processes = True
            continue
        if not stripped.startswith("|"):
            continue
        cells = table_cells(line)
        if in_processes:
            _process(cells[0], by_index)
            continue
        if pending is None:
            words = cells[0].split()
            if len(cells) >= 3 and words and words[0].isdigit() and BUS_ID.match(cells[1]):
                pending = cells
            continue
        card = _card(pending, cells)
        pending = None
        cards.append(card)
        by_index[card.index] = card
    head = _HEAD.search(output)
    return TableInfo(head.group(1) if head else None, head.group(2) if head else None, cards)


def _card(first: list[str], second: list[str]) -> SmiCard:
    words = first[0].split()
    # Card, VF ("/" on a physical card), Name, Firmware
    card = SmiCard(
        vendor=VENDOR,
        index=int(words[0]),
        name=text(words[2]) if len(words) > 2 else None,
        pci_bus_id=first[1],
    )
    util = first[2].split()
    card.utilization_gpu_pct = percent(util[0]) if util else None
    fan_temp = second[0].split()
    card.fan_speed_pct = percent(fan_temp[0]) if fan_temp else None
    card.temperature_c = integer(fan_temp[1]) if len(fan_temp) > 1 else None
    power = _POWER.search(second[0])
    if power:
        card.power_w, card.power_limit_w = number(power.group(1)), number(power.group(2))
    memory = _MEMORY.search(second[1]) if len(second) > 1 else None
    if memory:
        card.memory_used_mib = mib(memory.group(1), memory.group(2))
        card.memory_total_mib = mib(memory.group(3), memory.group(4))
    return card


def _process(cell: str, by_index: dict[int, SmiCard]) -> None:
    match = _PROCESS.match(cell)
    card = by_index.get(int(match.group(1))) if match else None
    if match is None or card is None:
        return
    if card.processes is None:
        card.processes = []
    card.processes.append(
        SmiProcess(int(match.group(3)), text(match.group(4)), mib(match.group(5), match.group(6)))
    )

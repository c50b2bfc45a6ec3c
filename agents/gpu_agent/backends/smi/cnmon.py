"""Cambricon ``cnmon`` (default table). Two lines per card inside ``|`` columns:
``Card VF Name Firmware | Bus-Id | Util Ecc-Error`` then ``Fan Temp Pwr:Usage/Cap |
Memory-Usage | SR-IOV or Mode  Compute-Mode``. Masked values (``xxxxx MiB``) are absent.
"""

from __future__ import annotations

import re

from agents.gpu_agent.backends.smi.common import (
    SmiCard,
    SmiProcess,
    TableInfo,
    integer,
    mib,
    number,
    percent,
    text,
    two_line_cards,
)

VENDOR = "cambricon"
_POWER = re.compile(r"(\S+)\s*W\s*/\s*(\S+)\s*W")
_MEMORY = re.compile(r"(\S+)\s*(MiB|MB|GiB|KB)\s*/\s*(\S+)\s*(MiB|MB|GiB|KB)")
_HEAD = re.compile(r"CNMON\s+v?(\S+)\s+Driver\s+v?(\S+)")
_PROCESS = re.compile(r"^(\d+)\s+(\S+)\s+(\d+)\s+(.*?)\s+(\d+(?:\.\d+)?)\s*(MiB|MB|GiB|KB)$")


def parse(output: str) -> TableInfo:
    cards = two_line_cards(output, processes_heading="Processes:", card=_card, process=_process)
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


def _process(cells: list[str], by_index: dict[int, SmiCard]) -> None:
    match = _PROCESS.match(cells[0])
    card = by_index.get(int(match.group(1))) if match else None
    if match is None or card is None:
        return
    if card.processes is None:
        card.processes = []
    card.processes.append(
        SmiProcess(int(match.group(3)), text(match.group(4)), mib(match.group(5), match.group(6)))
    )

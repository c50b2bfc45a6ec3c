"""MetaX ``mx-smi`` (default table). Two lines per GPU inside ``|`` columns:
``GPU NAME | Bus-id | GPU-Util`` then ``Temp Power | Memory-Usage | [GPU-State]``. 2.2.x
prints ``Pwr:Usage/Cap`` (``53W / 450W``) and a GPU-State; 2.1.x power alone. Process box:
``GPU PID Process Name GPU Memory Usage(MiB)``, or ``no process found``.
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

VENDOR = "metax"
_MEMORY = re.compile(r"^(\S+)\s*/\s*(\S+)\s*(MiB|MB|KB|GiB|B)?$", re.I)
_POWER = re.compile(r"^(\S+?)\s*(?:/\s*(\S+))?$")
_DRIVER = re.compile(r"Kernel Mode Driver Version:\s*(\S+)")
_VERSION = re.compile(r"MX-SMI\s+(\S+)")


def parse(output: str) -> TableInfo:
    cards = two_line_cards(output, processes_heading="Process:", card=_card, process=_process)
    version = _VERSION.search(output)
    driver = _DRIVER.search(output)
    return TableInfo(
        version.group(1) if version else None, driver.group(1) if driver else None, cards
    )


def _card(first: list[str], second: list[str]) -> SmiCard:
    index, _, name = first[0].partition(" ")
    card = SmiCard(vendor=VENDOR, index=int(index), name=text(name), pci_bus_id=first[1])
    card.utilization_gpu_pct = percent(first[2])
    temp, _, power = second[0].partition(" ")
    card.temperature_c = integer(temp)
    match = _POWER.match(power.strip())
    if match:
        card.power_w = number(match.group(1))
        card.power_limit_w = number(match.group(2))
    memory = _MEMORY.match(second[1]) if len(second) > 1 else None
    if memory:
        unit = memory.group(3) or "MiB"
        card.memory_used_mib = mib(memory.group(1), unit)
        card.memory_total_mib = mib(memory.group(2), unit)
    card.health = text(second[2]) if len(second) > 2 else None
    if card.health and card.health.lower() == "available":
        card.health = "OK"
    return card


def _process(cells: list[str], by_index: dict[int, SmiCard]) -> None:
    words = cells[0].split()
    if len(words) < 4 or not words[0].isdigit() or not words[1].isdigit():
        return  # the header, the rule, "no process found"
    card = by_index.get(int(words[0]))
    if card is None:
        return
    if card.processes is None:
        card.processes = []
    card.processes.append(SmiProcess(int(words[1]), " ".join(words[2:-1]), mib(words[-1])))

"""Moore Threads ``mthreads-gmi`` (default table). Per GPU: ``ID Name |PCIe |%GPU Mem`` with
memory as ``usedMiB(totalMiB)``, then ``Device Type |Pcie Lane Width |Temp MPC Capable``,
then ``| ECC Mode``. No power column. Process box: ``ID PID Process name GPU Memory Usage``;
long names are cut with ``...`` by the tool and kept so.
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
    percent,
    text,
)

VENDOR = "moorethreads"
_MEMORY = re.compile(
    r"(\d+(?:\.\d+)?)\s*(MiB|MB|GiB|KB)?\s*\(\s*(\d+(?:\.\d+)?)\s*(MiB|MB|GiB|KB)?\s*\)"
)
_HEAD = re.compile(r"mthreads-gmi:\s*(\S+)\s+Driver Version:\s*(\S+)")
_PROCESS = re.compile(r"^(\d+)\s+(\d+)\s+(.*?)\s+(\d+(?:\.\d+)?)\s*(MiB|MB|GiB|KB)$")
# The vendor's FAQ: used above total is a misreport (IOMMU off on an S4000), not a reading.
OVER_TOTAL = "reports more memory used than its total"


def parse(output: str) -> TableInfo:
    cards: list[SmiCard] = []
    by_index: dict[int, SmiCard] = {}
    last: SmiCard | None = None
    in_processes = False
    for line in output.splitlines():
        if line.strip().startswith("Processes:"):
            in_processes = True
            continue
        if in_processes:
            match = _PROCESS.match(line.strip())
            card = by_index.get(int(match.group(1))) if match else None
            if match and card is not None:
                if card.processes is None:
                    card.processes = []
                card.processes.append(
                    SmiProcess(
                        int(match.group(2)),
                        text(match.group(3)),
                        mib(match.group(4), match.group(5)),
                    )
                )
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 3:
            continue
        words = parts[0].split(None, 1)
        if words and words[0].isdigit() and BUS_ID.match(parts[1]):
            last = _card(int(words[0]), words, parts)
            cards.append(last)
            by_index[last.index] = last
        elif last is not None and last.temperature_c is None and parts[2]:
            last.temperature_c = integer(parts[2].split()[0])
    head = _HEAD.search(output)
    return TableInfo(head.group(1) if head else None, head.group(2) if head else None, cards)


def _card(index: int, words: list[str], parts: list[str]) -> SmiCard:
    card = SmiCard(
        vendor=VENDOR, index=index, name=text(words[1]) if len(words) > 1 else None,
        pci_bus_id=parts[1],
    )  # fmt: skip
    values = parts[2].split(None, 1)
    card.utilization_gpu_pct = percent(values[0]) if values else None
    memory = _MEMORY.search(values[1]) if len(values) > 1 else None
    if memory:
        card.memory_used_mib = mib(memory.group(1), memory.group(2) or "MiB")
        card.memory_total_mib = mib(memory.group(3), memory.group(4) or "MiB")
        if (
            card.memory_used_mib is not None
            and card.memory_total_mib is not None
            and card.memory_used_mib > card.memory_total_mib
        ):
            card.health = OVER_TOTAL
    return card

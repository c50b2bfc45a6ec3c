"""The reading schema: every field of a card and of a process that the portal reads, declared once.

Each field says its name (units live in the names), its type, its range, whether pages show
it live, whether history keeps it and how, and which dcgm-exporter series carry it. The
agent's portal view, the portal's snapshot check, the latest-readings cache, the sample
buffer's columns, the rollup tables and their SQL, the Prometheus source's mapping and the
live fields are all derived from these tuples. Adding a field to history is one declaration
here plus a migration (docs/architecture.md, "Adding a field to history").

This module is part of the agent package: it imports nothing but the standard library, so
the agent stays standalone and the portal reads the same declarations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Literal

# Integers as PostgreSQL's columns hold them; anything larger is no reading.
INT32_MAX = 2**31 - 1
INT16_MAX = 2**15 - 1


@dataclass(frozen=True, slots=True)
class History:
    """How history keeps a field: the average and the peak of each time bucket.

    The rollup columns are ``<column>_avg<suffix>`` and ``<column>_max<suffix>``;
    ``across_cards`` says how a node's history combines its cards (utilization is
    averaged, memory and power add up).
    """

    column: str
    suffix: str = ""
    across_cards: Literal["avg", "sum"] = "avg"

    def columns(self) -> tuple[str, str]:
        return f"{self.column}_avg{self.suffix}", f"{self.column}_max{self.suffix}"


@dataclass(frozen=True, slots=True)
class Dcgm:
    """A dcgm-exporter series that carries the field, and the factor to the field's unit."""

    series: str
    scale: float = 1.0


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: Literal["int", "number", "text"]
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    max_length: int | None = None  # text
    required: bool = False
    # A text field's allowed values (None: any text within max_length).
    choices: frozenset[str] | None = None
    # A bad value of a lenient field is dropped alone (the card reads as if the agent had
    # not sent it) instead of refusing the whole snapshot: fields a newer agent may grow.
    lenient: bool = False
    live: bool = False  # shown on the live pages and in the API's latest readings
    history: History | None = None
    # Preferred first: dcgm-exporter 4.9's base-unit names, then the legacy ones.
    dcgm: tuple[Dcgm, ...] = ()

    def check(self, value: Any) -> str | None:
        """Why ``value`` is not a reading of this field, or None when it is one (or absent)."""
        if value is None:
            return "is missing" if self.required else None
        kind = type(value)
        if self.type == "text":
            if kind is not str:
                return "is not a string"
            if self.max_length is not None and len(value) > self.max_length:
                return f"is longer than {self.max_length} characters"
            if "\x00" in value:
                return "holds a NUL character"
            if _unencodable(value):
                return "is not valid UTF-8 (a lone surrogate)"
            if self.choices is not None and value not in self.choices:
                return "is not a known value"
            return None
        if kind is int:
            pass
        elif kind is float and self.type == "number":
            if value != value or value in (float("inf"), float("-inf")):
                return "is not a finite number"
        else:
            return "is not an integer" if self.type == "int" else "is not a number"
        if (self.minimum is not None and value < self.minimum) or (
            self.maximum is not None and value > self.maximum
        ):
            return f"is outside {self.minimum:g}..{self.maximum:g}"
        return None


def _unencodable(text: str) -> bool:
    """A lone surrogate: JSON's \\ud800 escape reads into a Python string that no database
    or page can encode (orjson refuses it; Python's json module, behind requests, does not)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


MIB = 1024 * 1024

# The vendors an agent names (``GpuReading.vendor``; absent means NVIDIA) and the health
# words it sends (``model.Health``). The portal keeps its choices in step (agents.choices).
VENDORS = frozenset({"nvidia", "ascend", "hygon", "amd", "metax", "moorethreads", "cambricon"})
HEALTH = frozenset({"ok", "warning", "unhealthy", "lost"})
HEALTH_DETAIL_MAX = 512

# Identity first, then the live readings; the order is the portal view's key order.
GPU_FIELDS: tuple[Field, ...] = (
    Field("index", "int", minimum=0, maximum=INT16_MAX, required=True),
    Field("uuid", "text", max_length=64, required=True),
    Field("name", "text", max_length=128),
    Field("pci_bus_id", "text", max_length=32),
    Field("serial", "text", max_length=64),
    Field("memory_total_mib", "int", "MiB", 0, INT32_MAX),
    Field(
        "memory_used_mib", "int", "MiB", 0, INT32_MAX, live=True,
        history=History("memory_used", "_mib", across_cards="sum"),
        dcgm=(Dcgm("DCGM_FI_DEV_FB_USED_BYTES", 1 / MIB), Dcgm("DCGM_FI_DEV_FB_USED")),
    ),
    Field(
        "utilization_gpu_pct", "int", "%", 0, 100, live=True, history=History("util"),
        dcgm=(Dcgm("DCGM_FI_DEV_GPU_UTIL_RATIO", 100.0), Dcgm("DCGM_FI_DEV_GPU_UTIL")),
    ),
    Field(
        "utilization_memory_pct", "int", "%", 0, 100, live=True,
        dcgm=(Dcgm("DCGM_FI_DEV_MEMORY_UTIL_RATIO", 100.0), Dcgm("DCGM_FI_DEV_MEM_COPY_UTIL")),
    ),
    Field(
        "temperature_c", "int", "°C", -273, 1000, live=True,
        history=History("temperature", "_c"),
        dcgm=(Dcgm("DCGM_FI_DEV_GPU_TEMP_CELSIUS"), Dcgm("DCGM_FI_DEV_GPU_TEMP")),
    ),
    Field(
        "power_w", "number", "W", 0, 1e6, live=True,
        history=History("power", "_w", across_cards="sum"),
        dcgm=(Dcgm("DCGM_FI_DEV_BOARD_POWER_WATTS"), Dcgm("DCGM_FI_DEV_POWER_USAGE")),
    ),
    Field("power_limit_w", "number", "W", 0, 1e6, live=True),
    Field(
        "sm_clock_mhz", "int", "MHz", 0, 1e6, live=True,
        dcgm=(Dcgm("DCGM_FI_DEV_SM_CLOCK_HERTZ", 1e-6), Dcgm("DCGM_FI_DEV_SM_CLOCK")),
    ),
    Field("health", "text", max_length=16, choices=HEALTH, lenient=True),
    # Other vendors' cards (issue #25): who made the card, and why it is not ok in its
    # tool's words. Lenient: an unknown vendor or a detail too long drops that value alone.
    Field("vendor", "text", max_length=16, choices=VENDORS, lenient=True),
    Field("health_detail", "text", max_length=HEALTH_DETAIL_MAX, lenient=True),
    # Faults the pools cordon a card for: the last XID code (0: none since the agent
    # started) and the volatile uncorrectable ECC count; not shown live, not in history.
    Field("xid_last", "int", minimum=0, maximum=INT32_MAX),
    Field("ecc_uncorrected_total", "int", minimum=0, maximum=2**53),
)  # fmt: skip

# Per process: who runs it and what it holds, for the per-owner history.
PROCESS_FIELDS: tuple[Field, ...] = (
    Field("user", "text", max_length=64),
    Field(
        "memory_used_mib", "int", "MiB", 0, INT32_MAX,
        history=History("memory_used", "_mib", across_cards="sum"),
    ),
)  # fmt: skip

# The node's own keys, beside its cards. ``collected_at`` (the agent's clock, seconds since
# the epoch) reaches pages and pushes; the texts are stored in the node's columns, so their
# lengths are those columns' (agents.models.Node).
NODE_FIELDS: tuple[Field, ...] = (
    Field("hostname", "text", max_length=255),
    Field("driver_version", "text", max_length=64),
    Field("cuda_version", "text", max_length=32),
    Field("collected_at", "number", "s", 0, 1e11),
    Field("collect_duration_s", "number", "s", 0, 86400),
    # The desired state's generation the agent holds; absent when the portal never sent one.
    Field("desired_generation", "int", minimum=0, maximum=2**53),
)  # fmt: skip
# Under the node's ``agent`` object: which agent answered.
AGENT = "agent"
AGENT_FIELDS: tuple[Field, ...] = (
    Field("version", "text", max_length=64),
    Field("backend", "text", max_length=32),
)  # fmt: skip

# The agent's report on the portal's slices (gpu_agent/attribution.py): what each
# allocation's processes use, and the processes outside the rules. Both lists are absent
# until the portal sends a desired state; in the portal view since the pools issue.
ALLOCATIONS = "allocations"
VIOLATIONS = "violations"
MAX_ALLOCATIONS = 4096  # the agent's own cap on slices (desired.MAX_SLICES)
MAX_VIOLATIONS = 1024
ALLOCATION_FIELDS: tuple[Field, ...] = (
    Field("allocation_id", "text", max_length=128, required=True),
    Field("gpu_uuid", "text", max_length=96, required=True),
    Field("memory_limit_mib", "int", "MiB", 0, 16 * MIB, required=True),
    Field("compute_pct", "int", "%", 0, 100),
    Field("process_count", "int", minimum=0, maximum=INT32_MAX),
    Field("memory_used_mib", "int", "MiB", 0, 2**40),
)  # fmt: skip
VIOLATION_KINDS = frozenset({"unallocated", "over_memory", "wrong_gpu", "unlimited"})
VIOLATION_PIDS = "pids"
VIOLATION_FIELDS: tuple[Field, ...] = (
    Field("kind", "text", max_length=16, required=True),
    Field("gpu_uuid", "text", max_length=96),
    Field("user", "text", max_length=64),
    Field("allocation_id", "text", max_length=128),
    Field("memory_used_mib", "int", "MiB", 0, 2**40),
    Field("memory_limit_mib", "int", "MiB", 0, 16 * MIB),
)  # fmt: skip
ALLOCATION_FIELD_NAMES = tuple(f.name for f in ALLOCATION_FIELDS)
VIOLATION_FIELD_NAMES = (*(f.name for f in VIOLATION_FIELDS), VIOLATION_PIDS)

GPU_FIELD_NAMES = tuple(f.name for f in GPU_FIELDS)
PROCESS_FIELD_NAMES = tuple(f.name for f in PROCESS_FIELDS)
LIVE_GPU_FIELDS = tuple(f.name for f in GPU_FIELDS if f.live)
HISTORY_GPU_FIELDS = tuple(f for f in GPU_FIELDS if f.history)
HISTORY_PROCESS_FIELDS = tuple(f for f in PROCESS_FIELDS if f.history)
# A card's processes are a list of objects under this key, beside the fields above.
PROCESSES = "processes"


class SnapshotError(ValueError):
    """The agent answered, but not with a snapshot the portal can use."""


_NUMBER_KINDS = {"int": frozenset({int}), "number": frozenset({int, float})}


@dataclass(frozen=True, slots=True)
class _Plan:
    """What the hot loop compares, per kind of field, with plain tuples."""

    required: tuple[str, ...]
    numbers: tuple[tuple[str, frozenset, float, float], ...]
    texts: tuple[tuple[str, int], ...]
    fields: dict[str, Field]
    lenient: tuple[Field, ...] = ()


def _plan(fields: tuple[Field, ...]) -> _Plan:
    inf = float("inf")
    return _Plan(
        required=tuple(f.name for f in fields if f.required),
        numbers=tuple(
            (f.name, _NUMBER_KINDS[f.type],
             -inf if f.minimum is None else f.minimum, inf if f.maximum is None else f.maximum)
            for f in fields if f.type != "text" and not f.lenient
        ),
        texts=tuple(
            (f.name, f.max_length or INT32_MAX)
            for f in fields if f.type == "text" and not f.lenient
        ),
        fields={f.name: f for f in fields},
        lenient=tuple(f for f in fields if f.lenient),
    )  # fmt: skip


def _drop_lenient(item: dict, plan: _Plan) -> None:
    """Remove the lenient fields whose values are not readings of them (in place)."""
    for f in plan.lenient:
        if item.get(f.name) is not None and f.check(item[f.name]) is not None:
            del item[f.name]


_GPU_PLAN = _plan(GPU_FIELDS)
_PROCESS_PLAN = _plan(PROCESS_FIELDS)
_NODE_PLAN = _plan(NODE_FIELDS)
_AGENT_PLAN = _plan(AGENT_FIELDS)
_ALLOCATION_PLAN = _plan(ALLOCATION_FIELDS)
_VIOLATION_PLAN = _plan(VIOLATION_FIELDS)
_uuid_of = itemgetter("uuid")
# At most this many processes a card: a real card runs tens, not thousands.
MAX_PROCESSES = 1024


def _first_problem(item: dict, plan: _Plan) -> tuple[str, str] | None:
    """The first field of ``item`` that is not a reading: (name, why). The portal checks
    every card of every cycle, so this compares types and bounds inline and asks the
    field for the words only when something is wrong."""
    get = item.get
    for name in plan.required:
        if get(name) is None:
            return name, "is missing"
    for name, kinds, low, high in plan.numbers:
        value = get(name)
        # NaN fails both comparisons; bool is not a reading (its type is not int).
        if value is not None and (type(value) not in kinds or not low <= value <= high):
            return name, plan.fields[name].check(value) or "is not valid"
    for name, length in plan.texts:
        value = get(name)
        if value is not None and (
            type(value) is not str
            or len(value) > length
            or "\x00" in value
            or (not value.isascii() and _unencodable(value))
        ):
            return name, plan.fields[name].check(value) or "is not valid"
    return None


def check_snapshot(data: Any, max_gpus: int | None = None) -> dict[str, Any]:
    """Check a snapshot against the schema; returns it, or raises ``SnapshotError`` naming
    the node's field, or the card and its field, at fault. Fields the schema does not
    declare are not looked at. More than ``max_gpus`` cards refuses the whole answer.
    """
    if type(data) is not dict:
        raise SnapshotError("snapshot is not a JSON object")
    if (problem := _first_problem(data, _NODE_PLAN)) is not None:
        raise SnapshotError(f"node '{problem[0]}' {problem[1]}")
    agent = data.get(AGENT)
    if agent is not None:
        if type(agent) is not dict:
            raise SnapshotError(f"node '{AGENT}' is not an object")
        if (problem := _first_problem(agent, _AGENT_PLAN)) is not None:
            raise SnapshotError(f"node '{AGENT}.{problem[0]}' {problem[1]}")
    gpus = data.get("gpus")
    if type(gpus) is not list:
        raise SnapshotError("snapshot has no 'gpus' list")
    if max_gpus is not None and len(gpus) > max_gpus:
        raise SnapshotError(f"snapshot lists {len(gpus)} GPUs, more than {max_gpus}")
    for position, gpu in enumerate(gpus):
        if type(gpu) is not dict:
            raise SnapshotError(f"GPU entry {position} is not an object")
        if (problem := _first_problem(gpu, _GPU_PLAN)) is not None:
            # Named by its UUID only when that is a fit one: the message is stored and shown.
            uuid = gpu.get("uuid")
            named = problem[0] != "uuid" and _GPU_PLAN.fields["uuid"].check(uuid) is None
            raise SnapshotError(
                f"GPU {uuid if named else f'entry {position}'}: '{problem[0]}' {problem[1]}"
            )
        _drop_lenient(gpu, _GPU_PLAN)
        processes = gpu.get(PROCESSES)
        if processes is None:
            continue
        if type(processes) is not list or len(processes) > MAX_PROCESSES:
            raise SnapshotError(
                f"GPU {gpu['uuid']}: '{PROCESSES}' is not a list of at most "
                f"{MAX_PROCESSES} processes"
            )
        for process in processes:
            if type(process) is not dict:
                raise SnapshotError(f"GPU {gpu['uuid']}: a process is not an object")
            if (problem := _first_problem(process, _PROCESS_PLAN)) is not None:
                raise SnapshotError(f"GPU {gpu['uuid']}: process '{problem[0]}' {problem[1]}")
    # A UUID is a card's identity: listed twice, one of the two readings would be lost.
    if len(set(map(_uuid_of, gpus))) != len(gpus):
        raise SnapshotError("snapshot lists a GPU UUID more than once")
    if data.get(ALLOCATIONS) is not None or data.get(VIOLATIONS) is not None:
        _check_report(data)
    return data


def _check_items(data: dict, key: str, plan: _Plan, most: int) -> list:
    items = data.get(key)
    if items is None:
        return []
    if type(items) is not list or len(items) > most:
        raise SnapshotError(f"node '{key}' is not a list of at most {most} entries")
    for position, item in enumerate(items):
        if type(item) is not dict:
            raise SnapshotError(f"{key}[{position}] is not an object")
        if (problem := _first_problem(item, plan)) is not None:
            raise SnapshotError(f"{key}[{position}]: '{problem[0]}' {problem[1]}")
    return items


# A kind a newer agent reports and this portal does not know yet: dropped, not refused, so
# an agent upgraded before its portal keeps its node's readings (docs/agent.md).
_KIND = re.compile(r"^[a-z][a-z_]{0,15}$")


def _check_report(data: dict) -> None:
    """The agent's slices report: bounded lists of declared, typed entries, each
    allocation once, violations of known kinds naming at most MAX_PROCESSES pids."""
    allocations = _check_items(data, ALLOCATIONS, _ALLOCATION_PLAN, MAX_ALLOCATIONS)
    if len({a["allocation_id"] for a in allocations}) != len(allocations):
        raise SnapshotError(f"node '{ALLOCATIONS}' lists an allocation more than once")
    violations = _check_items(data, VIOLATIONS, _VIOLATION_PLAN, MAX_VIOLATIONS)
    for position, item in enumerate(violations):
        if item["kind"] not in VIOLATION_KINDS and not _KIND.match(item["kind"]):
            raise SnapshotError(f"{VIOLATIONS}[{position}]: 'kind' is not a kind's name")
        pids = item.get(VIOLATION_PIDS)
        if pids is not None and (
            type(pids) is not list
            or len(pids) > MAX_PROCESSES
            or any(type(p) is not int or not 0 <= p <= INT32_MAX for p in pids)
        ):
            raise SnapshotError(
                f"{VIOLATIONS}[{position}]: '{VIOLATION_PIDS}' is not a list of at most "
                f"{MAX_PROCESSES} process ids"
            )
    if any(item["kind"] not in VIOLATION_KINDS for item in violations):
        data[VIOLATIONS] = [item for item in violations if item["kind"] in VIOLATION_KINDS]

"""Backends that run a vendor's management tool and map its output to the agent's model.

The tool is run as a subprocess, without a shell, with a timeout. A tool that exits
non-zero, hangs or prints what its parser cannot read never stops the agent: the cards it
last showed are reported ``lost`` with the tool's message in ``health_detail``; before any
successful read, ``collect`` raises and the collector keeps trying (``/healthz`` says so).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agents.gpu_agent.backends.base import BackendUnavailable
from agents.gpu_agent.backends.procinfo import ProcessInspector
from agents.gpu_agent.backends.smi import (
    amd_smi,
    cnmon,
    hy_smi,
    mthreads_gmi,
    mx_smi,
    npu_smi,
    rocm_smi,
)
from agents.gpu_agent.backends.smi.common import SmiCard, TableInfo
from agents.gpu_agent.model import GpuReading, NodeSnapshot, ProcessReading

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
MESSAGE_MAX_CHARS = 200
HEALTH_DETAIL_TTL_S = 60.0
# A stable name for a card whose tool prints no UUID (npu-smi, hy-smi's table): derived
# from the node and the card's bus id (or its tool index), so it survives restarts.
_UUID_NAMESPACE = uuid.UUID("5b0e3f2c-3c2b-4a57-9d5e-6a1f0c2e7d41")
# The flags gpustack runs on both DTK's hy-smi / rocm-smi and AMD's rocm-smi (the captures
# in shared/anchors were made with them): identity, VRAM, power, use, temperatures.
HYGON_JSON_FLAGS = (
    "--showid", "--showmeminfo", "vram", "--showpower", "--showserial", "--showuse",
    "--showtemp", "--showproductname", "--showuniqueid", "--json",
)  # fmt: skip
# AMD's rocm-smi also answers --showbus and --showmemuse (telegraf runs both).
ROCM_JSON_FLAGS = (*HYGON_JSON_FLAGS[:-1], "--showbus", "--showmemuse", "--json")


class ToolFailed(RuntimeError):
    """The tool exited non-zero, timed out, could not start, or printed nothing readable."""


def run_tool(argv: Sequence[str], timeout_s: float) -> str:
    try:
        done = subprocess.run(  # noqa: S603 - argv from this module, never a shell
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        raise ToolFailed(f"{argv[0]} did not answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise ToolFailed(f"{argv[0]} could not run: {exc}") from None
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        message = said[0] if said else "no output"
        raise ToolFailed(
            f"{argv[0]} exited with status {done.returncode}: {message[:MESSAGE_MAX_CHARS]}"
        )
    return done.stdout


@dataclass(frozen=True)
class Reading:
    cards: list[SmiCard]
    driver_version: str | None = None


class SmiBackend:
    """One vendor tool on this node; subclasses say which command and which parser."""

    name = "smi"
    vendor = ""
    tool = ""

    def __init__(
        self,
        hostname: str,
        executable: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
        inspector: ProcessInspector | None = None,
    ) -> None:
        path = executable or shutil.which(self.tool)
        if path is None:
            raise BackendUnavailable(
                f"{self.tool} is not on PATH: install the {self.vendor} driver tools, or "
                "choose another --backend"
            )
        self.hostname = hostname
        self.executable = path
        self.timeout_s = timeout_s
        self._clock = clock
        self._inspector = inspector or ProcessInspector()
        self._last: list[GpuReading] = []
        self._driver: str | None = None

    def run(self, *args: str) -> str:
        return run_tool([self.executable, *args], self.timeout_s)

    def read(self) -> Reading:
        raise NotImplementedError

    def collect(self) -> NodeSnapshot:
        started = self._clock()
        try:
            reading = self.read()
        except (ToolFailed, ValueError) as exc:
            return self._failed(str(exc), started)
        gpus = [self._gpu(i, card) for i, card in enumerate(reading.cards)]
        self._last = gpus
        self._driver = reading.driver_version or self._driver
        self._inspector.retain({p.pid for g in gpus for p in g.processes or ()})
        return NodeSnapshot(self.hostname, started, gpus, driver_version=self._driver)

    def _failed(self, message: str, started: float) -> NodeSnapshot:
        if not self._last:
            raise ToolFailed(message)
        log.warning("%s failed, reporting its cards lost: %s", self.tool, message)
        lost = [
            GpuReading(
                index=g.index,
                uuid=g.uuid,
                name=g.name,
                pci_bus_id=g.pci_bus_id,
                serial=g.serial,
                memory_total_mib=g.memory_total_mib,
                health="lost",
                vendor=g.vendor,
                health_detail=message[:MESSAGE_MAX_CHARS],
            )
            for g in self._last
        ]
        return NodeSnapshot(self.hostname, started, lost, driver_version=self._driver)

    def _uuid(self, card: SmiCard) -> str:
        if card.uuid:
            return card.uuid
        where = card.pci_bus_id or f"{card.index}:{card.chip or 0}"
        return f"{card.vendor}-{uuid.uuid5(_UUID_NAMESPACE, f'{self.hostname}/{where}')}"

    def _gpu(self, index: int, card: SmiCard) -> GpuReading:
        health, detail = _health(card.health)
        processes = None
        if card.processes is not None:
            processes = []
            for proc in card.processes:
                info = self._inspector.info(proc.pid)
                processes.append(
                    ProcessReading(
                        pid=proc.pid,
                        memory_used_mib=proc.memory_used_mib,
                        user=info.user,
                        uid=info.uid,
                        command=info.command or proc.name,
                        allocation_env=info.allocation_env,
                    )
                )
        free = None
        if card.memory_total_mib is not None and card.memory_used_mib is not None:
            free = max(0, card.memory_total_mib - card.memory_used_mib)
        return GpuReading(
            index=index,
            uuid=self._uuid(card),
            name=card.name,
            pci_bus_id=card.pci_bus_id,
            serial=card.serial,
            memory_total_mib=card.memory_total_mib,
            memory_used_mib=card.memory_used_mib,
            memory_free_mib=free,
            utilization_gpu_pct=card.utilization_gpu_pct,
            utilization_memory_pct=card.utilization_memory_pct,
            temperature_c=card.temperature_c,
            memory_temperature_c=card.memory_temperature_c,
            power_w=card.power_w,
            power_limit_w=card.power_limit_w,
            sm_clock_mhz=card.sm_clock_mhz,
            mem_clock_mhz=card.mem_clock_mhz,
            fan_speed_pct=card.fan_speed_pct,
            pcie_replay_total=card.pcie_replay_total,
            health=health,
            health_detail=detail,
            processes=processes,
            vendor=card.vendor,
            vendor_readings=dict(card.extra) or None,
        )

    def close(self) -> None:
        """Nothing held between runs of the tool."""


def _health(word: str | None) -> tuple[str, str | None]:
    """The model's health for a tool's word; the word (with any detail after ``:``) kept."""
    if word is None or word.lower() in ("ok", "normal", "healthy"):
        return "ok", None
    if word.split(":", 1)[0].strip().lower() in ("warning", "warn"):
        return "warning", word
    return "unhealthy", word


class AscendBackend(SmiBackend):
    """``npu-smi info``: every chip, its HBM (or DDR on 310s), AI core %, power, health and
    processes, in one run."""

    name = "npu-smi"
    vendor = "ascend"
    tool = "npu-smi"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._health_cache: dict[tuple[int, int, str], tuple[str, float]] = {}

    def read(self) -> Reading:
        info = npu_smi.parse_info(self.run("info"))
        if not info.cards:
            raise ToolFailed("npu-smi info printed no NPU table")
        now = self._clock()
        for card in info.cards:
            if card.health and card.health.lower() != "ok":
                # One more tool run per such chip; kept a while, the agent collecting every
                # second and a chip's alarm rarely changing faster.
                key = (card.index, card.chip or 0, card.health)
                cached = self._health_cache.get(key)
                if cached is None or now - cached[1] > HEALTH_DETAIL_TTL_S:
                    cached = self._health_cache[key] = (self._health_detail(card), now)
                card.health = cached[0]
        return Reading(info.cards, info.version)

    def _health_detail(self, card: SmiCard) -> str:
        """A chip the table shows not OK: its status with the error codes and text from
        ``npu-smi info -i N -c C -t health`` (one more run, only for such chips); the
        table's word alone when that run fails."""
        word = card.health or ""
        try:
            output = self.run(
                "info", "-i", str(card.index), "-c", str(card.chip or 0), "-t", "health"
            )
        except ToolFailed as exc:
            log.debug("npu-smi health of NPU %s chip %s: %s", card.index, card.chip, exc)
            return word
        health = npu_smi.parse_health(output)
        if health is None or health.status is None:
            return word
        parts = [health.status]
        if health.error_codes:
            parts.append(" ".join(health.error_codes))
        if health.information:
            parts.append(health.information)
        return ": ".join(parts)


class HygonBackend(SmiBackend):
    """``hy-smi --json`` with rocm-smi's flags (identity, VRAM MiB, power, use, temps); the
    plain table (no MiB, no names) where that fails. DTK's ``rocm-smi`` answers the same."""

    name = "hy-smi"
    vendor = "hygon"
    tool = "hy-smi"

    def read(self) -> Reading:
        try:
            cards = rocm_smi.parse_json(self.run(*HYGON_JSON_FLAGS))
        except (ToolFailed, ValueError) as exc:
            log.debug("%s --json failed (%s); reading its table", self.tool, exc)
            cards = hy_smi.parse_table(self.run())
        if not cards:
            raise ToolFailed(f"{self.tool} showed no DCU")
        for card in cards:
            card.vendor = self.vendor
        return Reading(cards)


class RocmBackend(SmiBackend):
    """``rocm-smi --json``: AMD's, or DTK's on a Hygon node (each card says its vendor)."""

    name = "rocm-smi"
    vendor = "amd"
    tool = "rocm-smi"

    def read(self) -> Reading:
        cards = rocm_smi.parse_json(self.run(*ROCM_JSON_FLAGS))
        if not cards:
            raise ToolFailed("rocm-smi --json showed no card")
        return Reading(cards)


class AmdSmiBackend(SmiBackend):
    """AMD ``amd-smi metric --json`` (usage, power, VRAM, temperatures)."""

    name = "amd-smi"
    vendor = "amd"
    tool = "amd-smi"

    def read(self) -> Reading:
        cards = amd_smi.parse_json(self.run("metric", "--json"))
        if not cards:
            raise ToolFailed("amd-smi metric --json showed no GPU")
        return Reading(cards)


class _TableBackend(SmiBackend):
    """A tool whose default table is the whole reading (mx-smi, mthreads-gmi, cnmon)."""

    parse: Callable[[str], TableInfo]

    def read(self) -> Reading:
        info = type(self).parse(self.run())
        if not info.cards:
            raise ToolFailed(f"{self.tool} printed no device table")
        return Reading(info.cards, info.driver_version)


class MetaxBackend(_TableBackend):
    name = "mx-smi"
    vendor = "metax"
    tool = "mx-smi"
    parse = staticmethod(mx_smi.parse)


class MooreThreadsBackend(_TableBackend):
    name = "mthreads-gmi"
    vendor = "moorethreads"
    tool = "mthreads-gmi"
    parse = staticmethod(mthreads_gmi.parse)


class CambriconBackend(_TableBackend):
    name = "cnmon"
    vendor = "cambricon"
    tool = "cnmon"
    parse = staticmethod(cnmon.parse)


BACKENDS: dict[str, type[SmiBackend]] = {
    "npu-smi": AscendBackend,
    "hy-smi": HygonBackend,
    "rocm-smi": RocmBackend,
    "amd-smi": AmdSmiBackend,
    "mx-smi": MetaxBackend,
    "mthreads-gmi": MooreThreadsBackend,
    "cnmon": CambriconBackend,
}

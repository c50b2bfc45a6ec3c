"""What every backend promises, so vendors other than NVIDIA can be added later.

A backend (NVML today; Ascend, Hygon DCU or Cambricon tomorrow) turns one vendor's
management library into :class:`~agents.gpu_agent.model.NodeSnapshot` objects.

Contract for ``collect()``:

* It is called from a single collector thread, every ``--interval`` seconds; it
  never runs concurrently with itself, and HTTP handlers never call it.
* It returns a fresh ``NodeSnapshot`` with ``hostname``, ``collected_at`` (Unix
  seconds, float) and one ``GpuReading`` per device, ``index`` counting from 0.
* Units are the ones in the field names: MiB for memory, percent (0-100, int)
  for utilization, degrees Celsius, watts (float) for power and the enforced
  power limit, MHz for clocks, millijoules (monotonic counter) for energy.
* A field the device or driver cannot report is left ``None``: never 0.
* A device that stopped answering is reported with ``health="lost"`` and only
  the identity fields it still knows, so the portal can flag it instead of
  silently dropping it.
* It may raise for node-wide failures; the collector logs, keeps the previous
  snapshot and tries again next period (``/healthz`` turns 503 when stale).

``close()`` releases the vendor library; it is called once on shutdown.
Constructors raise :class:`BackendUnavailable` when the library or driver is
missing, with a message a person can act on.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agents.gpu_agent.model import NodeSnapshot


class BackendUnavailable(RuntimeError):
    """The vendor library or driver is missing; the agent cannot start with this backend."""


@runtime_checkable
class Backend(Protocol):
    name: str  # short identifier reported as agent.backend ("sim", "nvml", ...)
    hostname: str

    def collect(self) -> NodeSnapshot: ...

    def close(self) -> None: ...

"""XID errors from NVML's event set, read without ever blocking the collector.

``nvmlEventSetWait`` with a zero timeout returns at once (``NVML_ERROR_TIMEOUT``
when nothing is queued), so each collection drains what arrived since the last
one; a dedicated waiting thread would only add a lock for the same result.
"""

from __future__ import annotations

import logging
from typing import Any

from agents.gpu_agent.backends.xid import FATAL_XIDS, XidTally

log = logging.getLogger(__name__)

# Enough for a burst; anything beyond stays queued in the driver for the next pass.
MAX_EVENTS_PER_POLL = 256


class XidWatcher:
    def __init__(self, nv: Any) -> None:
        self._nv = nv
        self.tally = XidTally()
        self._registered: set[int] = set()
        self._tried: set[int] = set()
        self._fatal: set[int] = set()
        self._set: Any = None
        try:
            self._set = nv.nvmlEventSetCreate()
        except nv.NVMLError as exc:
            log.warning("XID events unavailable: %s", exc)

    def registered(self, index: int) -> bool:
        return index in self._registered

    def fatal(self, index: int) -> bool:
        """The card reported an XID after which it no longer answers."""
        return index in self._fatal

    def _register(self, index: int, handle: Any) -> None:
        # Cards can come and go (handles appear after a reset), so try each index once.
        nv = self._nv
        self._tried.add(index)
        try:
            supported = nv.nvmlDeviceGetSupportedEventTypes(handle)
            if not supported & nv.nvmlEventTypeXidCriticalError:
                return
            nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, self._set)
            self._registered.add(index)
        except nv.NVMLError as exc:
            if exc.value != nv.NVML_ERROR_NOT_SUPPORTED:
                log.warning("GPU %d: cannot watch XID events: %s", index, exc)

    def poll(self, handles: list[Any], now: float) -> None:
        if self._set is None:
            return
        nv = self._nv
        for index, handle in enumerate(handles):
            if handle is not None and index not in self._tried:
                self._register(index, handle)
        for _ in range(MAX_EVENTS_PER_POLL):
            try:
                event = nv.nvmlEventSetWait_v2(self._set, 0)
            except nv.NVMLError as exc:
                if exc.value != nv.NVML_ERROR_TIMEOUT:
                    log.debug("XID event read failed: %s", exc)
                return
            if event.eventType != nv.nvmlEventTypeXidCriticalError:
                continue
            try:
                index = nv.nvmlDeviceGetIndex(event.device)
            except nv.NVMLError:
                continue
            xid = int(event.eventData)
            self.tally.record(index, xid, now)
            log.error("GPU %d: XID %d", index, xid)
            if xid in FATAL_XIDS:
                self._fatal.add(index)

    def close(self) -> None:
        if self._set is not None:
            try:
                self._nv.nvmlEventSetFree(self._set)
            except self._nv.NVMLError as exc:
                log.debug("nvmlEventSetFree failed: %s", exc)

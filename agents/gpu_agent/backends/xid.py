"""XID errors: the driver's numbered fault reports, tallied per card and code.

A last-value gauge (dcgm-exporter's ``DCGM_FI_DEV_XID_ERRORS``) hides a repeat of
the same XID, so the agent also keeps a count and a last-seen time per code.
Shared by the NVML backend (events) and the simulator (scenario events).
"""

from __future__ import annotations

from agents.gpu_agent.model import XidCount

# err_msg labels for the XIDs operators meet most, from NVIDIA's XID catalogue.
XID_MESSAGES: dict[int, str] = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
}
# XIDs after which the card no longer answers: report it lost at once.
FATAL_XIDS = frozenset({79})


def xid_message(xid: int) -> str:
    return XID_MESSAGES.get(xid, "Unknown Error")


class XidTally:
    """Counts per (card, code); ``last`` is the most recent code per card, 0 for none."""

    def __init__(self) -> None:
        self._counts: dict[int, dict[int, XidCount]] = {}
        self._last: dict[int, int] = {}

    def record(self, gpu_index: int, xid: int, at: float) -> None:
        per_gpu = self._counts.setdefault(gpu_index, {})
        entry = per_gpu.get(xid)
        if entry is None:
            per_gpu[xid] = XidCount(xid, 1, at)
        else:
            entry.count += 1
            entry.last_seen_at = at
        self._last[gpu_index] = xid

    def last(self, gpu_index: int) -> int:
        return self._last.get(gpu_index, 0)

    def counts(self, gpu_index: int) -> list[XidCount]:
        per_gpu = self._counts.get(gpu_index)
        if not per_gpu:
            return []  # most cards, most of the time: no sorting, no closure
        # Copies: the published snapshot must not change under a reader.
        return [
            XidCount(c.xid, c.count, c.last_seen_at)
            for c in sorted(per_gpu.values(), key=lambda c: c.xid)
        ]

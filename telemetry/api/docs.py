"""Examples the API documentation shows of the fleet's answers: a card with its latest
reading, and a history (the serializers alone would show made-up keys for these)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample

_UUID = "GPU-5fd4a1c2-0b3e-4f7a-9c1d-2e8b6a7f0c11"

GPU_EXAMPLES = [
    OpenApiExample(
        "An A100 at work", response_only=True,
        value={
            "id": 12, "node": "gpu-node-07", "index": 0, "uuid": _UUID,
            "model": "NVIDIA A100-SXM4-80GB", "vendor": "nvidia", "memory_total_mib": 81920,
            "pci_bus_id": "00000000:17:00.0", "serial": "1564720012345", "health": "ok",
            "health_detail": "", "mig_mode": False, "last_seen": "2026-12-01T09:30:05Z",
            "latest": {"memory_used_mib": 6100, "utilization_gpu_pct": 41,
                       "utilization_memory_pct": 18, "temperature_c": 54, "power_w": 182.5,
                       "power_limit_w": 400.0, "sm_clock_mhz": 1410},
        },
    ),
    OpenApiExample(
        "An Ascend NPU in alarm", response_only=True,
        value={
            "id": 40, "node": "npu-node-01", "index": 3,
            "uuid": "ascend-5f0c2a3e-8d1b-5b7e-9a4c-2e6f1d0b7c11", "model": "Ascend 910B2C",
            "vendor": "ascend", "memory_total_mib": 65536, "pci_bus_id": "0000:C2:00.0",
            "serial": "", "health": "unhealthy",
            "health_detail": "Alarm: 8C03A000: ascend_monitor adda heart beat lost error",
            "mig_mode": False, "last_seen": "2026-12-01T09:30:05Z",
            "latest": {"memory_used_mib": 3398, "utilization_gpu_pct": 0, "temperature_c": 46,
                       "power_w": 93.4},
        },
    ),
]  # fmt: skip


def _point(t: str, gpus: int, util: float, memory: float) -> dict:
    return {
        "t": t, "gpus": gpus, "util_avg": util, "util_max": util + 12,
        "memory_used_avg_mib": memory, "memory_used_max_mib": memory + 512,
        "temperature_avg_c": 54.0, "temperature_max_c": 58.0,
        "power_avg_w": 182.5 * gpus, "power_max_w": 240.0 * gpus,
    }  # fmt: skip


def _history(gpus: int) -> dict:
    return {
        "range": "1h", "resolution": "1m",
        "start": "2026-12-01T08:30:00+00:00", "end": "2026-12-01T09:30:00+00:00",
        "points": [_point("2026-12-01T09:28:00+00:00", gpus, 40.0, 6000.0 * gpus),
                   _point("2026-12-01T09:29:00+00:00", gpus, 42.5, 6100.0 * gpus)],
        "owners": [{"owner": "ci", "memory_used_avg_mib": 6000.0,
                    "memory_used_max_mib": 6400.0, "samples": 24}],
    }  # fmt: skip


GPU_HISTORY_EXAMPLES = [
    OpenApiExample("The last hour of one card", value=_history(1), response_only=True,
                   status_codes=["200"]),
]  # fmt: skip
NODE_HISTORY_EXAMPLES = [
    OpenApiExample("The last hour of a node's two cards", value=_history(2), response_only=True,
                   status_codes=["200"]),
]  # fmt: skip

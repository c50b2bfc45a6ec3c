"""Examples the API documentation shows of the reports' answers: the month's accounting
(an untyped answer) and a row of the idle report."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample


def _line(tenant: str, user: str, pool: str) -> dict:
    return {
        "tenant": tenant, "user": user, "pool": pool, "gpu_hours": 6.0,
        "compute_pct_hours": 600.0, "memory_gib_hours": 432.0, "used_gpu_hours": 2.0,
        "used_memory_gib_hours": 4.0, "idle_gpu_hours": 2.5, "cost": 12.0, "idle_cost": 5.0,
    }  # fmt: skip


# One row of the idle report, as the list and the accounting's advice give it.
_IDLE_ROW = {
    "allocation": 97, "lease": 51, "tenant": "vision", "pool": "a100-training",
    "node": "gpu-node-07", "gpu": 0, "owner": "ci-bot", "unix_user": "ci", "idle": True,
    "idle_since": "2026-12-01T06:10:00+00:00", "idle_hours": 3.2, "wasted_gpu_hours": 0.96,
    "compute_pct": 30, "memory_mib": 8192, "p95_util_pct": 3.0, "p95_memory_mib": 900,
    "over_provisioned": True, "advice_compute_pct": 10, "advice_memory_mib": 2048,
    "warned": False, "exempt_until": "",
}  # fmt: skip

ACCOUNTING_EXAMPLES = [
    OpenApiExample(
        "October for one tenant", response_only=True, status_codes=["200"],
        value={
            "month": "2026-10", "currency": "CNY",
            "days": [
                {"day": "2026-10-01", "gpu_hours": 0.0, "used_gpu_hours": 0.0,
                 "idle_gpu_hours": 0.0},
                {"day": "2026-10-02", "gpu_hours": 6.0, "used_gpu_hours": 2.0,
                 "idle_gpu_hours": 2.5},
            ],
            "lines": [_line("vision", "ci-bot", "a100-training")],
            "tenants": [_line("vision", "", "")],
            "pools": [_line("", "", "a100-training")],
            "total": _line("", "", ""),
            "queue_waits": [{"pool": "A100 training", "tenant": "vision", "requests": 14,
                             "avg_minutes": 3.5, "max_minutes": 21.0}],
            "advice": [_IDLE_ROW],
        },
    ),
]  # fmt: skip

IDLE_EXAMPLES = [
    OpenApiExample(
        "Idle for three hours, and too big", response_only=True,
        value={**_IDLE_ROW, "sparkline": [12.0, 4.0, 0.0, 0.0, None, 0.0],
               "scanned_at": "2026-12-01T09:25:00Z", "coverage": 0.98},
    ),
]  # fmt: skip

# Bodies a caller can send as they are (lease 1: the vGPUs of GPU request 1).
EXEMPTION_EXAMPLES = [
    OpenApiExample("Spare a training run until the end of January", request_only=True,
                   value={"lease": 1, "reason": "Long training run, checkpoints hourly.",
                          "ends_at": "2027-01-31T18:00:00Z"}),
]  # fmt: skip
APPEAL_EXAMPLES = [
    OpenApiExample("It is working", request_only=True,
                   value={"reason": "Data loading for tomorrow's run; the GPUs start at 06:00."}),
]  # fmt: skip
APPEAL_DECISION_EXAMPLES = [
    OpenApiExample("Granted for a week", request_only=True,
                   value={"grant": True, "comment": "Fine until the run ends.",
                          "until": "2027-01-15T00:00:00Z"}),
]  # fmt: skip

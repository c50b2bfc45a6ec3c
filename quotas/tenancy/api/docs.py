"""Bodies the API documentation shows for the tenancy's writes, as a caller sends them:
a CI engineer's starting point, and schemathesis' valid creates for its stateful phase
(tests/test_api_schemathesis.py). The ids are those of the other examples: tenant 1,
pool 1."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample

TENANT_EXAMPLES = [
    OpenApiExample(
        "A team and its first admin", request_only=True,
        value={"name": "Speech", "slug": "speech",
               "description": "Speech recognition: training and evaluation.", "admin": "lee"},
    ),
]  # fmt: skip

MEMBERSHIP_EXAMPLES = [
    OpenApiExample("Lee joins tenant 1 as a member", request_only=True,
                   value={"tenant": 1, "username": "lee", "role": "member"}),
]  # fmt: skip

QUOTA_EXAMPLES = [
    OpenApiExample(
        "Four vGPUs guaranteed, eight at most; small asks approved at once", request_only=True,
        value={"tenant": 2, "pool": 1, "guaranteed_vgpus": 4, "limit_vgpus": 8,
               "guaranteed_compute_pct": 200, "limit_compute_pct": 400,
               "guaranteed_memory_mib": 163840, "limit_memory_mib": 327680,
               "guaranteed_gpu_hours": 500, "limit_gpu_hours": 1000, "budget_period": "month",
               "user_limit_vgpus": 2, "user_limit_compute_pct": None,
               "user_limit_memory_mib": None, "auto_approve_vgpus": 1,
               "auto_approve_compute_pct": 50, "auto_approve_hours": 8,
               "escalate_after_hours": 24, "expire_pending_after_hours": 72},
    ),
]  # fmt: skip

USER_EXAMPLES = [
    OpenApiExample("A new colleague", request_only=True,
                   value={"username": "mei", "first_name": "Mei", "last_name": "Chen",
                          "email": "mei@example.com"}),
]  # fmt: skip

"""What the schema shows of GPU requests beyond the serializers: the wait parameter and
examples of a request asked for and read."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter

from quotas.requests.api.wait import MAX_WAIT_SECONDS

WAIT_PARAMETER = OpenApiParameter(
    "wait",
    OpenApiTypes.INT,
    OpenApiParameter.QUERY,
    description=(
        f"Seconds (0 to {MAX_WAIT_SECONDS}) to wait while the request is pending or approved. "
        "The answer comes as soon as it is placed, rejected, cancelled, expired or released, "
        "or when the time is up, with the state it then has. 0 or absent: answer at once."
    ),
)

_ASKED = {
    "tenant": 1, "pool": 1, "count": 1, "compute_pct": 30, "memory_mib": 8192,
    "gpu_model": "NVIDIA A100-SXM4-80GB", "duration_hours": 4,
    "reason": "CI job 4711: integration tests",
}  # fmt: skip

_PLACED = {
    "id": 42, "tenant": 1, "pool": 1, "requester": "ci-bot", "count": 1,
    "whole_card": False, "compute_pct": 30, "memory_mib": 8192,
    "gpu_model": "NVIDIA A100-SXM4-80GB",
    "node_name": "", "node_labels": {}, "same_node": False, "duration_hours": 4,
    "reason": "CI job 4711: integration tests", "priority": 0, "state": "allocated",
    "queue_position": None, "borrowed": False, "decided_by": None,
    "decided_at": "2026-12-01T09:00:01Z", "decision_comment": "", "escalated_at": None,
    "queued_at": None, "placed_at": "2026-12-01T09:00:01Z",
    "expires_at": "2026-12-01T13:00:01Z", "ended_at": None, "extension_hours": None,
    "created": "2026-12-01T09:00:00Z",
    "allocations": [{
        "id": 97, "state": "active", "node": "gpu-node-07",
        "gpu_uuid": "GPU-5fd4a1c2-0b3e-4f7a-9c1d-2e8b6a7f0c11", "compute_pct": 30,
        "memory_mib": 8192, "whole_card": False, "placed_at": "2026-12-01T09:00:01Z",
        "released_at": None, "url": "/allocations/97/",
    }],
}  # fmt: skip

CREATE_EXAMPLES = [
    OpenApiExample("A 30 % slice of an A100 for four hours", value=_ASKED, request_only=True),
    OpenApiExample(
        "Approved automatically and placed",
        value=_PLACED,
        response_only=True,
        status_codes=["201"],
    ),
]

READ_EXAMPLES = [
    OpenApiExample("Placed", value=_PLACED, response_only=True, status_codes=["200"]),
    OpenApiExample(
        "Waiting for an approver",
        response_only=True,
        status_codes=["200"],
        value={
            **_PLACED,
            "state": "pending",
            "decided_at": None,
            "placed_at": None,
            "expires_at": None,
            "allocations": [],
        },
    ),
]

# Bodies of the steps, as a caller sends them.
COMMENT_EXAMPLES = [
    OpenApiExample("With a comment", value={"comment": "Within the team's plan for December."},
                   request_only=True),
]  # fmt: skip
EXTEND_EXAMPLES = [OpenApiExample("Two hours more", value={"hours": 2}, request_only=True)]
RESIZE_EXAMPLES = [
    OpenApiExample("Down to 20 % and 4 GiB", value={"compute_pct": 20, "memory_mib": 4096},
                   request_only=True),
]  # fmt: skip

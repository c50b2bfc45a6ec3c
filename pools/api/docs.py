"""What the API documentation tells its readers about each pool and allocation operation."""

from __future__ import annotations

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiExample

POOL_OPERATIONS: dict[str, Promise] = {
    "list": _(
        "The pools, by name, with their matching rules, oversubscription ratios, "
        "placement policy and number of cards. Every signed-in user reads them."
    ),
    "retrieve": _("One pool, as in the list."),
    "create": _(
        "Create a pool (pools.add_pool). With match_by_rules, the cards that match "
        "its rules and are in no pool join at once, and new ones as they are "
        "discovered. A 400 answer names each field that is wrong."
    ),
    "update": _(
        "Replace a pool's fields (pools.change_pool). Lowering a ratio below what "
        "is allocated on any card is refused with a 400 and changes nothing."
    ),
    "partial_update": _("Change only the fields given (pools.change_pool); ratios as for update."),
    "destroy": _("Delete a pool that never held a vGPU (pools.delete_pool); 409 otherwise."),
    "add_cards": _(
        "Put cards (GPU ids in gpus) into the pool by hand (pools.change_pool). "
        "All or nothing: a card in another pool refuses the change."
    ),
    "remove_cards": _(
        "Take cards out of the pool (pools.change_pool). All or nothing: a "
        "card holding vGPUs, or one the pool's rules would bring back, "
        "refuses the change."
    ),
    "cards": _("The pool's cards with their capacity and what is allocated on each."),
    "capacity": _(
        "The pool's capacity: physical, with oversubscription, allocated and used "
        "(latest readings); fragmentation; each card's slices (owners only for the "
        "vGPUs you may see); the cards at memory risk."
    ),
}

POOL_CARD_OPERATIONS: dict[str, Promise] = {
    "list": _("Cards in pools, with their capacity (ratios applied) and allocations."),
    "retrieve": _("One card of a pool, as in the list."),
}

ALLOCATION_OPERATIONS: dict[str, Promise] = {
    "list": _(
        "The vGPUs you may see: your own, and others' as your permissions and "
        "tenancies allow. Each carries how to use it: launch_env (the variables the "
        "node agent expects), export (the same for a shell) and kubernetes_limits "
        "(HAMi's resource limits)."
    ),
    "retrieve": _("One vGPU, as in the list; 404 when you may not see it."),
}

_UUID = "GPU-5fd4a1c2-0b3e-4f7a-9c1d-2e8b6a7f0c11"
_ENV = {
    "CUDA_VISIBLE_DEVICES": _UUID, "CUDA_DEVICE_MEMORY_LIMIT": "8192m",
    "CUDA_DEVICE_SM_LIMIT": "30", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8192M", "GPU_PORTAL_ALLOCATION": "alloc-97",
}  # fmt: skip

ALLOCATION_EXAMPLES = [
    OpenApiExample(
        "A 30 % slice of an A100, ready to use",
        response_only=True,
        status_codes=["200"],
        value={
            "id": 97,
            "agent_id": "alloc-97",
            "lease": 51,
            "pool": 1,
            "gpu": 12,
            "gpu_uuid": _UUID,
            "node": "gpu-node-07",
            "compute_pct": 30,
            "memory_mib": 8192,
            "whole_card": False,
            "state": "active",
            "stranded_reason": "",
            "agent_sync": "confirmed",
            "holder": "ci-bot",
            "label": "request 42",
            "unix_user": "ci",
            "created": "2026-12-01T09:00:01Z",
            "placed_at": "2026-12-01T09:00:01Z",
            "released_at": None,
            "launch_env": _ENV,
            "export": "\n".join(f"export {name}={value}" for name, value in _ENV.items()),
            "kubernetes_limits": {
                "nvidia.com/gpu": 1,
                "nvidia.com/gpumem": 8192,
                "nvidia.com/gpucores": 30,
            },
        },
    )
]

# Examples of the answers the serializers alone would show as made-up keys (property1,
# property2): label maps, the launch environment, the untyped answers.
_POOL_ASKED = {
    "name": "A100 training", "slug": "a100-training", "description": "Long CI and training runs.",
    "match_models": ["NVIDIA A100-SXM4-80GB"], "match_vendor": "nvidia",
    "match_labels": {"zone": "rack-3", "network": "infiniband"}, "match_by_rules": True,
    "compute_ratio": "1.50", "memory_ratio": "1.00", "policy": "binpack",
}  # fmt: skip
POOL_EXAMPLES = [
    OpenApiExample("Cards of one model on the InfiniBand racks", value=_POOL_ASKED,
                   request_only=True),
    OpenApiExample(
        "A pool of matched cards", response_only=True,
        value={"id": 1, **_POOL_ASKED, "card_count": 16, "created": "2026-11-20T08:00:00Z",
               "updated": "2026-12-01T10:30:00Z"},
    ),
]  # fmt: skip

# Every vGPU answer has this shape: the lists and the requests' answers as well.
ALLOCATION_SERIALIZER_EXAMPLES = [
    OpenApiExample(ALLOCATION_EXAMPLES[0].name, value=ALLOCATION_EXAMPLES[0].value,
                   response_only=True),
]  # fmt: skip

CARDS_CHANGED_EXAMPLES = [
    OpenApiExample("Cards 3 and 4", value={"gpus": [3, 4]}, request_only=True),
    OpenApiExample("Two cards changed", value={"changed": 2}, response_only=True,
                   status_codes=["200"]),
]  # fmt: skip

CAPACITY_EXAMPLES = [
    OpenApiExample(
        "One card with a 30 % slice", response_only=True, status_codes=["200"],
        value={
            "pool": {"id": 1, "name": "A100 training", "slug": "a100-training",
                     "policy": "binpack", "compute_ratio": "1.00", "memory_ratio": "1.00"},
            "totals": {"cards": 1, "compute_physical_pct": 100, "memory_physical_mib": 81920,
                       "compute_capacity_pct": 100, "memory_capacity_mib": 81920,
                       "compute_allocated_pct": 30, "memory_allocated_mib": 8192, "slices": 1},
            "fragmentation": {"max_free_compute_pct": 70, "max_free_memory_mib": 73728,
                              "free_cards": 0, "schedulable_cards": 1},
            "cards": [{
                "id": 12, "uuid": _UUID, "index": 0, "model": "NVIDIA A100-SXM4-80GB",
                "node_id": 7, "node": "gpu-node-07", "health": "ok", "node_state": "online",
                "schedulable": True, "cordoned": False, "added_by_hand": False,
                "memory_physical_mib": 81920, "compute_capacity": 100,
                "memory_capacity_mib": 81920, "compute_allocated": 30,
                "memory_allocated_mib": 8192, "slice_count": 1, "held_whole": False,
                "slices": [{"id": 97, "compute_pct": 30, "memory_mib": 8192,
                            "whole_card": False, "state": "active", "agent_sync": "confirmed",
                            "owner": "ci-bot", "url": "/allocations/97/"}],
            }],
            "stranded": [],
            "usage": {
                "cards": {"12": {"utilization_gpu_pct": 41.0, "memory_used_mib": 6100,
                                 "at_risk": False, "memory_oversubscribed": False}},
                "utilization_avg_pct": 41.0, "memory_used_mib": 6100, "reporting_cards": 1,
                "at_risk": [], "risk_ratio": 0.9, "risk_pct": 90,
            },
        },
    ),
]  # fmt: skip

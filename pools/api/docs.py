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

"""Answers the schema allows, for the cases it once did not (issue #27): a member's node
without the agent details, a platform event without a tenant, an allocation (and the
request's brief of it) whose node was deleted under it."""

from __future__ import annotations

from typing import Any

import pytest

from agents.models import Node
from quotas.choices import RequestState
from quotas.models import GpuRequest
from tests import clients
from tests.factories import EventFactory, gpu_team, held_allocation

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def components(django_db_setup, django_db_blocker) -> dict[str, dict]:
    with django_db_blocker.unblock():
        schema = clients.api().get("/api/schema/", {"format": "json"}).json()
    return schema["components"]["schemas"]


def _problems(components: dict, name: str, answer: dict[str, Any]) -> list[str]:
    """What in ``answer`` the ``name`` component does not allow: a required field left
    out, a null where the field is not nullable."""
    component = components[name]
    found = [f"{name}.{f} is required" for f in component.get("required", []) if f not in answer]
    for field, value in answer.items():
        spec = component["properties"].get(field, {})
        if value is None and not spec.get("nullable"):
            found.append(f"{name}.{field} is null")
    return found


def test_a_members_node_leaves_out_only_what_the_schema_does_not_require(components, bob):
    team = gpu_team("vision")
    node = team.cards[0].node
    answer = clients.api(team.dev).get(f"/api/v1/nodes/{node.pk}/").json()
    assert "agent_url" not in answer
    assert _problems(components, "Node", answer) == []


def test_a_platform_event_has_no_tenant_and_says_so(components, alice):
    event = EventFactory(tenant=None)
    answer = clients.api(alice).get(f"/api/v1/alert-events/{event.pk}/").json()
    assert answer["tenant"] is None
    assert _problems(components, "Event", answer) == []


def test_an_allocation_whose_node_was_deleted_is_all_nulls_the_schema_allows(components):
    team = gpu_team("vision")
    allocation = held_allocation(team.tenant, team.pool, team.dev, team.cards[0].node.created,
                                 gpu=team.cards[0])  # fmt: skip
    Node.objects.filter(pk=team.cards[0].node_id).delete()
    answer = clients.api(team.dev).get(f"/api/v1/allocations/{allocation.pk}/").json()
    assert answer["gpu"] is None and answer["node"] is None and answer["gpu_uuid"] is None
    assert _problems(components, "Allocation", answer) == []
    request = GpuRequest.objects.get(lease=allocation.lease)
    assert request.state == RequestState.ALLOCATED
    brief = clients.api(team.dev).get(f"/api/v1/gpu-requests/{request.pk}/").json()
    [embedded] = brief["allocations"]
    assert embedded["node"] is None and embedded["gpu_uuid"] is None
    assert _problems(components, "AllocationBrief", embedded) == []

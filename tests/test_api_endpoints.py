"""The REST endpoints, declared for the generic tests of tests/api.py: who reads, who writes."""

from __future__ import annotations

import pytest

from agents.models import GPU, Node
from tests import api
from tests.factories import GPUFactory, NodeFactory

pytestmark = pytest.mark.django_db


class TestNodeAPI(api.ReadTests, api.WriteTests):
    url = "/api/v1/nodes/"
    model = Node
    # Every member reads the fleet; writes take the node permissions, which carol holds
    # and dave, staff without them, does not.
    writers = ("alice", "carol")
    create_data = {
        "name": "gpu-new",
        "agent_url": "http://gpu-new:9400",
        "token": "tok-0123456789-new",
        "labels": {"rack": "r2"},
    }
    bad_create_data = {"name": "gpu-bad", "agent_url": "not a url"}
    update_data = {"state": "draining", "labels": {"rack": "r9"}}
    bad_update_data = {"labels": {"a b": 1}}

    @pytest.fixture
    def instance(self) -> Node:
        return NodeFactory(last_error="HTTP 500: the agent's own words")

    def secrets(self, instance: Node) -> list[str]:
        return [instance.agent_token, self.create_data["token"]]

    # Where agents live, their token hints and what they said: node managers only (any
    # node permission, view_node included; agents.permissions.can_see_agent_details).
    restricted_fields = ("agent_url", "token_hint", "last_error")
    restricted_readers = ("alice", "carol")

    def restricted_values(self, instance: Node) -> list[str]:
        return [instance.agent_url, instance.agent_token_hint, instance.last_error]


class TestGPUAPI(api.ReadTests, api.ReadOnlyTests):
    url = "/api/v1/gpus/"
    model = GPU

    @pytest.fixture
    def instance(self) -> GPU:
        return GPUFactory()

    def secrets(self, instance: GPU) -> list[str]:
        return [instance.node.agent_token]

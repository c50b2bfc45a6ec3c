"""The node and GPU lists filter by query parameters, declared in the schema, checked."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agents.models import GPU, Node
from tests import clients
from tests.api import error_fields

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(member_user) -> APIClient:
    client = clients.api(member_user)
    return client


@pytest.fixture
def nodes() -> None:
    Node.objects.create(name="rack1-a", agent_url="http://a:1", state="online",
                        labels={"rack": "r1", "zone": "east"})  # fmt: skip
    Node.objects.create(name="rack1-b", agent_url="http://b:1", state="draining",
                        labels={"rack": "r1"})  # fmt: skip
    Node.objects.create(name="rack2-a", agent_url="http://c:1", state="online",
                        labels={"rack": "r2"})  # fmt: skip
    Node.objects.create(name="prom-1", source="prometheus", state="offline")
    b = Node.objects.get(name="rack1-b")
    GPU.objects.create(node=b, index=0, uuid="GPU-b0", model="NVIDIA A100", health="ok")
    GPU.objects.create(node=b, index=1, uuid="GPU-b1", model="NVIDIA H100", health="lost")


def _names(api: APIClient, **params: str) -> list[str]:
    response = api.get("/api/v1/nodes/", params)
    assert response.status_code == 200, response.content
    return [node["name"] for node in response.json()["results"]]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"state": "online"}, ["rack1-a", "rack2-a"]),
        ({"state": "draining"}, ["rack1-b"]),
        ({"source": "prometheus"}, ["prom-1"]),
        ({"name": "RACK1"}, ["rack1-a", "rack1-b"]),
        ({"label": "zone"}, ["rack1-a"]),
        ({"label": "rack=r1"}, ["rack1-a", "rack1-b"]),
        ({"label": "rack=r1", "state": "online"}, ["rack1-a"]),
        ({"state": ""}, ["prom-1", "rack1-a", "rack1-b", "rack2-a"]),
    ],
)
def test_the_node_list_filters(api, nodes, params, expected):
    assert _names(api, **params) == expected


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"state": "broken"}, "state"),
        ({"source": "ssh"}, "source"),
        ({"label": "no spaces=x"}, "label"),
        ({"label": "=x"}, "label"),
        ({"label": "%"}, "label"),  # a % in the message once raised TypeError (a 500)
        ({"label": "50%"}, "label"),
        ({"limit": "9223372036854775808"}, "limit"),  # past bigint: PostgreSQL refused, a 500
        ({"limit": "-1"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"offset": "9223372036854775808"}, "offset"),
        ({"offset": "-5"}, "offset"),
    ],
)
def test_a_bad_node_filter_is_a_400_naming_the_parameter(api, nodes, params, field):
    response = api.get("/api/v1/nodes/", params)
    assert response.status_code == 400
    [message] = error_fields(response)[field]
    assert message  # a sentence, e.g. "Select a valid choice. broken is not one of ..."


def test_the_gpu_list_filters_and_refuses_an_unknown_health(api, nodes):
    def uuids(**params: str) -> list[str]:
        return [gpu["uuid"] for gpu in api.get("/api/v1/gpus/", params).json()["results"]]

    assert uuids(node="rack1-b") == ["GPU-b0", "GPU-b1"]
    assert uuids(health="lost") == ["GPU-b1"]
    assert uuids(model="NVIDIA A100") == ["GPU-b0"]
    assert uuids(node="nope") == []
    response = api.get("/api/v1/gpus/", {"health": "melted"})
    assert response.status_code == 400 and "health" in error_fields(response)


def _parameters(api: APIClient, path: str) -> dict[str, dict]:
    schema = api.get("/api/schema/", {"format": "json"}).json()
    return {p["name"]: p for p in schema["paths"][path]["get"]["parameters"]}


def test_the_node_filters_are_in_the_schema(api):
    parameters = _parameters(api, "/api/v1/nodes/")
    assert {"state", "source", "name", "label", "vendor"} <= parameters.keys()
    assert parameters["state"]["schema"]["enum"] == ["draining", "maintenance", "offline", "online"]
    assert parameters["source"]["schema"]["enum"] == ["agent", "kubernetes", "prometheus"]
    assert "key=value" in parameters["label"]["description"]


def test_the_gpu_filters_are_in_the_schema(api):
    parameters = _parameters(api, "/api/v1/gpus/")
    assert {"node", "model", "vendor", "health"} <= parameters.keys()
    assert parameters["health"]["schema"]["enum"] == [
        "lost",
        "ok",
        "unhealthy",
        "unknown",
        "warning",
    ]
    assert parameters["vendor"]["schema"]["enum"] == [
        "amd",
        "ascend",
        "cambricon",
        "hygon",
        "metax",
        "moorethreads",
        "nvidia",
    ]


def test_the_page_parameters_have_bounds_in_the_schema(api):
    parameters = _parameters(api, "/api/v1/nodes/")
    assert parameters["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 1000}
    assert parameters["offset"]["schema"]["minimum"] == 0


@pytest.fixture
def mixed_fleet() -> None:
    """Two NVIDIA cards on one node, Ascend cards on another (two of them), a Hygon card on
    a third: the vendor filters list each node once, whatever its number of such cards."""
    nv = Node.objects.create(name="nv-1", agent_url="http://nv:1", state="online")
    asc = Node.objects.create(name="ascend-1", agent_url="http://asc:1", state="online")
    hy = Node.objects.create(name="hygon-1", agent_url="http://hy:1", state="online")
    GPU.objects.create(node=nv, index=0, uuid="GPU-nv0", model="NVIDIA A100", health="ok")
    GPU.objects.create(node=nv, index=1, uuid="GPU-nv1", model="NVIDIA A100", health="ok")
    for index in (0, 1):
        GPU.objects.create(node=asc, index=index, uuid=f"ascend-{index}", vendor="ascend",
                           model="Ascend 910B2C", health="warning")  # fmt: skip
    GPU.objects.create(node=hy, index=0, uuid="a1b2c3", vendor="hygon", model="DCU K100_AI",
                       health="ok")  # fmt: skip


def test_the_lists_filter_by_vendor(api, mixed_fleet):
    def gpus(**params: str) -> list[str]:
        return [gpu["uuid"] for gpu in api.get("/api/v1/gpus/", params).json()["results"]]

    assert gpus(vendor="ascend") == ["ascend-0", "ascend-1"]
    assert gpus(vendor="hygon") == ["a1b2c3"]
    assert gpus(vendor="nvidia") == ["GPU-nv0", "GPU-nv1"]
    assert gpus(vendor="cambricon") == []
    assert gpus(vendor="ascend", health="warning") == ["ascend-0", "ascend-1"]
    assert gpus(vendor="ascend", health="ok") == []
    ascend = api.get("/api/v1/gpus/", {"vendor": "ascend"}).json()["results"][0]
    assert ascend["vendor"] == "ascend" and ascend["health"] == "warning"
    assert _names(api, vendor="ascend") == ["ascend-1"]
    assert _names(api, vendor="nvidia") == ["nv-1"]
    assert _names(api, vendor="hygon", state="online") == ["hygon-1"]


@pytest.mark.parametrize("path", ["/api/v1/gpus/", "/api/v1/nodes/"])
@pytest.mark.parametrize("value", ["biren", "NVIDIA", "ascend "])
def test_an_unknown_vendor_filter_is_a_400(api, mixed_fleet, path, value):
    response = api.get(path, {"vendor": value})
    assert response.status_code == 400 and "vendor" in error_fields(response)

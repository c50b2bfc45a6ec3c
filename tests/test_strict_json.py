"""Nothing that is not a finite JSON number leaves the portal: pushes, pages, API.

An agent at every extreme the reading schema allows (the card cap, each field at its
maximum, the largest clock), and one sending what it must not (numbers JSON or 64 bits
cannot carry), through both ways answers arrive: the poller's bytes and a source's own
dicts. Every answer the browser or an API client gets must parse with a strict parser.
"""

from __future__ import annotations

import json
import re

import orjson
import pytest
from django.urls import reverse

from agents import client as agent_client
from agents.gpu_agent import schema
from agents.models import Node
from telemetry import live, poller, readings, services
from telemetry.poller import PollResult
from tests.factories import NodeFactory


def strict(text: str | bytes, where: str = ""):
    """json.loads that refuses NaN and ±Infinity, which JSON.parse in a browser refuses."""

    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON ({where})")

    return json.loads(text, parse_constant=refuse)


def extreme_card(i: int) -> dict:
    """A card with every number at the top of its range."""
    card: dict = {"index": min(i, schema.INT16_MAX), "uuid": f"GPU-{i:036d}"}
    for field in schema.GPU_FIELDS:
        if field.type != "text" and field.name != "index":
            card[field.name] = int(field.maximum) if field.type == "int" else field.maximum
    card["name"] = "N" * 128
    card["processes"] = [{"user": "u" * 64, "memory_used_mib": schema.INT32_MAX} for _ in range(8)]
    return card


def extreme_snapshot(cards: int) -> dict:
    return {
        "view": "portal",
        "agent": {"version": "v" * 64, "backend": "b" * 32},
        "hostname": "h" * 255,
        "collected_at": 1e11,
        "collect_duration_s": 86400,
        "gpus": [extreme_card(i) for i in range(cards)],
    }


def pages_and_api(client, node: Node) -> list[tuple[str, str]]:
    """Every embedded JSON of the fleet and node pages, and the API's node and GPU answers."""
    texts = []
    for url in (reverse("telemetry:dashboard"), reverse("telemetry:node", args=[node.pk])):
        page = client.get(url).content.decode()
        for found in re.findall(
            r'<script id="[\w-]+" type="application/json">(.*?)</script>', page, re.S
        ):
            texts.append((url, found))
    for url in (f"/api/v1/nodes/{node.pk}/", "/api/v1/nodes/", "/api/v1/gpus/?page_size=500"):
        answer = client.get(url)
        assert answer.status_code == 200, (url, answer.status_code)
        texts.append((url, answer.content.decode()))
    return texts


def pushes(node: Node) -> list[str]:
    summaries = readings.node_summaries()
    detail = readings.node_detail(node)
    return [
        live.encode("fleet.nodes", "nodes", summaries)["text"],
        live.encode("node.detail", "node", detail)["text"],
        live.fleet_picture(),
    ]


@pytest.mark.parametrize("path", ["bytes", "dict"])
def test_an_agent_at_every_extreme_the_schema_allows_leaves_every_answer_strict_json(
    db, client, alice, settings, path
):
    settings.GPU_MAX_CARDS_PER_NODE = 256
    node = NodeFactory(name="extreme")
    snap = extreme_snapshot(256)
    if path == "bytes":
        target = poller.AgentTarget(node.pk, "http://agent", "t")
        response = agent_client.Response(200, orjson.dumps(snap), "", 0.01, 1)
        result = poller._poll_result(target, response, settings.GPU_MAX_CARDS_PER_NODE)
    else:
        result = PollResult(node.pk, snap, "", 0.01)
    summary = services.record_poll_results([result])
    assert summary.answered == 1, summary.failed
    [tile] = [t for t in readings.node_summaries() if t["id"] == node.pk]
    assert tile["memory_used_mib"] == 256 * schema.INT32_MAX  # exact: far below 2**53
    client.force_login(alice)
    for where, text in pages_and_api(client, node):
        strict(text, where)
    for text in pushes(node):
        strict(text)


@pytest.mark.parametrize(
    "snap",
    [
        {"collected_at": float("inf"), "gpus": []},
        {"collected_at": 2**70, "gpus": []},
        {"collected_at": float("nan"), "gpus": []},
        # Fields the schema does not check, in a portal view kept as it came.
        {"view": "portal", "gpus": [{"index": 0, "uuid": "GPU-1", "extra": 2**70}]},
        {"view": "portal", "gpus": [{"index": 0, "uuid": "GPU-1", "extra": float("inf")}]},
        {"gpus": [{"index": 0, "uuid": "GPU-1", "processes": [{"user": "u", "x": 2**70}]}]},
    ],
)
def test_numbers_json_cannot_carry_never_reach_a_push_page_or_the_api(db, client, alice, snap):
    node, other = NodeFactory(name="odd"), NodeFactory(name="fine")
    fine = {"collected_at": 1764500000.0, "gpus": [{"index": 0, "uuid": "GPU-F"}]}
    summary = services.record_poll_results(
        [PollResult(node.pk, snap, "", 0.01), PollResult(other.pk, fine, "", 0.01)]
    )
    assert other.pk not in summary.failed
    client.force_login(alice)
    for where, text in pages_and_api(client, node):
        strict(text, where)
    for text in pushes(node):
        strict(text)

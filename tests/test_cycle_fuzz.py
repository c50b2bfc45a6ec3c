"""Arbitrary answers from one agent, thrown at a real poll cycle on PostgreSQL beside good
ones: the good nodes are always recorded, the bad one is refused with its field named (or
recorded, when what was drawn happens to be a sound answer), and nothing escapes the cycle.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import orjson
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents import client as agent_client
from agents.choices import NodeState
from agents.gpu_agent import schema
from agents.models import Node
from telemetry import live, poller, readings, services
from telemetry.poller import PollResult
from tests.factories import NodeFactory
from tests.test_strict_json import strict

EXTREMES = [
    2**63, 2**64, 2**70, -(2**63) - 1, -1, 32768, 40000, 1e300, -1e300,
    float("nan"), float("inf"), float("-inf"), True, None, "", "x" * 300, "a\x00b",
    "\ud800", [], {}, [1], {"a": 1},
]  # fmt: skip
json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=80)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
odd = st.sampled_from(EXTREMES) | json_values


def sound(field: schema.Field) -> st.SearchStrategy:
    if field.type == "text":
        return st.text(max_size=field.max_length or 16)
    low, high = field.minimum or 0, field.maximum or 1e6
    if field.type == "int":
        return st.integers(int(low), int(high))
    return st.floats(low, high, allow_nan=False)


def record(fields: tuple[schema.Field, ...], extra: bool = True) -> st.SearchStrategy:
    """An object with each declared field sound, odd or absent, and perhaps other keys."""
    parts = {f.name: st.none() | sound(f) | odd for f in fields}
    base = st.fixed_dictionaries({}, optional=parts)
    if extra:
        base = st.tuples(base, st.dictionaries(st.text(max_size=6), odd, max_size=2)).map(
            lambda pair: {**pair[1], **pair[0]}
        )
    return base.map(lambda d: {k: v for k, v in d.items() if v is not None or k == "index"})


processes = st.lists(record(schema.PROCESS_FIELDS) | odd, max_size=3) | odd
cards = st.tuples(record(schema.GPU_FIELDS), st.none() | processes).map(
    lambda pair: pair[0] if pair[1] is None else {**pair[0], "processes": pair[1]}
)
# Mostly sound identities, so that the drawn cards reach the inventory and not only the check.
card_ids = st.tuples(
    st.integers(0, 40000), st.sampled_from(["GPU-A", "GPU-B", "GPU-\x00", "G" * 70])
)
positioned = st.tuples(cards, card_ids, st.booleans()).map(
    lambda t: {**t[0], "index": t[1][0], "uuid": t[1][1]} if t[2] else t[0]
)
many_cards = st.integers(0, 3000).map(
    lambda n: [{"index": i % 40000, "uuid": f"GPU-many-{i}"} for i in range(n)]
)
card_lists = st.lists(positioned | odd, max_size=5) | many_cards | odd
snapshots = st.one_of(
    st.tuples(record(schema.NODE_FIELDS), st.none() | record(schema.AGENT_FIELDS) | odd,
              card_lists, st.booleans()).map(
        lambda t: {**t[0], **({"agent": t[1]} if t[1] is not None else {}), "gpus": t[2],
                   **({"view": "portal"} if t[3] else {})}
    ),
    json_values,
)  # fmt: skip

# What a refusal says: the field named, or the shape of the answer.
REFUSAL = re.compile(
    r"'[\w.]+' |is not an object|is not a JSON object|has no 'gpus' list|GPUs, more than"
    r"|UUID more than once|not valid JSON|a process is not an object|no snapshot"
)


def good_snapshot(name: str) -> dict:
    return {
        "hostname": name, "collected_at": 1764500000.0,
        "gpus": [{"index": i, "uuid": f"GPU-{name}-{i}", "utilization_gpu_pct": 40}
                 for i in range(2)],
    }  # fmt: skip


def as_answer(node: Node, snap, how: str) -> PollResult:
    if how == "dict":
        return PollResult(node.pk, snap, "", 0.01)
    try:  # Python's json writes NaN, Infinity and big integers; orjson (the poller) refuses
        body = json.dumps(snap).encode("utf-8", "surrogatepass")
    except (ValueError, TypeError):
        body = b"\xff"
    response = agent_client.Response(200, body, "", 0.01, 1)
    return poller._poll_result(poller.AgentTarget(node.pk, "http://agent", "t"), response, 256)


@settings(
    max_examples=150,
    deadline=None,
    # No example database in the checkout; a failure prints the blob that replays it.
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(snap=snapshots, how=st.sampled_from(["dict", "bytes"]))
def test_one_agents_arbitrary_answer_never_stops_the_others(db, snap, how):
    nodes = {n.name: n for n in Node.objects.all()}
    if not nodes:
        nodes = {name: NodeFactory(name=name) for name in ("good-1", "good-2", "bad")}
    good = [nodes["good-1"], nodes["good-2"]]
    bad = nodes["bad"]
    # Each cycle later than the last, so that every recorded answer moves last_seen.
    now = timezone.now() + timedelta(minutes=Node.objects.count() + _cycles())
    results = [PollResult(n.pk, good_snapshot(n.name), "", 0.01, checked=True) for n in good]
    results.insert(1, as_answer(bad, snap, how))
    summary = services.record_poll_results(results, now=now)

    for node in good:
        node.refresh_from_db()
        assert (node.state, node.last_error, node.last_seen) == (NodeState.ONLINE, "", now)
        assert node.gpus.count() == 2
    bad.refresh_from_db()
    if bad.pk in summary.failed:
        assert REFUSAL.search(bad.last_error), bad.last_error
    latest = readings.latest_for([n.pk for n in good])
    assert all(len(latest[n.pk]["gpus"]) == 2 for n in good)
    strict(live.encode("fleet.nodes", "nodes", readings.node_summaries())["text"])
    strict(orjson.dumps(readings.node_detail(bad)))


_count = [0]


def _cycles() -> int:
    _count[0] += 1
    return _count[0]

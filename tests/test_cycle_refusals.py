"""A bad answer is refused for its node alone: the rest of the cycle is recorded."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

import orjson
import pytest

from agents.choices import NodeSource, NodeState
from agents.models import GPU, Node
from telemetry import prometheus_source, services
from telemetry.poller import PollResult
from tests import procs
from tests.factories import NodeFactory
from tests.test_fleet_services import gpu, snapshot


@pytest.fixture
def canned_agent() -> Iterator[Callable[[int, bytes], str]]:
    """An HTTP server that answers every request with the given status and body."""
    servers = []

    def start(status: int, body: bytes) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        url, server = procs.serve(Handler)
        servers.append(server)
        return url

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_an_answer_nobody_checked_is_checked_before_use_and_refused_alone(db):
    good, bad = NodeFactory(name="good"), NodeFactory(name="bad")
    summary = services.record_poll_results([
        PollResult(good.pk, snapshot("good", gpu("GPU-1")), "", 0.01),
        PollResult(bad.pk, snapshot("bad", gpu("GPU-2", index=40000)), "", 0.01),
    ])  # fmt: skip
    good.refresh_from_db()
    bad.refresh_from_db()
    assert (summary.answered, list(summary.failed)) == (1, [bad.pk])
    assert (good.state, good.last_error) == (NodeState.ONLINE, "")
    assert bad.last_error == "GPU GPU-2: 'index' is outside 0..32767"
    assert list(GPU.objects.values_list("uuid", flat=True)) == ["GPU-1"]


def test_a_hostname_too_long_for_its_column_is_refused_not_cut(db):
    node = NodeFactory(name="n", hostname="before")
    services.record_poll_results([PollResult(node.pk, snapshot("h" * 300, gpu("GPU-1")), "", 0.01)])
    node.refresh_from_db()
    assert node.hostname == "before"
    assert node.last_error == "node 'hostname' is longer than 255 characters"


def test_an_agent_error_page_with_a_nul_character_is_recorded_not_fatal(db, canned_agent):
    broken = NodeFactory(name="broken", agent_url=canned_agent(500, b"oops\x00\xff"))
    body = orjson.dumps(snapshot("fine", gpu("GPU-1")))
    fine = NodeFactory(name="fine", agent_url=canned_agent(200, body))
    summary = services.poll_fleet()
    broken.refresh_from_db()
    fine.refresh_from_db()
    assert summary.answered == 1
    assert broken.last_error == "HTTP 500: oops\ufffd\ufffd"
    assert fine.state == NodeState.ONLINE


def test_an_answer_with_more_cards_than_the_setting_allows_is_refused(db, canned_agent, settings):
    settings.GPU_MAX_CARDS_PER_NODE = 4
    cards = [gpu(f"GPU-{i}", i) for i in range(5)]
    node = NodeFactory(agent_url=canned_agent(200, orjson.dumps(snapshot("h", *cards))))
    services.poll_fleet()
    node.refresh_from_db()
    assert node.last_error == "snapshot lists 5 GPUs, more than 4"
    assert not GPU.objects.exists()
    settings.GPU_MAX_CARDS_PER_NODE = 5
    services.poll_fleet()
    assert GPU.objects.count() == 5


def test_the_card_cap_defaults_to_256():
    from django.conf import settings

    assert settings.GPU_MAX_CARDS_PER_NODE == 256


# --- Prometheus: snapshots built from series values ---------------------------------------

LABELS = {"UUID": "GPU-p1", "gpu": "0", "modelName": "NVIDIA H100", "Hostname": "dcgm-1"}


def series(name: str, value: str, **labels: str) -> dict:
    return {"metric": {"__name__": name, **LABELS, **labels}, "value": [1764500000.0, value]}


def test_series_values_that_overflow_once_scaled_are_left_out():
    # 1e307 is finite, but as a ratio it is scaled by 100: infinity, which round() refuses.
    [snap] = prometheus_source.snapshots_from_series([
        series("DCGM_FI_DEV_GPU_UTIL_RATIO", "1e307"),
        series("DCGM_FI_DEV_FB_USED", "1e308"),
        series("DCGM_FI_DEV_FB_FREE", "1e308"),
        series("DCGM_FI_DEV_GPU_TEMP", "1e308"),
        series("DCGM_FI_DEV_SM_CLOCK", "40", gpu="²"),
    ]).values()  # fmt: skip
    [card] = snap["gpus"]
    assert "utilization_gpu_pct" not in card and "memory_total_mib" not in card
    assert card["index"] == 0  # "²" is no index: the card's place stands in
    assert card["temperature_c"] > 1000  # finite: the schema's range judges it


def test_one_bad_prometheus_host_is_refused_alone(db, settings, monkeypatch):
    settings.PROMETHEUS_URL = "http://prometheus.invalid:9090"
    answer = [
        series("DCGM_FI_DEV_GPU_UTIL", "50", UUID="GPU-ok", Hostname="fine"),
        series("DCGM_FI_DEV_GPU_TEMP", "1e308", UUID="GPU-hot", Hostname="hot"),
        series("DCGM_FI_DEV_GPU_UTIL", "50", UUID="GPU-far", Hostname="far", gpu="99999"),
        series("DCGM_FI_DEV_GPU_UTIL", "50", UUID="GPU-\x00", Hostname="nul"),
        series("DCGM_FI_DEV_GPU_UTIL", "50", UUID="GPU-x", Hostname="bad\x00host"),
        series("DCGM_FI_DEV_GPU_UTIL", "50", UUID="GPU-y", Hostname="h" * 300),
    ]
    monkeypatch.setattr(prometheus_source, "fetch_series", lambda url, timeout: answer)
    summary = prometheus_source.poll_prometheus()
    nodes = {n.hostname: n for n in Node.objects.filter(source=NodeSource.PROMETHEUS)}
    # Hosts whose very name no column can hold get no node at all.
    assert sorted(nodes) == ["far", "fine", "hot", "nul"]
    assert summary.answered == 1 and nodes["fine"].state == NodeState.ONLINE
    assert nodes["hot"].last_error == "GPU GPU-hot: 'temperature_c' is outside -273..1000"
    assert nodes["far"].last_error == "GPU GPU-far: 'index' is outside 0..32767"
    assert nodes["nul"].last_error == "GPU entry 0: 'uuid' holds a NUL character"
    assert list(GPU.objects.values_list("uuid", flat=True)) == ["GPU-ok"]

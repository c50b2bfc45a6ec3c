"""Nodes seen only through Prometheus: conversion of dcgm-exporter series, and a real Prometheus.

The label sets come from the dcgm-exporter anchor (real series lines quoted upstream);
the end-to-end test runs Debian's Prometheus against dcgm-exporter-format targets
served here on loopback, and polls it exactly as the Celery task does.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.choices import GpuHealth, NodeSource, NodeState
from agents.gpu_agent import schema
from agents.models import GPU, Node
from telemetry import prometheus_source, readings, services, tasks
from tests import anchors, procs
from tests.factories import GPUFactory

TS = 1764500000.0
MIB = 1024 * 1024


def anchor_labels() -> list[dict[str, str]]:
    """The label sets of the anchor's series lines: H100 (Hostname), A30 MIG (hostname), XID."""
    path = anchors.dcgm_exporter() / "sample-series.txt"
    text = path.read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    labels = []
    for line in lines:
        [family] = text_string_to_metric_families(line + "\n")
        labels.append(dict(family.samples[0].labels))
    assert len(labels) == 3, f"expected 3 series lines in {path}"
    return labels


def h100_legacy() -> dict[str, str]:
    return anchor_labels()[0]


def as_49(labels: dict[str, str]) -> dict[str, str]:
    """The same card as dcgm-exporter 4.9 labels it: ``hostname``, SYSTEM driver label."""
    out = {k: v for k, v in labels.items() if k not in ("Hostname", "DCGM_FI_DRIVER_VERSION")}
    out["hostname"] = labels.get("Hostname") or labels["hostname"]
    if "DCGM_FI_DRIVER_VERSION" in labels:
        out["DCGM_FI_SYSTEM_DRIVER_VERSION"] = labels["DCGM_FI_DRIVER_VERSION"]
    return out


def series(name: str, labels: dict[str, str], value: float | str, ts: float = TS) -> dict:
    """One result of an instant query, as Prometheus's HTTP API returns it."""
    return {"metric": {"__name__": name, **labels}, "value": [ts, str(value)]}


LEGACY_VALUES = {
    "DCGM_FI_DEV_GPU_UTIL": 37,
    "DCGM_FI_DEV_MEM_COPY_UTIL": 12,
    "DCGM_FI_DEV_FB_USED": 1024,
    "DCGM_FI_DEV_FB_FREE": 79936,
    "DCGM_FI_DEV_FB_RESERVED": 535,
    "DCGM_FI_DEV_GPU_TEMP": 61,
    "DCGM_FI_DEV_POWER_USAGE": 250.5,
    "DCGM_FI_DEV_SM_CLOCK": 1980,
    "DCGM_FI_DEV_MEM_CLOCK": 2619,
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123456789,
}
# The same readings in dcgm-exporter 4.9's names and base units.
V49_VALUES = {
    "DCGM_FI_DEV_GPU_UTIL_RATIO": 0.37,
    "DCGM_FI_DEV_MEMORY_UTIL_RATIO": 0.12,
    "DCGM_FI_DEV_FB_USED_BYTES": 1024 * MIB,
    "DCGM_FI_DEV_FB_FREE_BYTES": 79936 * MIB,
    "DCGM_FI_DEV_FB_RESERVED_BYTES": 535 * MIB,
    "DCGM_FI_DEV_GPU_TEMP_CELSIUS": 61,
    "DCGM_FI_DEV_BOARD_POWER_WATTS": 250.5,
    "DCGM_FI_DEV_SM_CLOCK_HERTZ": 1.98e9,
    "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ": 2.619e9,
    "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL": 123456.789,
}
EXPECTED_GPU = {
    "index": 0,
    "uuid": "GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b",
    "name": "NVIDIA H100 80GB HBM3",
    "pci_bus_id": "00000000:8D:00.0",
    "memory_total_mib": 1024 + 79936 + 535,
    "memory_used_mib": 1024,
    "utilization_gpu_pct": 37,
    "utilization_memory_pct": 12,
    "temperature_c": 61,
    "power_w": 250.5,
    "sm_clock_mhz": 1980,
    "health": "ok",
}


# --- pure conversion ---------------------------------------------------------------------


def test_the_anchor_files_are_there():
    assert h100_legacy()["Hostname"] == "computeinstance-e00c1p6dpy98xytphp"


def test_legacy_series_with_hostname_label_become_the_agents_snapshot_exactly():
    labels = h100_legacy()
    result = [series(name, labels, value) for name, value in LEGACY_VALUES.items()]
    snapshots = prometheus_source.snapshots_from_series(result)
    assert snapshots == {
        "computeinstance-e00c1p6dpy98xytphp": {
            "agent": {"version": "", "backend": "prometheus"},
            "hostname": "computeinstance-e00c1p6dpy98xytphp",
            "driver_version": "550.144.03",
            "collected_at": TS,
            "gpus": [EXPECTED_GPU],
        }
    }
    schema.check_snapshot(snapshots["computeinstance-e00c1p6dpy98xytphp"])


def test_49_names_with_lowercase_hostname_convert_ratios_bytes_hertz_and_joules_exactly():
    labels = as_49(h100_legacy())
    result = [series(name, labels, value) for name, value in V49_VALUES.items()]
    [snapshot] = prometheus_source.snapshots_from_series(result).values()
    assert snapshot["hostname"] == "computeinstance-e00c1p6dpy98xytphp"
    assert snapshot["driver_version"] == "550.144.03"
    assert snapshot["gpus"] == [EXPECTED_GPU]


def test_non_integral_base_units_round_to_the_nearest_unit():
    labels = as_49(h100_legacy())
    result = [
        series("DCGM_FI_DEV_FB_USED_BYTES", labels, 1536 * 1024),  # 1.5 MiB
        series("DCGM_FI_DEV_FB_FREE_BYTES", labels, 3 * MIB + 1),
        series("DCGM_FI_DEV_SM_CLOCK_HERTZ", labels, 1_409_600_000),
        series("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", labels, "1.0005"),
        series("DCGM_FI_DEV_GPU_UTIL_RATIO", labels, "0.005"),
    ]
    [gpu] = next(iter(prometheus_source.snapshots_from_series(result).values()))["gpus"]
    assert gpu["memory_used_mib"] == 2  # round half to even: 1.5 -> 2
    assert gpu["memory_total_mib"] == 5  # summed before rounding: 4.5 MiB + 1 byte
    assert gpu["sm_clock_mhz"] == 1410
    assert gpu["utilization_gpu_pct"] == 0  # 0.5 %, half to even


def test_mig_instances_make_one_card_whose_memory_adds_up_and_whose_temperature_does_not():
    mig = anchor_labels()[1]  # A30, GPU_I_PROFILE 1g.6gb, GPU_I_ID 3, label "hostname"
    other = {**mig, "GPU_I_ID": "4", "pod": "other-pod"}
    result = [
        series("DCGM_FI_DEV_FB_FREE", mig, 2207),
        series("DCGM_FI_DEV_FB_FREE", other, 5000),
        series("DCGM_FI_DEV_FB_USED", mig, 3600),
        series("DCGM_FI_DEV_FB_USED", other, 800),
        series("DCGM_FI_DEV_GPU_TEMP", mig, 35),
        series("DCGM_FI_DEV_GPU_TEMP", other, 35),
    ]
    snapshots = prometheus_source.snapshots_from_series(result)
    [gpu] = snapshots["dcgm-exporter-wwwjh"]["gpus"]
    assert gpu["uuid"] == "GPU-63bc0b91-2265-1b94-831c-15c41fe92675"
    assert gpu["index"] == 2
    assert gpu["memory_used_mib"] == 4400
    assert gpu["memory_total_mib"] == 11607
    assert gpu["temperature_c"] == 35
    assert "driver_version" not in snapshots["dcgm-exporter-wwwjh"]


def test_a_whole_card_series_wins_over_adding_up_its_mig_instances():
    mig = anchor_labels()[1]
    card = {k: v for k, v in mig.items() if k not in ("GPU_I_ID", "GPU_I_PROFILE")}
    result = [
        series("DCGM_FI_DEV_FB_USED", mig, 3600),
        series("DCGM_FI_DEV_FB_USED", card, 9000),
        series("DCGM_FI_DEV_FB_FREE", card, 15000),
    ]
    [gpu] = next(iter(prometheus_source.snapshots_from_series(result).values()))["gpus"]
    assert (gpu["memory_used_mib"], gpu["memory_total_mib"]) == (9000, 24000)


def test_the_same_card_scraped_by_two_exporter_instances_is_counted_once():
    labels = h100_legacy()
    result = []
    for instance in ("10.0.0.1:9400", "10.0.0.2:9400"):
        with_instance = {**labels, "instance": instance, "job": "dcgm"}
        result += [series(n, with_instance, v) for n, v in LEGACY_VALUES.items()]
    snapshots = prometheus_source.snapshots_from_series(result)
    assert [g for s in snapshots.values() for g in s["gpus"]] == [EXPECTED_GPU]


def test_a_card_exported_under_both_name_sets_is_read_once_preferring_the_49_names():
    legacy, new = h100_legacy(), as_49(h100_legacy())
    result = [series(n, legacy, v) for n, v in LEGACY_VALUES.items()]
    result += [series(n, new, v) for n, v in V49_VALUES.items()]
    result.append(series("DCGM_FI_DEV_GPU_UTIL_RATIO", new, 0.9, ts=TS + 1))
    [snapshot] = prometheus_source.snapshots_from_series(result).values()
    [gpu] = snapshot["gpus"]
    assert gpu == {**EXPECTED_GPU, "utilization_gpu_pct": 90}


def test_a_card_named_by_two_host_labels_belongs_to_the_newer_one_only():
    labels = h100_legacy()
    moved = {**labels, "Hostname": "new-host"}
    result = [
        series("DCGM_FI_DEV_GPU_UTIL", labels, 10, ts=TS),
        series("DCGM_FI_DEV_GPU_UTIL", moved, 20, ts=TS + 5),
    ]
    snapshots = prometheus_source.snapshots_from_series(result)
    assert list(snapshots) == ["new-host"]
    assert snapshots["new-host"]["gpus"][0]["utilization_gpu_pct"] == 20


def test_fields_a_card_does_not_export_are_absent_never_zero():
    result = [series("DCGM_FI_DEV_GPU_UTIL", h100_legacy(), 0)]
    [gpu] = next(iter(prometheus_source.snapshots_from_series(result).values()))["gpus"]
    assert gpu == {
        "index": 0,
        "uuid": "GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b",
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:8D:00.0",
        "utilization_gpu_pct": 0,
        "health": "ok",
    }


def test_memory_total_needs_both_used_and_free():
    result = [series("DCGM_FI_DEV_FB_USED", h100_legacy(), 100)]
    [gpu] = next(iter(prometheus_source.snapshots_from_series(result).values()))["gpus"]
    assert gpu["memory_used_mib"] == 100
    assert "memory_total_mib" not in gpu


def test_other_series_nan_values_and_series_without_host_or_uuid_are_ignored():
    xid = anchor_labels()[2]
    no_host = {k: v for k, v in h100_legacy().items() if k != "Hostname"}
    no_uuid = {k: v for k, v in h100_legacy().items() if k != "UUID"}
    result = [
        series("DCGM_FI_DEV_XID_ERRORS", xid, 0),
        series("DCGM_FI_DEV_GPU_UTIL", no_host, 50),
        series("DCGM_FI_DEV_GPU_UTIL", no_uuid, 50),
        series("DCGM_FI_DEV_GPU_TEMP", h100_legacy(), "NaN"),
    ]
    assert prometheus_source.snapshots_from_series(result) == {}


def test_the_query_asks_for_every_name_of_both_sets_in_one_request():
    # Clocks of memory and energy counters are series the portal keeps no field for.
    unread = {"DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
              "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL"}  # fmt: skip
    for name in {*LEGACY_VALUES, *V49_VALUES} - unread:
        assert name in prometheus_source.QUERY
    for name in unread:
        assert name not in prometheus_source.QUERY
    assert prometheus_source.QUERY.startswith("max by (")


# --- nodes in the database -----------------------------------------------------------------


def snapshot_for(hostname: str, uuid: str) -> dict:
    labels = {**h100_legacy(), "Hostname": hostname, "UUID": uuid}
    return prometheus_source.snapshots_from_series([series("DCGM_FI_DEV_GPU_UTIL", labels, 5)])[
        hostname
    ]


def test_a_host_named_like_an_agent_node_gets_a_distinct_read_only_node(db):
    agent = Node.objects.create(name="gpu-a", agent_url="http://127.0.0.1:1", agent_token="t")
    ids = prometheus_source.ensure_nodes(["gpu-a", "gpu-b"])
    created = Node.objects.get(pk=ids["gpu-a"])
    assert created.name == "gpu-a@prometheus"
    assert (created.source, created.hostname, created.agent_url) == (
        NodeSource.PROMETHEUS,
        "gpu-a",
        "",
    )
    assert Node.objects.get(pk=ids["gpu-b"]).name == "gpu-b"
    agent.refresh_from_db()
    assert (agent.source, agent.agent_url) == (NodeSource.AGENT, "http://127.0.0.1:1")
    # Found again by hostname, not recreated.
    assert prometheus_source.ensure_nodes(["gpu-a"]) == {"gpu-a": ids["gpu-a"]}


def test_prometheus_nodes_are_never_polled_as_agents(db):
    Node.objects.create(name="agent", agent_url="http://127.0.0.1:1")
    Node.objects.create(
        name="prom", hostname="prom", source=NodeSource.PROMETHEUS, agent_url="http://x:1"
    )
    assert [t.url for t in services.agent_targets()] == ["http://127.0.0.1:1"]


def test_cards_our_agents_already_report_are_left_to_them(db):
    agent = Node.objects.create(name="gpu-a", agent_url="http://127.0.0.1:1")
    GPUFactory(node=agent, uuid="GPU-agent")
    snapshots = {
        "gpu-a": snapshot_for("gpu-a", "GPU-agent"),
        "dcgm-only": snapshot_for("dcgm-only", "GPU-dcgm"),
    }
    kept = prometheus_source.without_agent_cards(
        snapshots, prometheus_source._agent_owned_uuids(snapshots)
    )
    assert list(kept) == ["dcgm-only"]


def free_url() -> str:
    return f"http://127.0.0.1:{procs.free_port()}"


def test_an_unreachable_prometheus_fails_its_nodes_and_never_raises(db, settings):
    settings.PROMETHEUS_URL = free_url()  # nothing listens there: a real refused connection
    settings.PROMETHEUS_TIMEOUT = 2
    settings.NODE_OFFLINE_AFTER_MISSES = 2
    node = Node.objects.create(
        name="h", hostname="h", source=NodeSource.PROMETHEUS, state=NodeState.ONLINE
    )
    agent = Node.objects.create(name="a", agent_url="http://127.0.0.1:1", state=NodeState.ONLINE)
    for _ in range(2):
        summary = tasks.poll_prometheus()
    node.refresh_from_db()
    agent.refresh_from_db()
    assert summary["polled"] == 1 and summary["answered"] == 0
    assert node.state == NodeState.OFFLINE
    assert "unavailable" in node.last_error
    assert agent.state == NodeState.ONLINE  # the agent path is not Prometheus's to judge


def test_polling_does_nothing_when_no_prometheus_is_configured(db, settings):
    settings.PROMETHEUS_URL = ""
    Node.objects.create(name="h", hostname="h", source=NodeSource.PROMETHEUS)
    assert prometheus_source.poll_prometheus() == services.PollSummary()


# --- a real Prometheus ---------------------------------------------------------------------


class Target:
    """A dcgm-exporter-format /metrics page served on loopback, its text set by the test."""

    def __init__(self) -> None:
        self.text = ""
        target = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = target.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def exposition(values: dict[str, float], *label_sets: dict[str, str]) -> str:
    def fmt(labels: dict[str, str]) -> str:
        return ",".join(f'{k}="{v}"' for k, v in labels.items())

    lines = []
    for name, value in values.items():
        lines.append(f"# TYPE {name} gauge")
        lines += [f"{name}{{{fmt(labels)}}} {value}" for labels in label_sets]
    return "\n".join(lines) + "\n"


@pytest.fixture
def targets() -> Iterator[Callable[[], Target]]:
    started: list[Target] = []

    def start() -> Target:
        target = Target()
        started.append(target)
        return target

    yield start
    for target in started:
        target.stop()


def wait_until(check: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.25)


def hosts_in(url: str) -> set[str]:
    return set(
        prometheus_source.snapshots_from_series(procs.instant_query(url, prometheus_source.QUERY))
    )


def test_a_real_prometheus_scraping_dcgm_exporters_fills_the_inventory_and_health(
    db, settings, prometheus, targets
):
    legacy_labels = h100_legacy()  # label "Hostname", legacy names
    mig = as_49(anchor_labels()[1])  # label "hostname", 4.9 names, two MIG instances
    mig["DCGM_FI_SYSTEM_DRIVER_VERSION"] = "580.65.06"
    legacy, new = targets(), targets()
    legacy.text = exposition(LEGACY_VALUES, legacy_labels)
    new.text = exposition(
        {
            "DCGM_FI_DEV_FB_USED_BYTES": 3600 * MIB,
            "DCGM_FI_DEV_FB_FREE_BYTES": 2207 * MIB,
            "DCGM_FI_DEV_GPU_TEMP_CELSIUS": 35,
            "DCGM_FI_DEV_BOARD_POWER_WATTS": 41.25,
            "DCGM_FI_DEV_SM_CLOCK_HERTZ": 1.44e9,
        },
        mig,
        {**mig, "GPU_I_ID": "4"},
    )
    # The legacy exporter is scraped by two jobs: its series arrive twice in Prometheus.
    url = prometheus({"dcgm": [legacy.address, new.address], "dcgm-again": [legacy.address]})
    legacy_host, new_host = legacy_labels["Hostname"], mig["hostname"]
    wait_until(lambda: hosts_in(url) == {legacy_host, new_host}, "both hosts scraped")

    settings.PROMETHEUS_URL = url
    settings.NODE_OFFLINE_AFTER_MISSES = 2
    summary = prometheus_source.poll_prometheus()
    assert (summary.polled, summary.answered, summary.gpus_created) == (2, 2, 2)

    nodes = {n.hostname: n for n in Node.objects.all()}
    assert set(nodes) == {legacy_host, new_host}
    for node in nodes.values():
        assert (node.source, node.state, node.agent_url, node.agent_token) == (
            NodeSource.PROMETHEUS,
            NodeState.ONLINE,
            "",
            "",
        )
    assert nodes[legacy_host].driver_version == "550.144.03"
    assert nodes[new_host].driver_version == "580.65.06"
    assert nodes[legacy_host].agent_version == ""

    cards = {g.uuid: g for g in GPU.objects.all()}
    assert set(cards) == {legacy_labels["UUID"], mig["UUID"]}
    h100, a30 = cards[legacy_labels["UUID"]], cards[mig["UUID"]]
    assert (h100.node_id, h100.index, h100.model, h100.memory_total_mib, h100.health) == (
        nodes[legacy_host].pk, 0, "NVIDIA H100 80GB HBM3", 81495, GpuHealth.OK,
    )  # fmt: skip
    assert (a30.node_id, a30.index, a30.model, a30.memory_total_mib) == (
        nodes[new_host].pk, 2, "NVIDIA A30", 2 * (3600 + 2207),
    )  # fmt: skip

    # The latest readings are cached exactly as for an agent's answer.
    latest = readings.latest_for([nodes[legacy_host].pk, nodes[new_host].pk])
    h100_live = latest[nodes[legacy_host].pk]["gpus"][h100.uuid]
    assert {k: h100_live[k] for k in ("utilization_gpu_pct", "memory_used_mib", "power_w")} == {
        "utilization_gpu_pct": 37,
        "memory_used_mib": 1024,
        "power_w": 250.5,
    }
    assert (h100_live["temperature_c"], h100_live["sm_clock_mhz"]) == (61, 1980)
    a30_live = latest[nodes[new_host].pk]["gpus"][a30.uuid]
    assert (a30_live["memory_used_mib"], a30_live["temperature_c"]) == (7200, 35)
    assert (a30_live["power_w"], a30_live["sm_clock_mhz"]) == (41.25, 1440)
    assert "utilization_gpu_pct" not in a30_live

    # The legacy exporter goes away: Prometheus marks its series stale, the node misses polls.
    legacy.stop()
    wait_until(lambda: hosts_in(url) == {new_host}, "legacy host gone from Prometheus")
    for _ in range(settings.NODE_OFFLINE_AFTER_MISSES):
        prometheus_source.poll_prometheus()
    gone, kept = Node.objects.get(hostname=legacy_host), Node.objects.get(hostname=new_host)
    assert gone.state == NodeState.OFFLINE
    assert "no DCGM series" in gone.last_error
    assert kept.state == NodeState.ONLINE
    assert GPU.objects.count() == 2  # nothing deleted

"""Other vendors' cards in the portal (issue #25): the agent's ``vendor``, ``health_detail``
and its ``warning``/``unhealthy`` health recorded from snapshots, hostile values refused
alone, and the vendor and the health shown on the fleet, node and GPU pages."""

from __future__ import annotations

import json
import time

import pytest
from django.urls import reverse

from agents.choices import GpuHealth, GpuVendor
from agents.gpu_agent import schema
from agents.models import GPU, Node
from telemetry import readings, services
from telemetry.poller import PollResult
from tests import clients
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db


def snapshot(*gpus: dict) -> dict:
    return {
        "agent": {"version": "0.1.0", "backend": "npu-smi"},
        "hostname": "ascend-01",
        "driver_version": "23.0.3",
        "collected_at": 1764500000.0,
        "gpus": list(gpus),
    }


def card(uuid: str, index: int = 0, **fields) -> dict:
    return {
        "uuid": uuid, "index": index, "name": "Ascend 910B2C", "memory_total_mib": 65536,
        "health": "ok", "vendor": "ascend", "utilization_gpu_pct": 30, **fields,
    }  # fmt: skip


def record(node: Node, *gpus: dict) -> services.PollSummary:
    return services.record_poll_results([PollResult(node.pk, snapshot(*gpus), "", 0.01)])


@pytest.fixture
def node() -> Node:
    return NodeFactory(name="ascend-01")


# --- the schema: the new fields pass, bad values are dropped alone -------------------------


def test_the_vendor_fields_pass_the_check_as_they_came():
    data = snapshot(card("ascend-1", health="warning", health_detail="Warning: A4025021 x"))
    checked = schema.check_snapshot(data)
    assert checked["gpus"][0]["vendor"] == "ascend"
    assert checked["gpus"][0]["health"] == "warning"
    assert checked["gpus"][0]["health_detail"] == "Warning: A4025021 x"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vendor", "biren"),  # not a vendor the portal knows
        ("vendor", "NVIDIA"),  # the value, not the label
        ("vendor", 7),
        ("vendor", ["ascend"]),
        ("vendor", "ascend\x00"),
        ("health", "melted"),
        ("health", 1),
        ("health_detail", "x" * (schema.HEALTH_DETAIL_MAX + 1)),
        ("health_detail", {"text": "alarm"}),
        ("health_detail", "bad\x00byte"),
        ("health_detail", "\ud800"),
    ],
)
def test_a_bad_vendor_or_health_value_is_dropped_alone(field, value):
    data = snapshot(card("ascend-1", **{field: value}), card("ascend-2", 1))
    checked = schema.check_snapshot(data)
    first, second = checked["gpus"]
    assert field not in first
    # Everything else of the card, and the other card, as sent.
    assert first["uuid"] == "ascend-1" and first["utilization_gpu_pct"] == 30
    assert second["vendor"] == "ascend" and second["health"] == "ok"


def test_other_bad_fields_still_refuse_the_answer():
    with pytest.raises(schema.SnapshotError, match="utilization_gpu_pct"):
        schema.check_snapshot(snapshot(card("ascend-1", utilization_gpu_pct=101, vendor="x")))


# --- recording ---------------------------------------------------------------------------


def test_the_vendor_and_the_vendor_health_are_recorded(node):
    record(
        node,
        card("ascend-1", 0),
        card("ascend-2", 1, health="warning", health_detail="Warning: A4025021"),
        card("ascend-3", 2, health="unhealthy", health_detail="Alarm: 8C03A000 heart beat lost"),
        card("GPU-nv", 3, vendor=None, name="NVIDIA A100-SXM4-80GB"),
    )
    got = {g.uuid: (g.vendor, g.health, g.health_detail) for g in GPU.objects.all()}
    assert got == {
        "ascend-1": ("ascend", GpuHealth.OK, ""),
        "ascend-2": ("ascend", GpuHealth.WARNING, "Warning: A4025021"),
        "ascend-3": ("ascend", GpuHealth.UNHEALTHY, "Alarm: 8C03A000 heart beat lost"),
        "GPU-nv": ("nvidia", GpuHealth.OK, ""),  # no vendor: NVML's card
    }


def test_a_card_back_to_ok_loses_its_detail(node):
    services._cards_seen.clear()
    record(node, card("ascend-1", health="unhealthy", health_detail="Alarm: x"))
    record(node, card("ascend-1"))
    gpu = GPU.objects.get()
    assert (gpu.health, gpu.health_detail) == (GpuHealth.OK, "")


def test_hostile_vendor_values_are_not_recorded(node):
    record(node, card("c-1", 0, vendor="<script>"), card("c-2", 1, vendor="x" * 40),
           card("c-3", 2, health="melted"))  # fmt: skip
    rows = {g.uuid: (g.vendor, g.health) for g in GPU.objects.all()}
    # Refused values are as if absent: an agent that names no vendor speaks for NVML.
    assert rows == {"c-1": ("nvidia", "ok"), "c-2": ("nvidia", "ok"), "c-3": ("ascend", "ok")}
    node.refresh_from_db()
    assert node.last_error == "" and node.state == "online"


def test_a_lost_vendor_card_keeps_the_tools_words(node):
    record(node, card("ascend-1", health="lost", health_detail="npu-smi exited with status 3"))
    gpu = GPU.objects.get()
    assert (gpu.health, gpu.health_detail) == (GpuHealth.LOST, "npu-smi exited with status 3")


# --- pages -------------------------------------------------------------------------------

HOSTILE = '<img src=x onerror="alert(1)">'


@pytest.fixture
def mixed(node) -> Node:
    record(
        node, card("ascend-1", 0, health="unhealthy", health_detail=HOSTILE), card("ascend-2", 1)
    )
    nv = NodeFactory(name="nv-01")
    services.record_poll_results([PollResult(nv.pk, {
        **snapshot(card("GPU-nv", 0, vendor=None, name="NVIDIA H100 80GB HBM3")),
        "hostname": "nv-01"}, "", 0.01)])  # fmt: skip
    return node


def test_the_node_detail_carries_vendor_and_health_words(mixed):
    detail = readings.node_detail(mixed)
    first, second = detail["gpus"]
    assert first["vendor"] == "ascend" and first["vendor_label"] == "Huawei Ascend"
    assert first["health"] == "unhealthy" and first["health_detail"] == HOSTILE
    assert second["health"] == "ok" and second["health_detail"] == ""


def test_the_node_page_hands_the_detail_over_escaped(mixed, member_user):
    page = clients.page(member_user).get(reverse("telemetry:node", args=[mixed.pk]))
    html = page.content.decode()
    assert page.status_code == 200
    assert HOSTILE not in html  # json_script escapes < and >
    start = html.index('id="initial-data"')
    data = json.loads(html[html.index(">", start) + 1 : html.index("</script>", start)])
    assert data["gpus"][0]["health_detail"] == HOSTILE
    labels = json.loads(html[html.index(">", i := html.index('id="labels"')) + 1:
                             html.index("</script>", i)])  # fmt: skip
    assert labels["health"]["unhealthy"] == "Unhealthy"
    assert labels["health"]["warning"] == "Warning"
    assert 'data-field="vendor"' in html and 'data-field="health_detail"' in html


def test_the_gpu_page_shows_vendor_and_unhealthy_not_ok(mixed, member_user):
    gpu = GPU.objects.get(uuid="ascend-1")
    html = clients.page(member_user).get(reverse("telemetry:gpu", args=[gpu.pk])).content.decode()
    assert 'data-health="unhealthy">Unhealthy<' in html
    assert "Huawei Ascend" in html
    assert HOSTILE not in html and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    ok = GPU.objects.get(uuid="ascend-2")
    html = clients.page(member_user).get(reverse("telemetry:gpu", args=[ok.pk])).content.decode()
    assert 'data-health="ok">Healthy<' in html


def test_the_dashboard_names_each_models_vendor(mixed, member_user):
    html = clients.page(member_user).get(reverse("telemetry:dashboard")).content.decode()
    assert "Huawei Ascend</span> · <bdi>Ascend 910B2C</bdi> \u00d7 2" in html
    assert "NVIDIA</span> · <bdi>NVIDIA H100 80GB HBM3</bdi> \u00d7 1" in html
    tiles = {t["name"]: t for t in readings.node_summaries()}
    assert tiles["ascend-01"]["vendors"] == {"Ascend 910B2C": "ascend"}
    assert tiles["nv-01"]["vendors"] == {}


# --- end to end: a simulated mixed fleet -------------------------------------------------


def test_a_simulated_mixed_fleet_is_recorded_with_its_vendors(transactional_db, sim_agents):
    agents = sim_agents(3, 2, 0.2, vendors=("nvidia", "ascend", "hygon"))
    for i, url in enumerate(agents.urls):
        Node.objects.create(name=f"sim-{i}", agent_url=url, agent_token=agents.token)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        summary = services.poll_fleet()
        if summary.answered == 3 and GPU.objects.count() == 6:
            break
        time.sleep(0.3)
    by_node = {
        name: (vendor, model)
        for name, vendor, model in GPU.objects.values_list("node__name", "vendor", "model")
    }
    assert by_node["sim-0"][0] == GpuVendor.NVIDIA
    assert by_node["sim-1"] == (GpuVendor.ASCEND, "Ascend 910B2C")
    assert by_node["sim-2"] == (GpuVendor.HYGON, "DCU K100_AI")
    assert GPU.objects.filter(vendor="ascend", uuid__startswith="ascend-").count() == 2


def test_attributed_use_takes_thresholds_mixing_whole_numbers_and_decimals():
    """Two pools' reclaim thresholds in one statement (the demo's domestic pool, on the
    default policy, beside the demo pool's own): psycopg refused the mixed list."""
    from django.utils import timezone

    from telemetry.attributed import Attribution, attributed_use
    from tests.factories import GPUFactory

    a, b = GPUFactory(), GPUFactory()
    now = timezone.now()
    got = attributed_use(
        [Attribution(1, a.pk, "ben", now, util_pct=5, memory_mib=512),
         Attribution(2, b.pk, "ana", now, util_pct=2.5, memory_mib=256.0)],
        now, now, "1m", spark_points=4,
    )  # fmt: skip
    assert got == {}  # no minute read yet: nothing to sum, and no error

"""/metrics must read exactly like dcgm-exporter, checked against its own files."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.gpu_agent.backends.nvml import NvmlBackend
from agents.gpu_agent.backends.sim import SimulatedBackend
from agents.gpu_agent.collector import Collector
from agents.gpu_agent.metrics import render
from agents.gpu_agent.model import AllocationUsage, GpuReading, MigDevice, NodeSnapshot, PodRef
from tests.agent.fake_nvml import FakeCard, FakeMig, install_fake_nvml

# Default counters that need DCGM itself: NVLink sampling, and vGPU guests' licences.
UNFILLABLE = {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS"}
# DCGM fields outside the default set that the agent reads anyway, under DCGM's names.
EXTRA = {
    "DCGM_FI_DEV_FAN_SPEED",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
}
# dcgm-exporter adds these only when it maps GPUs to Kubernetes pods.
POD_LABELS = {"container", "namespace", "pod"}


def default_counters(anchors: Path) -> dict[str, tuple[str, str]]:
    """dcgm-exporter's default-counters.csv as {field: (type, help)}, comments skipped."""
    counters = {}
    for line in (anchors / "default-counters.csv").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, kind, help_text = (part.strip() for part in line.split(",", 2))
        counters[name] = (kind, help_text)
    return counters


def first_anchor_series(anchors: Path) -> str:
    lines = (anchors / "sample-series.txt").read_text().splitlines()
    return next(line for line in lines if line.strip() and not line.startswith("#"))


def label_names_in_order(series_line: str) -> list[str]:
    labels = series_line[series_line.index("{") + 1 : series_line.rindex("}")]
    return re.findall(r'(?:^|,)(\w+)="', labels)


@pytest.fixture
def metrics_text(serve: Callable[..., str], get: Callable[..., Any]) -> str:
    collector = Collector(SimulatedBackend("m-01", 3, "NVIDIA H100 80GB HBM3", seed=4), 1.0)
    collector.collect_once()
    result = get(f"{serve(collector, 'T')}/metrics")
    assert result.status == 200
    return result.body.decode()


def test_metrics_parse_and_carry_every_fillable_default_counter(
    metrics_text: str, anchors_dir: Path
) -> None:
    csv = default_counters(anchors_dir)
    filled = {name for name, (kind, _) in csv.items() if kind != "label"} - UNFILLABLE
    assert len(filled) == 23
    families = {f.name: f for f in text_string_to_metric_families(metrics_text)}
    dcgm = {name for name in families if name.startswith("DCGM_")}
    # H100s have no fan sensor NVML can read, so that one extra is absent here.
    assert dcgm == filled | EXTRA - {"DCGM_FI_DEV_FAN_SPEED"}
    for name in filled:
        kind, help_text = csv[name]
        assert families[name].type == kind, name
        assert families[name].documentation == help_text, name
        assert len(families[name].samples) == 3, name


def test_metric_labels_match_dcgm_exporter_names_and_order(
    metrics_text: str, anchors_dir: Path
) -> None:
    anchor = label_names_in_order(first_anchor_series(anchors_dir))
    expected = [name for name in anchor if name not in POD_LABELS]
    assert expected == [
        "gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION",
    ]  # fmt: skip
    series = [line for line in metrics_text.splitlines() if line.startswith("DCGM_")]
    assert series
    for line in series:
        names = label_names_in_order(line)
        if line.startswith("DCGM_FI_DEV_XID_ERRORS"):
            # As dcgm-exporter since its PR #326: the code and its meaning as labels too.
            assert names[-2:] == ["err_code", "err_msg"], line
            names = names[:-2]
        assert names == expected, line
    util = next(
        sample
        for family in text_string_to_metric_families(metrics_text)
        if family.name == "DCGM_FI_DEV_GPU_UTIL"
        for sample in family.samples
        if sample.labels["gpu"] == "1"
    )
    assert util.labels["device"] == "nvidia1"
    assert util.labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert util.labels["Hostname"] == "m-01"
    assert util.labels["DCGM_FI_DRIVER_VERSION"] == "550.54.15"
    assert util.labels["pci_bus_id"] == "00000000:0F:00.0"
    assert util.labels["UUID"].startswith("GPU-")


def test_agent_health_series_are_exposed(metrics_text: str) -> None:
    families = {f.name: f for f in text_string_to_metric_families(metrics_text)}
    for name in (
        "gpu_agent_last_collect_success_timestamp_seconds",
        "gpu_agent_collect_duration_seconds",
    ):
        assert families[name].type == "gauge"
        [sample] = families[name].samples
        assert sample.labels == {"Hostname": "m-01"}
    stamp = families["gpu_agent_last_collect_success_timestamp_seconds"].samples[0].value
    assert stamp > 1_600_000_000


def test_label_values_are_escaped() -> None:
    awkward = 'rack "7"\\node\nB'
    snapshot = NodeSnapshot(
        hostname=awkward,
        collected_at=1.0,
        driver_version="550.54.15",
        gpus=[GpuReading(index=0, uuid="GPU-1", name='Model "X"', utilization_gpu_pct=5)],
    )
    [family] = [
        f for f in text_string_to_metric_families(render(snapshot)) if f.name.startswith("DCGM_")
    ]
    assert family.samples[0].labels["Hostname"] == awkward
    assert family.samples[0].labels["modelName"] == 'Model "X"'


def test_series_a_gpu_cannot_report_are_left_out() -> None:
    snapshot = NodeSnapshot(
        hostname="h",
        collected_at=1.0,
        gpus=[
            GpuReading(index=0, uuid="GPU-a", power_w=80.5, utilization_gpu_pct=10),
            GpuReading(index=1, uuid="GPU-b", utilization_gpu_pct=20),
            GpuReading(index=2, uuid="GPU-c", health="lost"),
        ],
    )
    text = render(snapshot)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert [s.labels["gpu"] for s in families["DCGM_FI_DEV_POWER_USAGE"].samples] == ["0"]
    assert families["DCGM_FI_DEV_POWER_USAGE"].samples[0].value == 80.5
    assert [s.labels["gpu"] for s in families["DCGM_FI_DEV_GPU_UTIL"].samples] == ["0", "1"]
    # No GPU has a temperature, so the family is absent altogether, HELP and TYPE included.
    assert "DCGM_FI_DEV_GPU_TEMP" not in text
    assert 'DCGM_FI_DRIVER_VERSION=""' in text


def mig_anchor_series(anchors: Path) -> str:
    lines = (anchors / "sample-series.txt").read_text().splitlines()
    return next(line for line in lines if "GPU_I_PROFILE" in line)


def test_mig_instances_get_their_own_memory_series_with_dcgm_exporter_labels(
    monkeypatch: pytest.MonkeyPatch, anchors_dir: Path
) -> None:
    migs: list[FakeMig | None] = [
        FakeMig("MIG-aaaa", 1, 0, "NVIDIA A100-SXM4-80GB MIG 3g.40gb", 40192, 1000),
        None,
        FakeMig("MIG-bbbb", 2, 0, "NVIDIA A100-SXM4-80GB MIG 1g.10gb", 9728, 0),
    ]
    cards = [FakeCard(mig=migs), FakeCard(uuid="GPU-plain", bus_id=b"00000000:0F:00.0")]
    install_fake_nvml(monkeypatch.setattr, cards)
    text = render(NvmlBackend("mig-node").collect())
    families = {f.name: f for f in text_string_to_metric_families(text)}

    def by_instance(name: str) -> dict[tuple[str, str | None, str | None], float]:
        return {
            (s.labels["gpu"], s.labels.get("GPU_I_PROFILE"), s.labels.get("GPU_I_ID")): s.value
            for s in families[name].samples
        }

    # The whole-card series stay; each instance adds one, on its parent card's labels.
    assert by_instance("DCGM_FI_DEV_FB_USED") == {
        ("0", None, None): 1234, ("1", None, None): 1234,
        ("0", "3g.40gb", "1"): 1000, ("0", "1g.10gb", "2"): 0,
    }  # fmt: skip
    assert by_instance("DCGM_FI_DEV_FB_FREE") == {
        ("0", None, None): 80126, ("1", None, None): 80126,
        ("0", "3g.40gb", "1"): 39192, ("0", "1g.10gb", "2"): 9728,
    }  # fmt: skip
    # Label order as dcgm-exporter's own MIG line: the instance between the card and the host.
    anchor = [
        name
        for name in label_names_in_order(mig_anchor_series(anchors_dir))
        if name not in {"container", "namespace", "pod"}
    ]
    assert anchor[:7] == [
        "gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID",
    ]  # fmt: skip
    mig_lines = [line for line in text.splitlines() if "GPU_I_ID=" in line]
    assert len(mig_lines) == 4
    for line in mig_lines:
        names = label_names_in_order(line)
        assert names[:7] == anchor[:7], line
        assert names[7:] == ["Hostname", "DCGM_FI_DRIVER_VERSION"], line
        assert 'UUID="GPU-5f0b1c2d-0000-1111-2222-333344445555"' in line  # the parent card's
    # Only the memory series are per instance.
    assert all(
        line.startswith(("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE")) for line in mig_lines
    )


def test_a_slice_on_a_mig_instance_labels_that_instance_only() -> None:
    mig = MigDevice(
        index=0, uuid="MIG-aaaa", gpu_instance_id=3, profile="1g.6gb", memory_used_mib=2207
    )
    snapshot = NodeSnapshot(
        hostname="h",
        collected_at=1.0,
        gpus=[
            GpuReading(
                index=2,
                uuid="GPU-63bc",
                name="NVIDIA A30",
                memory_used_mib=5000,
                mig_devices=[mig],
                pods=[PodRef("triton-server", "default", "triton")],
            )
        ],
        allocations=[AllocationUsage("a-17", "MIG-aaaa", 6144, 25)],
    )
    [card, instance] = next(
        f
        for f in text_string_to_metric_families(render(snapshot))
        if f.name == "DCGM_FI_DEV_FB_USED"
    ).samples
    assert card.labels["pod"] == "triton-server"
    assert "allocation" not in card.labels
    assert instance.value == 2207
    assert instance.labels["GPU_I_ID"] == "3"
    assert instance.labels["allocation"] == "a-17"
    # Which pod holds which instance is not known per instance: none rather than a guess.
    assert "pod" not in instance.labels

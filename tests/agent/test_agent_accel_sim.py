"""The simulator impersonating other vendors (``--vendor``), for a mixed demo fleet."""

from __future__ import annotations

import json

import pytest

from agents.gpu_agent.backends.sim import SimulatedBackend
from agents.gpu_agent.cli import build_parser, main, make_backends
from agents.gpu_agent.metrics import render
from agents.gpu_agent.schema import check_snapshot


def _fleet(*argv: str) -> list:
    args = build_parser().parse_args(["--backend", "sim", "--hostname", "mix", *argv])
    return make_backends(args, clock=lambda: 1_700_000_000.0)


def test_nodes_take_vendors_in_turn_with_their_usual_cards() -> None:
    backends = _fleet("--nodes", "4", "--gpus", "2", "--vendor", "nvidia", "--vendor", "ascend",
                      "--vendor", "hygon")  # fmt: skip
    snaps = [b.collect() for b in backends]
    assert [(s.hostname, {g.vendor for g in s.gpus}, s.gpus[0].name) for s in snaps] == [
        ("mix-01", {None}, "NVIDIA A100-SXM4-80GB"),
        ("mix-02", {"ascend"}, "Ascend 910B2C"),
        ("mix-03", {"hygon"}, "DCU K100_AI"),
        ("mix-04", {None}, "NVIDIA A100-SXM4-80GB"),
    ]
    assert [(s.driver_version, s.cuda_version) for s in snaps[:3]] == [
        ("550.54.15", "12.4"), ("23.0.3", None), ("6.3.8", None)
    ]  # fmt: skip
    for snap in snaps:
        portal = json.loads(json.dumps(snap.to_portal_dict()))
        assert check_snapshot(portal) == portal


def test_an_impersonated_card_shows_only_what_its_tool_shows() -> None:
    (ascend,) = _fleet("--gpus", "1", "--vendor", "ascend")
    gpu = ascend.collect().gpus[0]
    assert gpu.uuid.startswith("ascend-") and gpu.pci_bus_id.count(":") == 2
    assert len(gpu.pci_bus_id.split(":")[0]) == 4  # npu-smi's 0000:xx:00.0
    present = set(gpu.to_dict())
    # npu-smi info has no clocks, energy, power limit, ECC, XIDs or MIG.
    assert not present & {
        "sm_clock_mhz", "energy_mj", "power_limit_w", "ecc_corrected_total", "xid_last",
        "mig_mode", "pcie_rx_bytes_per_s", "serial",
    }  # fmt: skip
    assert {"memory_used_mib", "utilization_gpu_pct", "temperature_c", "power_w"} <= present
    assert gpu.vendor_readings == {
        "hbm_used_mib": gpu.memory_used_mib, "hbm_total_mib": 65536
    }  # fmt: skip
    text = render(ascend.collect())
    assert "npu_chip_info_hbm_total_memory{" in text and 'device="davinci0"' in text


def test_a_given_model_wins_over_the_vendors_default() -> None:
    (node,) = _fleet("--gpus", "1", "--vendor", "ascend", "--model", "Ascend 910A")
    gpu = node.collect().gpus[0]
    assert (gpu.name, gpu.memory_total_mib) == ("Ascend 910A", 32768)


def test_an_unknown_vendor_is_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--backend", "sim", "--vendor", "biren"])
    assert "invalid choice: 'biren'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown vendor 'biren'"):
        SimulatedBackend("n", 1, "x", 1, vendor="biren")


def test_vendor_needs_the_simulator(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--backend", "npu-smi", "--vendor", "ascend", "--no-auth"])
    assert "--vendor and --idle-owner only apply to --backend sim" in capsys.readouterr().err

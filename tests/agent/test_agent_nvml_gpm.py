"""Profiling ratios through NVML's GPM, against the fake driver (pynvml's real structs and errors).

The fake keeps what a real driver keeps behind a sample handle (whose counters, and in
which order samples were taken), so the backend must pass two samples of one card,
older first, and free every one it allocated.
"""

from __future__ import annotations

import logging

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.gpu_agent.backends.nvml import NvmlBackend
from agents.gpu_agent.metrics import render
from tests.agent.fake_nvml import HOPPER_GPM, FakeCard, FakeDriver, install_fake_nvml

RATIOS = ("gr_engine_active_ratio", "tensor_active_ratio", "dram_active_ratio")
PROF_SERIES = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.875,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.4125,
    "DCGM_FI_PROF_DRAM_ACTIVE": 0.63,
}


def hopper(**kwargs: object) -> FakeCard:
    return FakeCard(name="NVIDIA H100 80GB HBM3", gpm=dict(HOPPER_GPM), **kwargs)  # type: ignore[arg-type]


def install(monkeypatch: pytest.MonkeyPatch, cards: list[FakeCard]) -> FakeDriver:
    return install_fake_nvml(monkeypatch.setattr, cards)


def ratios(gpu: dict[str, object]) -> dict[str, object]:
    return {key: gpu[key] for key in RATIOS if key in gpu}


def test_a_hopper_card_reports_ratios_from_the_second_collection_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    card = hopper()
    install(monkeypatch, [card])
    backend = NvmlBackend("n")
    # Nothing to compare the first sample with: absent, not zero.
    assert ratios(backend.collect().to_dict()["gpus"][0]) == {}
    assert ratios(backend.collect().to_dict()["gpus"][0]) == {
        "gr_engine_active_ratio": 0.875,
        "tensor_active_ratio": 0.4125,
        "dram_active_ratio": 0.63,
    }
    # Each ratio covers the interval since the previous collection.
    card.gpm = {**HOPPER_GPM, pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 100.4}
    gpu = backend.collect().to_dict()["gpus"][0]
    assert gpu["tensor_active_ratio"] == 1.0  # clamped like DCGM's ratios
    assert gpu["gr_engine_active_ratio"] == 0.875


def test_a_card_without_gpm_has_no_ratio_keys_and_is_never_sampled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver = install(monkeypatch, [FakeCard()])  # an A100: GPM says unsupported
    backend = NvmlBackend("n")
    for _ in range(3):
        gpu = backend.collect().to_dict()["gpus"][0]
        assert ratios(gpu) == {}
        assert gpu["health"] == "ok"
    assert driver.calls.count("gpm_support") == 1  # asked once: it never changes
    assert "gpm_alloc" not in driver.calls
    assert "gpm_metrics" not in driver.calls


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND]
)
def test_a_driver_without_gpm_leaves_the_ratios_out_quietly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    driver = install(monkeypatch, [hopper(failures={"gpm_support": code})])
    backend = NvmlBackend("n")
    for _ in range(3):
        assert ratios(backend.collect().to_dict()["gpus"][0]) == {}
    assert driver.calls.count("gpm_support") == 1
    assert "GPM" not in caplog.text


def test_an_unexpected_gpm_support_error_is_logged_once_and_asked_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    card = hopper(failures={"gpm_support": pynvml.NVML_ERROR_UNKNOWN})
    install(monkeypatch, [card])
    backend = NvmlBackend("n")
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert ratios(backend.collect().to_dict()["gpus"][0]) == {}
    assert caplog.text.count("cannot query GPM support") == 1
    del card.failures["gpm_support"]
    backend.collect()
    assert set(ratios(backend.collect().to_dict()["gpus"][0])) == set(RATIOS)


def test_a_metric_the_card_cannot_compute_is_absent_and_the_others_present(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    card = hopper()
    card.gpm = {**HOPPER_GPM, pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: pynvml.NVML_ERROR_NOT_SUPPORTED}
    install(monkeypatch, [card])
    backend = NvmlBackend("n")
    backend.collect()
    assert set(ratios(backend.collect().to_dict()["gpus"][0])) == {
        "gr_engine_active_ratio",
        "tensor_active_ratio",
    }


def test_a_failed_sample_starts_the_comparison_over(monkeypatch: pytest.MonkeyPatch) -> None:
    card = hopper()
    install(monkeypatch, [card])
    backend = NvmlBackend("n")
    backend.collect()
    card.failures["gpm_sample"] = pynvml.NVML_ERROR_UNKNOWN
    gpu = backend.collect().to_dict()["gpus"][0]
    assert ratios(gpu) == {}
    assert gpu["health"] == "ok"
    del card.failures["gpm_sample"]
    # The sample before the failure is two intervals old: not used.
    assert ratios(backend.collect().to_dict()["gpus"][0]) == {}
    assert set(ratios(backend.collect().to_dict()["gpus"][0])) == set(RATIOS)


# Support is asked and a sample taken on the first collection; metrics on the second.
@pytest.mark.parametrize(
    ("fieldname", "collection"), [("gpm_support", 1), ("gpm_sample", 1), ("gpm_metrics", 2)]
)
def test_a_gpu_lost_during_a_gpm_read_marks_the_card_lost(
    monkeypatch: pytest.MonkeyPatch, fieldname: str, collection: int
) -> None:
    card = hopper(uuid="GPU-hopper", failures={fieldname: pynvml.NVML_ERROR_GPU_IS_LOST})
    install(monkeypatch, [FakeCard(), card])
    backend = NvmlBackend("n")
    for _ in range(collection - 1):
        assert backend.collect().to_dict()["gpus"][1]["health"] == "ok"
    ok_gpu, lost_gpu = backend.collect().to_dict()["gpus"]
    assert ok_gpu["health"] == "ok"
    assert lost_gpu["health"] == "lost"
    assert lost_gpu["uuid"] == "GPU-hopper"
    assert ratios(lost_gpu) == {}


def test_a_gpu_lost_inside_the_metrics_struct_marks_the_card_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    card = hopper()
    install(monkeypatch, [card])
    backend = NvmlBackend("n")
    backend.collect()
    card.gpm = {**HOPPER_GPM, pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: pynvml.NVML_ERROR_GPU_IS_LOST}
    assert backend.collect().to_dict()["gpus"][0]["health"] == "lost"


def test_a_card_back_from_lost_needs_two_fresh_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    card = hopper()
    install(monkeypatch, [card])
    backend = NvmlBackend("n")
    backend.collect()
    card.failures["utilization"] = pynvml.NVML_ERROR_GPU_IS_LOST
    assert backend.collect().to_dict()["gpus"][0]["health"] == "lost"
    del card.failures["utilization"]
    assert ratios(backend.collect().to_dict()["gpus"][0]) == {}
    assert set(ratios(backend.collect().to_dict()["gpus"][0])) == set(RATIOS)


def test_close_frees_every_gpm_sample_before_shutdown(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = install(monkeypatch, [hopper(), FakeCard(), hopper(uuid="GPU-2")])
    backend = NvmlBackend("n")
    for _ in range(3):
        backend.collect()
    assert driver.calls.count("gpm_alloc") == 4  # two per Hopper card, once
    backend.close()
    assert driver.gpm_samples == {}
    assert len(driver.gpm_freed) == 4
    assert driver.calls[-1] == "shutdown"


def prof_samples(text: str) -> dict[str, list[tuple[str, float]]]:
    return {
        family.name: [(s.labels["gpu"], s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
        if family.name.startswith("DCGM_FI_PROF_") and "PCIE" not in family.name
    }


def test_profiling_series_appear_under_dcgm_names_only_for_cards_that_have_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, [hopper(), FakeCard(uuid="GPU-a100")])
    backend = NvmlBackend("n")
    first = render(backend.collect())
    # No card has a ratio yet, so the families are absent, HELP and TYPE included.
    assert prof_samples(first) == {}
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in first
    second = prof_samples(render(backend.collect()))
    assert second == {name: [("0", value)] for name, value in PROF_SERIES.items()}

"""DCGM's profiling ratios on Hopper and later, through NVML's GPM (GPU Performance Monitoring).

A GPM metric is computed from two samples of the card's counters taken some time
apart. The collector never sleeps for that: each card keeps the sample from the
previous collection, so a ratio covers the whole interval between two collections
(as DCGM's, which average over its sampling period). The first collection after
start, or after a failed sample, has nothing to compare with and reports no ratio.

Metric choice, as DCGM's fields of the same meaning (values are percent; DCGM's PROF
fields are 0.0-1.0 ratios, so they are divided by 100):

- ``GRAPHICS_UTIL`` -> ``gr_engine_active_ratio`` (DCGM_FI_PROF_GR_ENGINE_ACTIVE);
- ``ANY_TENSOR_UTIL`` -> ``tensor_active_ratio`` (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, which
  despite the "(HMMA)" in dcgm-exporter's help text counts any tensor pipe; DCGM has
  separate fields for the HMMA, IMMA and DFMA pipes alone);
- ``DRAM_BW_UTIL`` -> ``dram_active_ratio`` (DCGM_FI_PROF_DRAM_ACTIVE).

A card without GPM (pre-Hopper, or a driver older than GPM) has none of these keys:
zero would claim an idle card.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agents.gpu_agent.backends.nvml_reads import Get, GpuLost

log = logging.getLogger(__name__)

# (snapshot key, GPM metric name in pynvml), in the order they are asked for.
GPM_METRICS: tuple[tuple[str, str], ...] = (
    ("gr_engine_active_ratio", "NVML_GPM_METRIC_GRAPHICS_UTIL"),
    ("tensor_active_ratio", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    ("dram_active_ratio", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
)


@dataclass
class _CardSamples:
    """Two driver-allocated sample buffers per card, swapped each collection."""

    previous: Any
    current: Any
    has_previous: bool = False


class GpmReader:
    def __init__(self, nv: Any) -> None:
        self._nv = nv
        # Whether the card answers GPM at all: asked once, the answer never changes.
        self._supported: dict[int, bool] = {}
        self._samples: dict[int, _CardSamples] = {}
        self._warned: set[tuple[int, int]] = set()
        self._metric_ids = [getattr(nv, name) for _, name in GPM_METRICS]
        # One request struct reused for every card: it holds NVML_GPM_METRIC_MAX entries
        # (about 19 KB), too big to build afresh for every card every second.
        self._request: Any = None

    def read(self, index: int, handle: Any, get: Get) -> dict[str, float]:
        """The ratios since the previous collection; empty when there is none to compare."""
        if not self._is_supported(index, handle):
            return {}
        samples = self._samples.get(index)
        if samples is None:
            samples = self._allocate(index, get)
            if samples is None:
                return {}
        try:
            taken = get(index, "gpm_sample", self._nv.nvmlGpmSampleGet, handle, samples.current)
        except GpuLost:
            samples.has_previous = False
            raise
        if taken is None:
            # Without this sample the next ratio would span two intervals; start over.
            samples.has_previous = False
            return {}
        ratios: dict[str, float] = {}
        if samples.has_previous:
            ratios = self._metrics(index, samples.previous, samples.current, get)
        samples.previous, samples.current = samples.current, samples.previous
        samples.has_previous = True
        return ratios

    def forget(self, index: int) -> None:
        """A lost card's old sample must not be compared with one taken after it recovers."""
        samples = self._samples.get(index)
        if samples is not None:
            samples.has_previous = False

    def _is_supported(self, index: int, handle: Any) -> bool:
        known = self._supported.get(index)
        if known is not None:
            return known
        nv = self._nv
        try:
            support = nv.nvmlGpmQueryDeviceSupport(handle)
        except nv.NVMLError as exc:
            if exc.value == nv.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost from exc
            if exc.value in (nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_FUNCTION_NOT_FOUND):
                # Permanent: a card or a driver (before R520) without GPM.
                self._supported[index] = False
            else:
                # Anything else may pass: ask again next collection, say so once.
                self._warn(index, exc, "cannot query GPM support")
            return False
        self._supported[index] = bool(support.isSupportedDevice)
        return self._supported[index]

    def _allocate(self, index: int, get: Get) -> _CardSamples | None:
        first = get(index, "gpm_sample_alloc", self._nv.nvmlGpmSampleAlloc)
        second = get(index, "gpm_sample_alloc", self._nv.nvmlGpmSampleAlloc)
        if first is None or second is None:
            for sample in (first, second):
                if sample is not None:
                    self._free(sample)
            return None
        self._samples[index] = _CardSamples(first, second)
        return self._samples[index]

    def _metrics(self, index: int, older: Any, newer: Any, get: Get) -> dict[str, float]:
        nv = self._nv
        request = self._request
        if request is None:
            # The inputs other than the samples never change and the driver only writes the
            # results, so they are set once (pynvml's struct attributes are slow Python).
            request = self._request = nv.c_nvmlGpmMetricsGet_t()
            request.version = nv.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(self._metric_ids)
            for slot, metric_id in enumerate(self._metric_ids):
                request.metrics[slot].metricId = metric_id
        request.sample1 = older
        request.sample2 = newer
        if get(index, "gpm_metrics", nv.nvmlGpmMetricsGet, request) is None:
            return {}
        ratios: dict[str, float] = {}
        results = request.metrics
        for slot, (key, _) in enumerate(GPM_METRICS):
            metric = results[slot]
            # Each metric reports its own status inside the struct rather than raising.
            if metric.nvmlReturn == nv.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost
            if metric.nvmlReturn != nv.NVML_SUCCESS:
                continue
            # Counter sampling jitter can land a hair outside 0-100; DCGM's ratios never do.
            # Four decimals (0.01 %) is finer than the counters are meaningful.
            ratios[key] = round(min(max(metric.value / 100.0, 0.0), 1.0), 4)
        return ratios

    def _warn(self, index: int, exc: Any, what: str) -> None:
        key = (index, exc.value)
        if key not in self._warned:
            self._warned.add(key)
            log.warning("GPU %d: %s: %s", index, what, exc)

    def _free(self, sample: Any) -> None:
        try:
            self._nv.nvmlGpmSampleFree(sample)
        except self._nv.NVMLError as exc:
            log.debug("nvmlGpmSampleFree failed: %s", exc)

    def close(self) -> None:
        """Free every sample buffer; must run before nvmlShutdown."""
        for samples in self._samples.values():
            self._free(samples.previous)
            self._free(samples.current)
        self._samples.clear()


__all__ = ["GPM_METRICS", "GpmReader"]

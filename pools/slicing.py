"""Which cards can be sliced, and the names a slice of each goes by (docs/pools.md, "Other
vendors' cards").

NVIDIA cards are sliced by the agent (HAMi-core's and MPS's limits, pools.launch). Other
vendors' cards only through HAMi's device plugins in Kubernetes, under that vendor's
resource names (the table in docs/agent.md, "Slicing per vendor", read from HAMi's own
docs); a vendor or model HAMi does not slice is handed out as whole cards only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from django.utils.translation import gettext as _

from agents.choices import GpuVendor, vendor_label

# npu-smi names a chip "910B2C", HAMi's vNPU templates "Ascend910B2": the longest HAMi
# name the model starts with (spaces dropped) is the card's resource.
OTHER_VENDORS = tuple(v for v in GpuVendor.values if v != GpuVendor.NVIDIA)
_ASCEND_HAMI = ("Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend310P")


@dataclass(frozen=True, slots=True)
class Resources:
    """A pod's limits for one card: ``count`` always; ``memory`` (in units of
    ``memory_unit_mib``, rounded up) and ``cores`` (percent of a card) only where the
    vendor's card can be sliced."""

    count: str
    memory: str | None = None
    cores: str | None = None
    memory_unit_mib: int = 1

    @property
    def sliceable(self) -> bool:
        return self.memory is not None

    def limits(self, *, memory_mib: int, compute_pct: int, whole: bool) -> dict[str, int]:
        out = {self.count: 1}
        if whole or not self.sliceable:
            return out
        out[self.memory] = max(1, math.ceil(memory_mib / self.memory_unit_mib))
        if self.cores:
            out[self.cores] = compute_pct
        return out


def _ascend(model: str) -> Resources:
    compact = re.sub(r"\s+", "", model)
    for name in sorted(_ASCEND_HAMI, key=len, reverse=True):
        if compact.startswith(name):
            return Resources(f"huawei.com/{name}", f"huawei.com/{name}-memory")
    # Ascend's own device plugin: whole chips, by family.
    family = "Ascend310" if compact.startswith("Ascend310") else "Ascend910"
    return Resources(f"huawei.com/{family}")


def resources(vendor: str, model: str) -> Resources:
    """The Kubernetes resource names for a card of this vendor and model."""
    if vendor == GpuVendor.ASCEND:
        return _ascend(model)
    if vendor == GpuVendor.HYGON:
        return Resources("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores")
    if vendor == GpuVendor.METAX:
        # vmemory in GiB.
        return Resources("metax-tech.com/sgpu", "metax-tech.com/vmemory", "metax-tech.com/vcore",
                         memory_unit_mib=1024)  # fmt: skip
    if vendor == GpuVendor.CAMBRICON:
        if "MLU370" in model.upper():  # HAMi slices the MLU370 only
            return Resources("cambricon.com/mlunum", "cambricon.com/mlumem")
        return Resources("cambricon.com/mlu")
    if vendor == GpuVendor.MOORETHREADS:
        # HAMi's sgpu-core unit is not stated in the docs read: whole cards here.
        return Resources("mthreads.com/vgpu")
    if vendor == GpuVendor.AMD:
        return Resources("amd.com/gpu")
    return Resources("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores")


def sliceable(vendor: str, model: str) -> bool:
    return resources(vendor, model).sliceable


def whole_only(kinds) -> list[tuple[str, str]]:
    """Of (vendor, model) pairs, those handed out as whole cards only."""
    return sorted({(v, m) for v, m in kinds if not sliceable(v, m)})


def slice_refusal(kinds) -> str | None:
    """Why a slice (not a whole card) cannot be asked of these cards (vendor, model)
    pairs, or None when it can."""
    whole = whole_only(kinds)
    if not whole:
        return None
    names = ", ".join(f"{vendor_label(v)} {m}" for v, m in whole)
    return _(
        "These cards are handed out as whole cards only (no slicing for them): %(cards)s. "
        "Ask for whole cards, or name a GPU model or vendor whose cards can be sliced."
    ) % {"cards": names}

"""Reference data owned by others (dcgm-exporter's counters, dashboard, series lines).

It is never copied into the repository: tests read it from ``GPU_PORTAL_ANCHORS``, by default
``shared/anchors`` beside the repository root. A fresh clone without it skips those tests
with a message saying what is missing; CI sets ``REQUIRE_ANCHORS=1`` so that there a missing
folder fails instead. Imports nothing from Django: the agent's tests (tests/agent/) run alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PATH_VARIABLE = "GPU_PORTAL_ANCHORS"
REQUIRE_VARIABLE = "REQUIRE_ANCHORS"
DEFAULT_ROOT = REPO.parent / "shared" / "anchors"

# What each anchor folder holds and where it comes from, for the message when it is missing.
CONTENTS = {
    "dcgm-exporter": (
        "NVIDIA dcgm-exporter's etc/default-counters.csv and grafana/dcgm-exporter-dashboard.json"
        " (https://github.com/NVIDIA/dcgm-exporter) and sample-series.txt, series lines quoted"
        " in its issues; SOURCE.md there names the commits"
    ),
    "kubernetes": (
        "Kueue v0.19.2's CustomResourceDefinitions (kubernetes-sigs/kueue,"
        " config/components/crd/bases) in kueue-v0.19.2/; SOURCE.md there names the commit"
    ),
    "accelerators": (
        "captures of npu-smi, hy-smi, rocm-smi, amd-smi, mx-smi, mthreads-gmi and cnmon output"
        " from vendor docs, issues and other projects' tests, one folder per vendor; SOURCE.md"
        " in each names the upstream file and commit"
    ),
}


def anchors_root() -> Path:
    configured = os.environ.get(PATH_VARIABLE, "").strip()
    return Path(configured).expanduser() if configured else DEFAULT_ROOT


def required() -> bool:
    return os.environ.get(REQUIRE_VARIABLE, "").strip().lower() in {"1", "true", "yes"}


def anchor_dir(name: str) -> Path:
    """The anchor folder ``name``; skips the calling test when it is absent (fails if required)."""
    path = anchors_root() / name
    if path.is_dir():
        return path
    message = (
        f"reference data {name!r} not found at {path}: "
        f"{CONTENTS.get(name, 'files owned outside this repository')}. "
        f"Put the project's shared anchors folder at {DEFAULT_ROOT} "
        f"or set {PATH_VARIABLE} to the folder that holds {name}/."
    )
    if required():
        pytest.fail(f"{message} ({REQUIRE_VARIABLE} is set, so this is a failure.)")
    pytest.skip(message)


def dcgm_exporter() -> Path:
    return anchor_dir("dcgm-exporter")


def accelerator_file(vendor: str, name: str) -> Path:
    """One captured vendor-tool output, ``accelerators/<vendor>/<name>`` (skips or fails as
    ``anchor_dir`` when the folder is absent; a missing file always fails)."""
    path = anchor_dir("accelerators") / vendor / name
    if not path.is_file():
        pytest.fail(f"{path} is missing from the anchors folder")
    return path


@pytest.fixture(scope="session")
def anchors_dir() -> Path:
    """dcgm-exporter's anchor folder (a fixture for tests/conftest.py and tests/agent/)."""
    return dcgm_exporter()


def kueue_crd(plural: str) -> Path:
    """Kueue v0.19.2's CustomResourceDefinition of ``plural`` (clusterqueues, localqueues...)."""
    path = anchor_dir("kubernetes") / "kueue-v0.19.2" / f"kueue.x-k8s.io_{plural}.yaml"
    if not path.is_file():
        pytest.fail(f"{path} is missing from the anchors folder")
    return path

"""The agent installs alone: a wheel of agents/gpu_agent into a fresh venv, no Django."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.agent.conftest import REPO_ROOT


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # Without PYTHONPATH: a checkout on it would be imported instead of the installed wheel.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_agent_builds_and_installs_alone_without_django(tmp_path: Path) -> None:
    # Build from a copy, so the build leaves nothing behind in the checkout.
    source = tmp_path / "src"
    shutil.copytree(
        REPO_ROOT / "agents" / "gpu_agent", source, ignore=shutil.ignore_patterns("__pycache__")
    )
    built = run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
        "--wheel-dir", tmp_path / "dist", source,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (tmp_path / "dist").glob("gpu_portal_agent-*.whl")

    venv = tmp_path / "venv"
    made = run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = run(
        sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
        wheel,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr

    # Outside the checkout, so nothing but the installed wheel can be imported.
    help_text = run(venv / "bin" / "gpu-agent", "--help", cwd=tmp_path)
    assert help_text.returncode == 0, help_text.stderr
    backends = "{sim,nvml,auto,npu-smi,hy-smi,rocm-smi,amd-smi,mx-smi,mthreads-gmi,cnmon}"
    assert f"--backend {backends}" in help_text.stdout
    assert "--kubelet-socket" in help_text.stdout
    no_django = run(python, "-c", "import django", cwd=tmp_path)
    assert no_django.returncode != 0
    assert "No module named 'django'" in no_django.stderr
    where = run(python, "-c", "import agents.gpu_agent as a; print(a.__file__)", cwd=tmp_path)
    assert str(venv) in where.stdout
    # The committed gRPC stubs and their .proto travel with the package.
    proto = run(python, "-c", "import importlib.resources as r; "
                "print(r.files('agents.gpu_agent.kubelet_api').joinpath('podresources.proto')"
                ".is_file())", cwd=tmp_path)  # fmt: skip
    assert proto.stdout.strip() == "True"

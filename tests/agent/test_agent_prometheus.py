"""NVIDIA's Grafana dashboard for dcgm-exporter shows data when a real Prometheus scrapes us.

Starts Debian's prometheus against a real agent process at a one-second scrape
interval, then evaluates every PromQL expression of the dashboard's panels that
the default counters feed, through Prometheus's HTTP API.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import free_port_block, http_get, stop

PROMETHEUS = os.environ.get("PROMETHEUS_PATH", "/usr/bin/prometheus")
READY_TIMEOUT_S = 30.0


def default_counter_names(anchors: Path) -> set[str]:
    names = set()
    for line in (anchors / "default-counters.csv").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            names.add(line.split(",", 1)[0].strip())
    return names


def dashboard_queries(anchors: Path) -> list[tuple[str, str]]:
    """(panel title, expression) for each panel target fed by a default counter."""
    dashboard = json.loads((anchors / "dcgm-exporter-dashboard.json").read_text())
    counters = default_counter_names(anchors)
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            expr = target.get("expr", "")
            if set(re.findall(r"DCGM_FI_\w+", expr)) & counters:
                queries.append((panel["title"], expr))
    return queries


def substitute(expr: str) -> str:
    # What Grafana sends with "All" selected for the template variables.
    return (
        expr.replace("$instance", ".*")
        .replace("$gpu", ".*")
        .replace("$__rate_interval", "1m")
        .replace("$__interval", "5s")
    )


def query(base: str, expr: str) -> list[Any]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    result = http_get(url)
    assert result.status == 200, result.body
    body = result.json()
    assert body["status"] == "success", body
    return body["data"]["result"]


@pytest.fixture
def prometheus(tmp_path: Path, start_agent: Any) -> Iterator[str]:
    if not Path(PROMETHEUS).is_file():
        pytest.fail(f"Prometheus not found at {PROMETHEUS} (apt-get install prometheus)")
    agent = start_agent(
        "--backend", "sim", "--gpus", "4", "--model", "NVIDIA H100 80GB HBM3", "--no-auth",
    )  # fmt: skip
    target = agent.urls[0].removeprefix("http://")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: gpu-agent\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = free_port_block(1)
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()}")
            try:
                if query(base, 'up{job="gpu-agent"} == 1'):
                    break
            except (AssertionError, OSError):
                pass
            time.sleep(0.25)
        else:
            pytest.fail(
                f"no scrape in {READY_TIMEOUT_S} s: {(tmp_path / 'prometheus.log').read_text()}"
            )
        yield base
    finally:
        stop(proc)  # type: ignore[arg-type]
        log.close()


def test_every_dashboard_panel_fed_by_default_counters_gets_data(
    prometheus: str, anchors_dir: Path
) -> None:
    queries = dashboard_queries(anchors_dir)
    titles = {title for title, _ in queries}
    # The panels of NVIDIA's dashboard that read default counters, tensor cores included.
    assert titles == {
        "GPU Temperature", "GPU Avg. Temp", "GPU Power Usage", "GPU Power Total",
        "GPU SM Clocks", "GPU Utilization", "GPU Framebuffer Mem Used", "Tensor Core Utilization",
    }  # fmt: skip
    # The dashboard's own variable queries, which fill its instance and gpu pickers.
    for label in ("instance", "gpu"):
        url = f"{prometheus}/api/v1/label/{label}/values?match[]=DCGM_FI_DEV_GPU_TEMP"
        assert http_get(url).json()["data"], label
    empty = []
    for title, expr in queries:
        result = query(prometheus, substitute(expr))
        if not result:
            empty.append((title, expr))
    assert empty == []
    per_gpu = query(prometheus, substitute('DCGM_FI_DEV_GPU_UTIL{instance=~"$instance"}'))
    assert sorted(s["metric"]["gpu"] for s in per_gpu) == ["0", "1", "2", "3"]
    total = query(prometheus, "sum(DCGM_FI_DEV_POWER_USAGE)")
    assert float(total[0]["value"][1]) > 4 * 60  # four H100s idle at about 72 W each

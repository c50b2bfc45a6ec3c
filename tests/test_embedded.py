"""The embedded default (`./dev up`: its own PostgreSQL from the wheel, no Redis): its
in-process store serves the same data paths as production's Redis."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request

import pytest

from tests import procs

pytestmark = pytest.mark.stack


def _gpus(url: str, token: str) -> list[dict]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})  # noqa: S310
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (loopback)
        return json.load(response)["results"]


def _active_slices(url: str, token: str) -> list[dict]:
    return [a for a in _gpus(url, token) if a["state"] == "active"]


def test_embedded_demo_serves_live_readings(tmp_path):
    """Readings reach the API from the in-process store, and keep changing as polls land;
    the demo pool's slices are placed."""
    # Two nodes, the demo's hot node on the port after theirs, then its Ascend and Hygon.
    port, agent_port = procs.free_port(), procs.free_ports(5)
    env = procs.embedded_env(tmp_path, GPU_POLL_INTERVAL="1")
    demo = procs.start(
        "demo",
        [procs.PYTHON, "manage.py", "demo", "--port", str(port), "--agent-port",
         str(agent_port), "--nodes", "2", "--gpus", "2"],
        env,
    )  # fmt: skip
    try:
        # As long as test_demo_schedule waits: seeding is slow on a busy machine.
        [login] = demo.wait_for("Log in as", timeout=240)
        assert "(embedded," in "".join(demo.lines)
        user = re.search(r"Log in as (\S+) /", login).group(1)
        created = subprocess.run(
            [procs.PYTHON, "manage.py", "create_api_token", user], cwd=procs.REPO, env=env,
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        token = created.stdout.strip()
        url = f"http://127.0.0.1:{port}/api/v1/gpus/"
        seen: dict[str, set] = {}
        deadline = time.monotonic() + 30
        # Until some card has shown two different utilizations: fresh readings each cycle.
        while not any(len(values) > 1 for values in seen.values()):
            assert time.monotonic() < deadline, f"no reading changed: {seen}"
            for gpu in _gpus(url, token):
                if "utilization_gpu_pct" in gpu["latest"]:
                    seen.setdefault(gpu["uuid"], set()).add(gpu["latest"]["utilization_gpu_pct"])
            time.sleep(0.5)
        # 2 x 2 NVIDIA cards, the hot node's 2, and 2 each on the Ascend and Hygon nodes.
        assert len(seen) == 10
        vendors = {gpu["vendor"] for gpu in _gpus(url, token)}
        assert vendors == {"nvidia", "ascend", "hygon"}, vendors
        # The demo pool's slices, placed by the same statements as in production.
        allocations = f"http://127.0.0.1:{port}/api/v1/allocations/"
        while not _active_slices(allocations, token):
            assert time.monotonic() < deadline + 30, "".join(demo.lines[-30:])
            time.sleep(0.5)
        assert "Traceback" not in "".join(demo.lines), "".join(demo.lines[-30:])
    finally:
        # Its exit waits for the simulator's and for a task in flight: on a loaded machine
        # that has taken more than stop()'s default 10 s.
        assert demo.stop(timeout=30) in (0, -15), "".join(demo.lines[-30:])


def test_the_embedded_store_is_in_process_and_runs_the_claim_script(in_process_redis):
    from fakeredis import FakeRedis

    from portal import redis_client
    from telemetry import sample_buffer

    assert isinstance(redis_client.client(), FakeRedis)
    source = sample_buffer._RedisBuffer()
    source.append(100, b"blob")
    [(minute, claim_key, blobs)] = source.claim(before=101)
    assert (minute, blobs) == (100, [b"blob"])
    assert in_process_redis.exists(claim_key) and source.claim(before=101) == []

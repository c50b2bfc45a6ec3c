"""Waiting for a request to be placed, and the environment of its vGPUs."""

from __future__ import annotations

import shlex
import time

from gpuctl.client import ENDED, PLACED, ApiError, Client

# The longest single long-poll; the server returns earlier when the state changes.
LONG_POLL = 20
# Between polls of a server that answers at once (no ?wait= support yet).
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 5.0


class WaitTimeout(Exception):
    def __init__(self, request: dict):
        super().__init__(f"request {request.get('id')} is still {request.get('state')}")
        self.request = request


class NotPlaced(Exception):
    """The request ended (rejected, cancelled, expired, released) without being placed."""

    def __init__(self, request: dict):
        super().__init__(f"request {request.get('id')} is {request.get('state')}")
        self.request = request


def wait_placed(client: Client, req_id: int, timeout: float) -> dict:
    """The request once allocated; WaitTimeout after ``timeout`` seconds, NotPlaced if it
    ends first. Long-polls with ``?wait=``; where the server answers at once instead, polls
    with a growing pause."""
    deadline = time.monotonic() + timeout
    pause = BACKOFF_FIRST
    while True:
        remaining = deadline - time.monotonic()
        wait = max(0, min(LONG_POLL, int(remaining)))
        asked = time.monotonic()
        request = client.get_request(req_id, wait=wait)
        state = request.get("state")
        if state == PLACED:
            return request
        if state in ENDED:
            raise NotPlaced(request)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(request)
        if time.monotonic() - asked < max(1.0, wait / 2):
            # Answered at once: the server does not hold the call, so pause here.
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, BACKOFF_MAX)


def environments(client: Client, request: dict) -> list[dict[str, str]]:
    """The launch environment of each of the request's vGPUs, in allocation order."""
    envs = []
    for brief in sorted(request.get("allocations") or [], key=lambda a: a["id"]):
        if brief.get("state") != "active":
            continue
        env = client.allocation(brief["id"]).get("launch_env")
        if env:
            envs.append({str(k): str(v) for k, v in env.items()})
    if not envs:
        raise ApiError(
            409,
            f"Request {request.get('id')} holds no placed vGPU (state: {request.get('state')}).",
        )
    return envs


def pick(envs: list[dict[str, str]], vgpu: int) -> dict[str, str]:
    if not 0 <= vgpu < len(envs):
        raise ApiError(
            400,
            f"No vGPU {vgpu}: the request holds {len(envs)} (0 to {len(envs) - 1}).",
            {"vgpu": [f"0 to {len(envs) - 1}"]},
        )
    return envs[vgpu]


def exports(env: dict[str, str]) -> str:
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())

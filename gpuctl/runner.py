"""``gpuctl run``: request, wait, run the command inside the vGPU, release in every case.

A signal (SIGINT, SIGTERM, SIGHUP) while waiting stops the wait; while the command runs it
is passed on to the command, and gpuctl waits for it to end. Either way the request is
released before gpuctl exits: with the command's own code (128 + N when signal N ended it,
as a shell says), or 128 + N when the signal came before the command started.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import uuid
from typing import Any

from gpuctl.client import PLACED, ApiError, Client
from gpuctl.waiting import environments, pick, wait_placed

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    # A BaseException, like KeyboardInterrupt: no `except Exception` on the way swallows it.
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def run(client: Client, body: dict[str, Any], command: list[str], args: argparse.Namespace) -> int:
    child: subprocess.Popen | None = None
    received: list[int] = []

    creating = True

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)
        if child is not None:
            if child.poll() is None:
                child.send_signal(signum)
            return
        # Not in the middle of the create: its answer holds the id the release needs.
        if not creating:
            raise Interrupted(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in SIGNALS}
    req: dict | None = None
    code = 0
    try:
        req = client.create_request(body, str(uuid.uuid4()))
        creating = False
        if received:
            raise Interrupted(received[0])
        if req["state"] != PLACED:  # within policy and first in line: placed by the create
            _note(args, f"request {req['id']}: {req['state']}, waiting up to {args.wait:g} s")
            req = wait_placed(client, req["id"], args.wait)
        env = pick(environments(client, req), args.vgpu)
        _note(args, f"request {req['id']}: placed; running {command[0]}")
        try:
            child = subprocess.Popen(command, env={**os.environ, **env})  # noqa: S603 (the user's)
        except OSError as exc:
            raise ApiError(400, f"cannot run {command[0]}: {exc.strerror}") from None
        code = child.wait()
        code = 128 - code if code < 0 else code  # killed by a signal: as a shell reports it
        return code
    except Interrupted as exc:
        code = 128 + exc.signum
        return code
    finally:
        # Released on every way out: the command's end, an error, a timeout, a signal.
        # Signals only counted from here on: a second Ctrl-C must not skip the release.
        for sig in SIGNALS:
            signal.signal(sig, lambda signum, frame: received.append(signum))
        if req is not None:
            _release(client, req["id"], args, code)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _note(args: argparse.Namespace, text: str) -> None:
    # stdout belongs to the command; gpuctl speaks on stderr.
    if not args.json:
        sys.stderr.write(f"gpuctl: {text}\n")
        sys.stderr.flush()


def _release(client: Client, req_id: int, args: argparse.Namespace, code: int) -> None:
    try:
        released = client.release(req_id)
    except ApiError as exc:
        sys.stderr.write(f"gpuctl: could not release request {req_id}: {exc}\n")
        return
    if args.json:
        sys.stderr.write(
            json.dumps({"request": released, "exit_code": code}, sort_keys=True) + "\n"
        )
    else:
        _note(args, f"request {req_id}: {released['state']}")

"""``gpuctl run --cluster``: the portal makes a gated Job in a mapped namespace of a
Kubernetes cluster; gpuctl waits for its request, then for the Job, and exits with what
became of it.

Exit codes: 0 the Job succeeded; 6 its request ended without GPUs (rejected, cancelled,
expired); 7 the Job failed, or was deleted before it finished; 4 the wait for the request
timed out; the codes of every verb otherwise (2 bad input, 3 auth, 5 server). A signal
(SIGINT, SIGTERM, SIGHUP) releases the request, which makes the portal delete the Job, and
exits 128 + N, as ``gpuctl run`` does; one during the create is held until its answer (with
the request to release) is in. Every way out releases the request.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import uuid
from typing import Any

from gpuctl.client import ENDED, PLACED, Client
from gpuctl.runner import SIGNALS, Interrupted, _note
from gpuctl.waiting import wait_placed

JOB_FAILED = 7
# Between reads of the Job: from 1 s growing to 5 s.
POLL_FIRST, POLL_MAX = 1.0, 5.0
FINISHED = {"succeeded": 0, "failed": JOB_FAILED, "gone": JOB_FAILED}


def job_body(args: argparse.Namespace, reason: str) -> dict[str, Any]:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    body: dict[str, Any] = {
        "namespace": args.namespace,
        "image": args.image,
        "command": command,
        "gpus": args.count,
        "reason": reason,
        "env": dict(args.env or []),
    }
    optional = {"compute_pct": args.compute, "memory_mib": args.memory,
                "duration_hours": args.hours}  # fmt: skip
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


def run_job(client: Client, body: dict[str, Any], args: argparse.Namespace) -> int:
    received: list[int] = []
    creating = True

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)
        if not creating:  # during the create, its answer holds the request to release
            raise Interrupted(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in SIGNALS}
    link: dict | None = None
    code = 0
    try:
        link = client.create_job(args.cluster, body, str(uuid.uuid4()))
        creating = False
        if received:
            raise Interrupted(received[0])
        req_id = link["request"]
        where = f"{link['namespace']}/{link['name']}"
        _say(args, f"request {req_id}: {link.get('request_state')}; job {where}")
        if link.get("request_state") != PLACED:
            _note(args, f"request {req_id}: waiting up to {args.wait:g} s")
            req = wait_placed(client, req_id, args.wait)
            _say(args, f"request {req_id}: {req['state']}")
        code, link = _follow(client, args, link)
        return code
    except Interrupted as exc:
        code = 128 + exc.signum
        return code
    finally:
        for sig in SIGNALS:
            signal.signal(sig, lambda signum, frame: received.append(signum))
        if link is not None and link.get("request"):
            _release(client, link, args, code)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _follow(client: Client, args: argparse.Namespace, link: dict) -> tuple[int, dict]:
    """Read the Job until it has finished: its exit code, and the last read."""
    pause = POLL_FIRST
    last = None
    while True:
        link = client.get_job(args.cluster, link["id"])
        outcome = (link.get("job") or {}).get("outcome")
        if outcome != last:
            _say(args, f"job {link['namespace']}/{link['name']}: {outcome}")
            last = outcome
        if outcome in FINISHED:
            return FINISHED[outcome], link
        if link.get("request_state") in ENDED and outcome == "waiting":
            # Its request ended before its Pod ran (expired, cancelled): it never will.
            return JOB_FAILED, link
        # "unknown" (the cluster does not answer): read again, the Job may still finish.
        time.sleep(pause)
        pause = min(pause * 1.5, POLL_MAX)


def _say(args: argparse.Namespace, text: str) -> None:
    # The request id and state are what a CI log needs, so they are said even with --json.
    if args.json:
        sys.stderr.write(json.dumps({"gpuctl": text}) + "\n")
        sys.stderr.flush()
    else:
        _note(args, text)


def _release(client: Client, link: dict, args: argparse.Namespace, code: int) -> None:
    from gpuctl.client import ApiError

    try:
        released = client.release(link["request"])
    except ApiError as exc:
        sys.stderr.write(f"gpuctl: could not release request {link['request']}: {exc}\n")
        return
    if args.json:
        sys.stderr.write(json.dumps({"request": released, "job": link, "exit_code": code},
                                    sort_keys=True) + "\n")  # fmt: skip
    else:
        _note(args, f"request {released['id']}: {released['state']}")

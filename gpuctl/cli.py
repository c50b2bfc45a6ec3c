"""gpuctl: ask the GPU Portal for vGPUs from a shell or a CI job.

Exit codes: 0 done; 2 bad input or refused by the portal (4xx); 3 not authenticated or
not allowed (401/403); 4 the wait timed out; 5 server or network error; 6 the request ended
(rejected, cancelled, expired) without being placed; 7 (run --cluster) the Kubernetes Job
failed or was deleted before it finished. ``run`` exits with its command's code.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import signal
import socket
import sys
import uuid
from collections.abc import Callable
from typing import Any

from gpuctl import config
from gpuctl.client import API, PLACED, ApiError, Client
from gpuctl.waiting import NotPlaced, WaitTimeout, environments, exports, pick, wait_placed

OK, BAD_INPUT, AUTH, TIMED_OUT, SERVER, NOT_PLACED = 0, 2, 3, 4, 5, 6
DEFAULT_RUN_WAIT = 3600


class Usage(Exception):
    """Bad input found before asking the portal."""


def exit_code(error: ApiError) -> int:
    if error.status in (401, 403):
        return AUTH
    if error.status is None or error.status >= 500:
        return SERVER
    return BAD_INPUT


def memory_mib(text: str) -> int:
    """``8192``, ``8192M``, ``8G``, ``8GiB``, ``512MiB``: MiB."""
    match = re.fullmatch(r"\s*(-?\d+)\s*([MmGgTt]?)(?:i?[Bb])?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8192, 512M, 8G)")
    number, unit = int(match[1]), match[2].upper()
    return number * {"": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def default_reason() -> str:
    # A CI job's own address says best why the GPU was held.
    for name in ("CI_JOB_URL", "BUILD_URL", "GITHUB_RUN_ID"):
        if os.environ.get(name):
            return f"gpuctl: {os.environ[name]}"
    return f"gpuctl on {socket.gethostname()}"


# --- output ------------------------------------------------------------------------------


def emit(args: argparse.Namespace, data: Any, text: str, *, stream=None) -> None:
    out = stream or sys.stdout
    if args.json:
        out.write(json.dumps(data, indent=None if stream else 2, sort_keys=True) + "\n")
    elif text:
        out.write(text if text.endswith("\n") else text + "\n")
    out.flush()


def fail(args: argparse.Namespace, exit_with: int, message: str, **extra: Any) -> int:
    if getattr(args, "json", False):
        sys.stderr.write(json.dumps({"error": {"message": message, **extra}}) + "\n")
    else:
        sys.stderr.write(f"gpuctl: {message}\n")
    return exit_with


def describe(req: dict) -> str:
    size = (
        "whole card"
        if req.get("whole_card")
        else (f"{req.get('compute_pct')}% compute, {req.get('memory_mib')} MiB")
    )
    lines = [
        f"request {req['id']}: {req['state']}  ({req.get('count')} x {size})",
        f"  tenant {req.get('tenant')}  pool {req.get('pool')}  by {req.get('requester')}",
    ]
    if req.get("queue_position"):
        lines.append(f"  queue position {req['queue_position']}")
    if req.get("expires_at"):
        lines.append(f"  expires {req['expires_at']}")
    if req.get("decision_comment"):
        lines.append(f"  comment: {req['decision_comment']}")
    for alloc in req.get("allocations") or []:
        where = f"{alloc.get('node') or '-'} {alloc.get('gpu_uuid') or '-'}"  # None: card gone
        lines.append(f"  vGPU {alloc['id']} {alloc['state']} on {where}")
    return "\n".join(lines)


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


# --- verbs -------------------------------------------------------------------------------


def client_for(args: argparse.Namespace) -> Client:
    settings = config.load()
    if not settings.url or not settings.token:
        raise Usage(
            "no portal configured: run `gpuctl configure --url URL` "
            "or set GPUCTL_URL and GPUCTL_TOKEN"
        )
    return Client(settings.url, settings.token)


def cmd_configure(args: argparse.Namespace) -> int:
    saved = config.read_file()
    url = args.url or saved.url or (input("Portal URL: ") if sys.stdin.isatty() else "")
    if args.token_stdin:
        token = sys.stdin.readline().strip()
    else:
        token = args.token or (
            getpass.getpass("API token (gpp_...): ") if sys.stdin.isatty() else saved.token
        )
    if not url or not token:
        raise Usage("configure needs --url and a token (--token, --token-stdin or a prompt)")
    settings = config.Settings(
        url=url.rstrip("/"),
        token=token,
        tenant=args.tenant or saved.tenant,
        pool=args.pool or saved.pool,
    )
    if args.check:
        Client(settings.url, settings.token).call("GET", f"{API}/gpu-requests/", query={"limit": 1})
    where = config.save(settings)
    emit(args, {"config": str(where), "url": settings.url}, f"Saved to {where}.")
    return OK


def request_body(client: Client, args: argparse.Namespace) -> dict[str, Any]:
    settings = config.load()
    tenant, pool = args.tenant or settings.tenant, args.pool or settings.pool
    if not tenant or not pool:
        raise Usage("say which --tenant and --pool (or set GPUCTL_TENANT and GPUCTL_POOL)")
    body: dict[str, Any] = {
        "tenant": client.resolve("tenants", tenant),
        "pool": client.resolve("pools", pool),
        "count": args.count,
        "whole_card": args.whole_card,
        "reason": args.reason or default_reason(),
        "duration_hours": args.hours,
    }
    optional = {
        "compute_pct": args.compute,
        "memory_mib": args.memory,
        "gpu_model": args.model,
        "node_name": args.node,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    if args.node_label:
        body["node_labels"] = dict(args.node_label)
    if args.same_node:
        body["same_node"] = True
    return body


def cmd_request(args: argparse.Namespace) -> int:
    client = client_for(args)
    req = client.create_request(request_body(client, args), str(uuid.uuid4()))
    if args.wait and req["state"] != PLACED:
        req = wait_placed(client, req["id"], args.wait)
    emit(args, req, describe(req))
    return OK


def cmd_wait(args: argparse.Namespace) -> int:
    req = wait_placed(client_for(args), args.id, args.timeout)
    emit(args, req, describe(req))
    return OK


def cmd_env(args: argparse.Namespace) -> int:
    client = client_for(args)
    env = pick(environments(client, client.get_request(args.id)), args.vgpu)
    emit(args, env, exports(env))
    return OK


def cmd_release(args: argparse.Namespace) -> int:
    req = client_for(args).release(args.id)
    emit(args, req, f"request {req['id']}: {req['state']}")
    return OK


def cmd_status(args: argparse.Namespace) -> int:
    req = client_for(args).get_request(args.id)
    emit(args, req, describe(req))
    return OK


def cmd_list(args: argparse.Namespace) -> int:
    query = {"state": args.state or None, "mine": "true" if args.mine else None}
    rows = client_for(args).results(f"{API}/gpu-requests/", query)
    text = table(
        [
            [
                r["id"],
                r["state"],
                r["tenant"],
                r["pool"],
                r["count"],
                "whole" if r["whole_card"] else f"{r['compute_pct']}%",
                r["memory_mib"],
                r["requester"],
                r["reason"][:40],
            ]
            for r in rows
        ],
        ["ID", "STATE", "TENANT", "POOL", "COUNT", "COMPUTE", "MiB", "BY", "REASON"],
    )
    emit(args, rows, text)
    return OK


def cmd_nodes(args: argparse.Namespace) -> int:
    rows = client_for(args).results(f"{API}/nodes/")
    text = table(
        [
            [n["id"], n["name"], n["state"], n.get("gpu_count", ""), n.get("last_seen") or "-"]
            for n in rows
        ],
        ["ID", "NAME", "STATE", "GPUS", "LAST SEEN"],
    )
    emit(args, rows, text)
    return OK


def cmd_run(args: argparse.Namespace) -> int:
    from gpuctl.runner import run

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise Usage("run needs a command after --")
    if args.cluster:
        from gpuctl.kube import job_body, run_job

        if not args.namespace or not args.image:
            raise Usage("run --cluster needs --namespace and --image")
        return run_job(client_for(args), job_body(args, args.reason or default_reason()), args)
    if args.namespace or args.image or args.env:
        raise Usage("--namespace, --image and --env go with --cluster")
    client = client_for(args)
    return run(client, request_body(client, args), command, args)


# --- the parser --------------------------------------------------------------------------


def _request_options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("-t", "--tenant", help="tenant slug, name or id (default: GPUCTL_TENANT or the config)")
    add("-p", "--pool", help="pool slug, name or id (default: GPUCTL_POOL or the config)")
    add("-n", "--count", "--gpus", type=int, default=1, help="vGPUs (default 1)")
    add("--compute", type=int, metavar="PCT", help="compute per vGPU, 1-100 %%")
    add("--memory", type=memory_mib, metavar="SIZE", help="memory per vGPU: MiB, or 512M, 8G")
    add("--whole-card", action="store_true", help="whole cards instead of slices")
    add("--model", help="GPU model the cards must be")
    add("--node", help="node the vGPUs must be on")
    add(
        "--node-label",
        type=_label,
        action="append",
        metavar="KEY=VALUE",
        help="a label the node must carry (repeatable)",
    )
    add("--same-node", action="store_true", help="all vGPUs on one node")
    add("--hours", type=int, help="duration in hours (default: until released)")
    add("--reason", help="why (default: the CI job's URL, or gpuctl on HOST)")


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON for scripts")
    top = argparse.ArgumentParser(
        prog="gpuctl",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = top.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, handler: Callable[[argparse.Namespace], int], text: str):
        sub = verbs.add_parser(name, parents=[common], help=text, description=text)
        sub.set_defaults(handler=handler)
        return sub

    sub = verb("configure", cmd_configure, "save the portal URL and token (mode 0600)")
    sub.add_argument("--url")
    sub.add_argument("--token", help="the API token (better: --token-stdin or the prompt)")
    sub.add_argument("--token-stdin", action="store_true", help="read the token from stdin")
    sub.add_argument("--tenant", help="default tenant for request and run")
    sub.add_argument("--pool", help="default pool for request and run")
    sub.add_argument(
        "--no-check", dest="check", action="store_false", help="save without trying the token"
    )
    sub = verb("request", cmd_request, "ask for vGPUs; prints the request")
    _request_options(sub)
    sub.add_argument(
        "--wait", type=float, metavar="SECONDS", help="then wait this long for it to be placed"
    )
    sub = verb("wait", cmd_wait, "wait until a request is placed")
    sub.add_argument("id", type=int)
    sub.add_argument("--timeout", type=float, default=DEFAULT_RUN_WAIT, metavar="SECONDS")
    sub = verb("env", cmd_env, "print the export lines of a placed request's vGPU")
    sub.add_argument("id", type=int)
    sub.add_argument(
        "--vgpu",
        type=int,
        default=0,
        metavar="N",
        help="which of the request's vGPUs, from 0 (default 0)",
    )
    verb("release", cmd_release, "release a request (or cancel it while it waits)").add_argument(
        "id", type=int
    )
    verb("status", cmd_status, "show a request").add_argument("id", type=int)
    sub = verb("list", cmd_list, "list the requests you can see")
    sub.add_argument("--state", action="append", help="only this state (repeatable)")
    sub.add_argument("--mine", action="store_true", help="only your own")
    verb("nodes", cmd_nodes, "list the nodes")
    sub = verb("run", cmd_run, "request, wait, run COMMAND with the vGPU, release in every case")
    _request_options(sub)
    sub.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_RUN_WAIT,
        metavar="SECONDS",
        help=f"longest wait for placement (default {DEFAULT_RUN_WAIT})",
    )
    sub.add_argument("--vgpu", type=int, default=0, metavar="N", help="vGPU whose environment")
    kube = sub.add_argument_group(
        "on Kubernetes", "the portal makes a Job in a mapped namespace; gpuctl follows it"
    )
    kube.add_argument("--cluster", metavar="NAME", help="cluster name or id: run there as a Job")
    kube.add_argument("--namespace", metavar="NS", help="the mapped namespace of the Job")
    kube.add_argument("--image", help="the Job's container image")
    kube.add_argument("--env", type=_label, action="append", metavar="NAME=VALUE",
                      help="an environment variable of the Job (repeatable)")  # fmt: skip
    sub.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.handler(args)
    except Usage as exc:
        return fail(args, BAD_INPUT, str(exc))
    except ApiError as exc:
        return fail(
            args, exit_code(exc), str(exc), status=exc.status, code=exc.code, fields=exc.fields
        )
    except WaitTimeout as exc:
        return fail(args, TIMED_OUT, f"timed out: {exc}", request=exc.request.get("id"))
    except NotPlaced as exc:
        return fail(
            args,
            NOT_PLACED,
            f"not placed: {exc}",
            request=exc.request.get("id"),
            state=exc.request.get("state"),
        )
    except KeyboardInterrupt:
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())

"""Loopback receivers for alert channels: each IM vendor's robot endpoint, checking the
payload's shape and the signature the way the vendor documents it (written here from the
vendors' documentation, not with the portal's code), and a plain SMTP server."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "robot-token-0123456789"
SECRET = "SECsigning-secret-0123456789"


@dataclass
class Received:
    vendor: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """What arrived, and how to answer: ``secret`` is what the vendor expects; ``hold``
    (an Event) keeps the next requests waiting until set; ``status`` overrides answers."""

    secret: str = SECRET
    received: list[Received] = field(default_factory=list)
    hold: threading.Event | None = None
    status: int | None = None
    arrived: threading.Event = field(default_factory=threading.Event)


def _dingtalk(rx: Receiver, got: Received) -> tuple[int, dict]:
    # https://open.dingtalk.com/document/robots/customize-robot-security-settings
    if got.query.get("access_token") != TOKEN:
        return 200, {"errcode": 300001, "errmsg": "token is not exist"}
    timestamp = got.query.get("timestamp", "0")
    mac = hmac.new(rx.secret.encode(), f"{timestamp}\n{rx.secret}".encode(), hashlib.sha256)
    expected = base64.b64encode(mac.digest()).decode()
    if abs(time.time() * 1000 - int(timestamp)) > 3600_000 or got.query.get("sign") != expected:
        return 200, {"errcode": 310000, "errmsg": "sign not match"}
    body = got.json()
    if body.get("msgtype") != "markdown" or not {"title", "text"} <= set(body["markdown"]):
        return 200, {"errcode": 40035, "errmsg": "missing parameter"}
    return 200, {"errcode": 0, "errmsg": "ok"}


def _feishu(rx: Receiver, got: Received) -> tuple[int, dict]:
    # https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot (签名校验)
    if not got.path.endswith("/" + TOKEN):
        return 200, {"code": 19001, "msg": "param invalid: incoming webhook access token invalid"}
    body = got.json()
    timestamp = body.get("timestamp", "0")
    mac = hmac.new(f"{timestamp}\n{rx.secret}".encode(), b"", hashlib.sha256)
    expected = base64.b64encode(mac.digest()).decode()
    if abs(time.time() - int(timestamp)) > 3600 or body.get("sign") != expected:
        return 200, {"code": 19021, "msg": "sign match fail or timestamp is not within one hour"}
    card = body.get("card", {})
    if body.get("msg_type") != "interactive" or card["elements"][0]["tag"] != "markdown":
        return 200, {"code": 9499, "msg": "Bad Request"}
    return 200, {"code": 0, "msg": "success", "data": {}}


def _wecom(rx: Receiver, got: Received) -> tuple[int, dict]:
    # https://developer.work.weixin.qq.com/document/path/91770
    if got.query.get("key") != TOKEN:
        return 200, {"errcode": 93000, "errmsg": "invalid webhook url"}
    body = got.json()
    content = body.get("markdown", {}).get("content", "")
    if body.get("msgtype") != "markdown" or not content or len(content.encode()) > 4096:
        return 200, {"errcode": 40008, "errmsg": "invalid message type"}
    return 200, {"errcode": 0, "errmsg": "ok"}


def _slack(rx: Receiver, got: Received) -> tuple[int, str]:
    # https://api.slack.com/messaging/webhooks: errors are HTTP statuses with a text body.
    if not got.path.endswith("/" + TOKEN):
        return 404, "no_service"
    body = got.json()
    block = body["blocks"][0]
    if not body.get("text") or block["type"] != "section" or block["text"]["type"] != "mrkdwn":
        return 400, "invalid_payload"
    return 200, "ok"


def _webhook(rx: Receiver, got: Received) -> tuple[int, str]:
    timestamp = got.headers.get("x-gpu-portal-timestamp", "0")
    mac = hmac.new(rx.secret.encode(), f"{timestamp}.".encode() + got.body, hashlib.sha256)
    if abs(time.time() - int(timestamp)) > 300:
        return 401, "stale"
    if not hmac.compare_digest(got.headers.get("x-gpu-portal-signature", ""),
                               "sha256=" + mac.hexdigest()):  # fmt: skip
        return 401, "bad signature"
    return 204, ""


VENDORS = {"dingtalk": _dingtalk, "feishu": _feishu, "wecom": _wecom, "slack": _slack,
           "webhook": _webhook}  # fmt: skip
# The path each kind's URL has on the receiver (its vendor's shape).
PATHS = {
    "dingtalk": f"/dingtalk/robot/send?access_token={TOKEN}",
    "feishu": f"/open-apis/bot/v2/hook/{TOKEN}",
    "wecom": f"/cgi-bin/webhook/send?key={TOKEN}",
    "slack": f"/services/T000/B000/{TOKEN}",
    "webhook": "/webhook/hook",
}


def handler_for(rx: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            vendor = next(k for k, v in PATHS.items() if v.split("?")[0].split("/")[1]
                          == parts.path.split("/")[1])  # fmt: skip
            length = int(self.headers.get("Content-Length", 0))
            got = Received(
                vendor, parts.path, dict(urllib.parse.parse_qsl(parts.query)),
                {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length),
            )  # fmt: skip
            rx.received.append(got)
            rx.arrived.set()
            if rx.hold is not None:
                rx.hold.wait(60)
            status, answer = VENDORS[vendor](rx, got)
            if rx.status is not None:
                status, answer = rx.status, "forced"
            data = (
                answer
                if isinstance(answer, bytes)
                else (json.dumps(answer) if isinstance(answer, dict) else answer).encode()
            )
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    return Handler


def serve_on(port: int, rx: Receiver) -> ThreadingHTTPServer:
    """A receiver on a given loopback port (to bring a "down" receiver back up)."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(rx))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server

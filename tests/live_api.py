"""Calls to the API of a live portal (tests.procs.daphne) with a user's API token."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tokens.interface import issue


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: Any


def token(user) -> str:
    """A fresh write token for ``user``: the ``Authorization`` header's value."""
    return f"Bearer {issue(user, name='tests')[1]}"


def call(
    base_url: str,
    method: str,
    path: str,
    auth: str,
    body: dict | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60,
) -> Answer:
    """One request on a connection of its own (each thread its own socket)."""
    where = urlsplit(base_url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=timeout)
    sent = {"Authorization": auth, "Accept": "application/json", **(headers or {})}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        sent["Content-Type"] = "application/json"
    try:
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        raw = response.read()
        answer_headers = {name.lower(): value for name, value in response.getheaders()}
        return Answer(response.status, answer_headers, json.loads(raw) if raw else None)
    finally:
        connection.close()

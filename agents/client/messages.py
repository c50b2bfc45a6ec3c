"""What the agent client is asked (``Request``) and what each request comes to
(``Response``): plain values, the client's public face with ``Pool`` and ``send``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from agents.client.framing import Target, prepare


@dataclass(slots=True)
class Response:
    """What one request came to: an HTTP answer (``status``, ``body``) or an ``error``."""

    status: int  # 0 when there is no HTTP answer
    body: bytes
    error: str
    duration_s: float
    attempts: int

    @property
    def ok(self) -> bool:
        """An HTTP answer came, whatever its status."""
        return not self.error

    def json(self) -> Any:
        """The body as JSON; raises ``orjson.JSONDecodeError`` (a ValueError) if it is not."""
        return orjson.loads(self.body)


@dataclass(frozen=True, slots=True)
class Request:
    """One request to one agent: ``json`` (when not None) is sent as an application/json
    body, else ``body`` with ``content_type``; ``headers`` are added as given."""

    method: str
    url: str
    token: str = ""
    json: Any = None
    body: bytes = b""
    content_type: str = ""
    headers: Mapping[str, str] | None = None

    def prepare(self) -> Target | str:
        body, content_type = self.body, self.content_type
        if self.json is not None:
            body, content_type = orjson.dumps(self.json), "application/json"
        return prepare(
            self.method, self.url, self.token,
            body=body, content_type=content_type, headers=self.headers,
        )  # fmt: skip

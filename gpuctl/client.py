"""The portal's REST API as gpuctl speaks it: stdlib HTTP, bearer token, error bodies in
either shape, retries of transient failures (a create reuses its Idempotency-Key)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

from gpuctl import __version__

API = "/api/v1"
# Request states, as quotas.choices.RequestState names them (the CLI imports no portal code).
WAITING = frozenset({"pending", "approved"})
PLACED = "allocated"
ENDED = frozenset({"rejected", "released", "expired", "cancelled"})
# Answers worth trying again: the server or a proxy in front of it was briefly unable.
TRANSIENT = frozenset({429, 502, 503, 504})
RETRIES = 4


@dataclass
class ApiError(Exception):
    """A refused or failed call. ``status`` is None when no HTTP answer came back."""

    status: int | None
    message: str
    fields: dict[str, list[str]] = field(default_factory=dict)
    code: str = ""

    def __str__(self) -> str:
        lines = [self.message]
        lines += [f"  {name}: {' '.join(msgs)}" for name, msgs in self.fields.items()]
        return "\n".join(lines)


def _messages(value: Any) -> list[str]:
    if isinstance(value, list):
        return [m for item in value for m in _messages(item)]
    if isinstance(value, dict):
        return [f"{k}: {m}" for k, v in value.items() for m in _messages(v)]
    return [str(value)]


def error_from(status: int, body: bytes) -> ApiError:
    """An ApiError from the envelope ``{"error": {"code", "message", "fields"}}`` or from
    DRF's plain shapes (``{"detail": ...}`` or ``{"field": ["..."]}``)."""
    try:
        data = json.loads(body or b"null")
    except ValueError:
        data = None
    default = f"HTTP {status}"
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        error = data["error"]
        fields = {str(k): _messages(v) for k, v in (error.get("fields") or {}).items()}
        return ApiError(
            status, str(error.get("message") or default), fields, str(error.get("code") or "")
        )
    if isinstance(data, dict) and "detail" in data and len(data) <= 2:
        return ApiError(status, str(data["detail"]), code=str(data.get("code") or ""))
    if isinstance(data, dict) and data:
        fields = {str(k): _messages(v) for k, v in data.items()}
        return ApiError(status, "The portal refused the input.", fields, "invalid")
    if isinstance(data, list) and data:
        return ApiError(status, " ".join(_messages(data)))
    text = body.decode("utf-8", "replace").strip()
    return ApiError(status, f"{default}: {text[:200]}" if text else default)


def accept_language() -> str:
    """The shell's language (``LANG=zh_CN.UTF-8`` -> ``zh-CN``): the portal words its
    messages in it where it has a translation."""
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(name, "").split(".")[0].split("@")[0]
        if value and value not in ("C", "POSIX"):
            return value.replace("_", "-")
    return "en"


class Client:
    """One portal, one token. Every call returns the decoded JSON or raises ApiError."""

    def __init__(self, url: str, token: str, *, timeout: float = 30, backoff: float = 0.5):
        self.url = url.rstrip("/")
        self.token = token
        self.scheme = "Bearer"
        self.timeout = timeout
        self.backoff = backoff

    def _once(
        self, method: str, path: str, body: Any, headers: dict[str, str], timeout: float
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 (the URL the user configured)
            self.url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"{self.scheme} {self.token}",
                "Accept": "application/json",
                "User-Agent": f"gpuctl/{__version__}",
                "Accept-Language": accept_language(),
                **({"Content-Type": "application/json"} if data is not None else {}),
                **headers,
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                raw = response.read()
        except urllib.error.HTTPError as exc:
            error = error_from(exc.code, exc.read())
            error.retry_after = exc.headers.get("Retry-After")  # type: ignore[attr-defined]
            raise error from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiError(None, f"Cannot reach {self.url}: {reason}") from None
        return json.loads(raw) if raw else None

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        retry: bool = True,
    ) -> Any:
        if query:
            path += "?" + urllib.parse.urlencode(
                {k: v for k, v in query.items() if v is not None}, doseq=True
            )
        attempts = RETRIES + 1 if retry else 1
        for attempt in range(attempts):
            try:
                return self._once(method, path, body, headers or {}, timeout or self.timeout)
            except ApiError as exc:
                transient = exc.status is None or exc.status in TRANSIENT
                if not transient or attempt == attempts - 1:
                    raise
                delay = self.backoff * 2**attempt
                after = getattr(exc, "retry_after", None)
                if after and after.isdigit():
                    delay = max(delay, min(float(after), 30.0))
                time.sleep(delay)
        raise AssertionError("unreachable")

    # --- what the verbs use ----------------------------------------------------------------

    def create_request(self, fields: dict[str, Any], idempotency_key: str | None = None) -> dict:
        # One key per request, reused by every retry: a create whose answer was lost is not
        # made twice once the server honours the header.
        key = idempotency_key or str(uuid.uuid4())
        return self.call("POST", f"{API}/gpu-requests/", fields, headers={"Idempotency-Key": key})

    def get_request(self, req_id: int, *, wait: int | None = None) -> dict:
        timeout = self.timeout + (wait or 0)
        return self.call(
            "GET", f"{API}/gpu-requests/{req_id}/", query={"wait": wait}, timeout=timeout
        )

    def release(self, req_id: int) -> dict:
        """Release a placed request or cancel a waiting one; one already ended is returned
        as it is (a retry after a lost answer, or a request rejected meanwhile)."""
        try:
            return self.call("POST", f"{API}/gpu-requests/{req_id}/release/")
        except ApiError as exc:
            if exc.status not in (400, 409):
                raise
            current = self.get_request(req_id)
            if current.get("state") in ENDED:
                return current
            raise

    def create_job(self, cluster: str, fields: dict[str, Any], idempotency_key: str) -> dict:
        """A Job the portal makes in the cluster (by id or name) for this token's user."""
        path = f"{API}/clusters/{urllib.parse.quote(cluster, safe='')}/jobs/"
        return self.call("POST", path, fields, headers={"Idempotency-Key": idempotency_key})

    def get_job(self, cluster: str, job_id: int) -> dict:
        path = f"{API}/clusters/{urllib.parse.quote(cluster, safe='')}/jobs/{job_id}/"
        return self.call("GET", path)

    def allocation(self, allocation_id: int) -> dict:
        return self.call("GET", f"{API}/allocations/{allocation_id}/")

    def results(self, path: str, query: dict | None = None) -> list[dict]:
        """Every row of a paginated list (LimitOffsetPagination), or the list itself."""
        rows: list[dict] = []
        query = {"limit": 200, **(query or {})}
        offset = 0
        while True:
            page = self.call("GET", path, query={**query, "offset": offset})
            if isinstance(page, list):
                return page
            rows += page.get("results", [])
            if not page.get("next") or len(rows) >= page.get("count", 0):
                return rows
            offset = len(rows)

    def resolve(self, kind: str, value: str) -> int:
        """The id of a tenant or pool given by id, slug or name (``kind``: tenants, pools)."""
        if value.isdigit():
            return int(value)
        path = f"{API}/{kind}/"
        found = self.results(path, {"slug": value})
        if not found:
            found = [
                row
                for row in self.results(path, {"name": value})
                if str(row.get("name", "")).lower() == value.lower()
            ]
        if len(found) != 1:
            singular = kind.rstrip("s")
            problem = "No" if not found else "More than one"
            raise ApiError(
                400,
                f"{problem} {singular} named {value!r} that you can see.",
                {singular: [f"unknown: {value}"]} if not found else {},
            )
        return int(found[0]["id"])

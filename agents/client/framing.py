"""HTTP/1.1 on the wire for the agent client (``agents.client``).

``prepare`` builds a request's bytes: any method, a bearer token, a body with its
Content-Type, extra headers (``prepare_get`` is the poller's GET). ``ResponseReader``
reads one answer at a time from the bytes a connection receives, framed by llhttp
(Node.js's parser, through ``httptools``): Content-Length, chunked encoding or the
connection closing; 1xx interim answers skipped. What llhttp leaves to its caller is
done here: the limits (head, body, number of chunks, bytes on the wire) and when a
close completes a body. Anything malformed or over the limits raises ``HTTPError``;
the caller then closes the connection.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

MAX_HEAD_BYTES = 64 * 1024
_MAX_CHUNKS = 8192  # 1-byte chunks would cost seconds of CPU per MiB of body
# llhttp bounds no line: chunk-size lines, extensions and trailers are bounded by a cap
# on everything an answer may send besides its body (two heads, 64 bytes per chunk).
_MAX_FRAMING = 2 * MAX_HEAD_BYTES + 64 * _MAX_CHUNKS
# RFC 9110 9.2.2: these may be sent again when a connection drops before the answer.
IDEMPOTENT = frozenset({"GET", "PUT", "DELETE", "OPTIONS"})
# Set by ``prepare`` itself (the token is its own argument): a caller's copy would
# frame the request differently or send two credentials.
_RESERVED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "authorization"}
)
_TCHAR = frozenset("!#$%&'*+-.^_`|~")
_STATUS, _HEAD, _BODY, _DONE = 0, 1, 2, 3

try:
    USER_AGENT = f"gpu-portal/{importlib.metadata.version('gpu-portal')}"
except importlib.metadata.PackageNotFoundError:  # run from a checkout that is not installed
    USER_AGENT = "gpu-portal"

Origin = tuple[str, str, int]


class HTTPError(Exception):
    """The server's answer is not one we can use."""


def size_text(limit: int) -> str:
    for unit, size in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if limit >= size and limit % size == 0:
            return f"{limit // size} {unit}"
    return f"{limit} bytes"


@dataclass(frozen=True, slots=True)
class Target:
    """A prepared request: where it goes and its bytes."""

    origin: Origin
    request: bytes
    address: str  # host:port, for messages
    idempotent: bool = True


def _token(text: str) -> bool:
    """An HTTP token (RFC 9110 5.6.2): what a method or header name may be."""
    return text.isascii() and text != "" and all(c.isalnum() or c in _TCHAR for c in text)


def prepare(
    method: str,
    url: str,
    token: str,
    *,
    body: bytes = b"",
    content_type: str = "",
    headers: Mapping[str, str] | None = None,
) -> Target | str:
    """The request bytes, or why there can be none for this URL or token.

    A bad method or header is the caller's mistake and raises ValueError; the URL and
    token come from data (a node's record), so their faults are returned as text.
    """
    if not _token(method) or method != method.upper():
        raise ValueError(f"invalid HTTP method {method!r}")
    if method == "HEAD":
        raise ValueError("HEAD is not supported: its answer is framed without a body")
    extra = dict(headers or {})
    if content_type:
        extra["Content-Type"] = content_type
    for name, value in extra.items():
        if (
            not _token(name)
            or name.lower() in _RESERVED_HEADERS
            or not value.isascii()
            or any(c in value for c in "\r\n\x00")
        ):
            raise ValueError(f"invalid or reserved HTTP header {name!r}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return f"invalid URL {url!r}"
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        return f"unsupported URL scheme in {url!r}"
    host = parts.hostname
    if not host or parts.username is not None:
        return f"invalid URL {url!r}"
    if port is None:
        port = 443 if scheme == "https" else 80
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    bracketed = f"[{host}]" if ":" in host else host
    address = f"{bracketed}:{port}"
    host_header = bracketed if port == (443 if scheme == "https" else 80) else address
    lines = [
        f"{method} {target} HTTP/1.1",
        f"Host: {host_header}",
        f"User-Agent: {USER_AGENT}",
        "Accept: application/json",
        "Accept-Encoding: identity",
    ]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    lines += [f"{name}: {value}" for name, value in extra.items()]
    if body or method in ("PUT", "POST", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    text = "\r\n".join(lines) + "\r\n\r\n"
    # Whitespace or control characters would split the request line or a header.
    if any(c.isspace() or not c.isprintable() for c in target + host_header + token):
        return f"invalid characters in the URL or token for {address}"
    try:
        request = text.encode("ascii")
    except UnicodeEncodeError:
        return f"non-ASCII characters in the URL or token for {address}"
    return Target((scheme, host, port), request + body, address, method in IDEMPOTENT)


def prepare_get(url: str, token: str) -> Target | str:
    return prepare("GET", url, token)


class _Beyond(Exception):
    """A second answer began in bytes that belonged to no request."""


class ResponseReader:
    """One connection's llhttp parser and the answer it is reading; ``start`` before each.

    The parser lives as long as the connection: llhttp carries on from one keep-alive
    answer to the next. Its callbacks (``on_*``) collect the answer.
    """

    __slots__ = (
        "body",
        "chunks",
        "framed",
        "head",
        "keep_alive",
        "leftover",
        "max_body",
        "parser",
        "parts",
        "phase",
        "size",
        "status",
        "wire",
    )

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.max_body = 0
        self.phase = _DONE
        self.status = 0
        self.keep_alive = True
        self.leftover = False
        self.framed = False
        self.head = 0
        self.parts: list[bytes] = []
        self.body = b""
        self.size = 0
        self.chunks = 0
        self.wire = 0

    def start(self, max_body: int) -> None:
        self.max_body = max_body
        self.phase = _STATUS
        self.status = 0
        self.framed = False
        self.head = 0
        self.parts = []
        self.body = b""
        self.size = 0
        self.chunks = 0
        self.wire = 0

    def feed(self, data: bytes) -> bytes | None:
        """The body once the answer is complete (``status``, ``keep_alive`` and
        ``leftover`` then describe it), else None for more bytes to come."""
        self.wire += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if self.phase != _DONE:
                if isinstance(exc.__context__, HTTPError):
                    raise exc.__context__ from None
                raise HTTPError(self._malformed(str(exc))) from None
            self.leftover = True
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if self.phase != _DONE:
                raise HTTPError(self._malformed(str(exc))) from None
            self.leftover = True  # bytes after the answer that are no answer at all
        if self.phase == _DONE:
            return self.body
        if self.phase < _BODY and self.wire > MAX_HEAD_BYTES:
            raise self._head_too_large()
        if self.wire > self.max_body + _MAX_FRAMING:
            limit = size_text(self.max_body + _MAX_FRAMING)
            raise HTTPError(f"answer larger than {limit} with its framing")
        return None

    def at_close(self) -> bytes | None:
        """The body, if the connection closing completes the answer."""
        if self.phase == _BODY and not self.framed:
            self.phase = _DONE
            self.keep_alive = False
            self.body = b"".join(self.parts)
            return self.body
        return None

    def _malformed(self, reason: str) -> str:
        if self.phase == _STATUS:
            return f"malformed HTTP status line ({reason})"
        if self.phase == _HEAD:
            if "Content-Length" in reason:
                return f"malformed Content-Length ({reason})"
            return f"malformed HTTP header line ({reason})"
        return f"malformed HTTP body ({reason})"

    def _head_too_large(self) -> HTTPError:
        return HTTPError(f"answer head larger than {size_text(MAX_HEAD_BYTES)}")

    def _too_large(self) -> HTTPError:
        return HTTPError(f"answer body larger than {size_text(self.max_body)}")

    # llhttp's callbacks

    def on_message_begin(self) -> None:
        if self.phase == _DONE:
            raise _Beyond

    def on_status(self, reason: bytes) -> None:
        self.phase = _HEAD

    def on_header(self, name: bytes, value: bytes) -> None:
        # Only the headers that frame the body matter here; llhttp checked their syntax.
        self.phase = _HEAD
        # A head that arrived in one read is measured here, header by header.
        self.head += len(name) + len(value) + 4
        if self.head > MAX_HEAD_BYTES:
            raise self._head_too_large()
        if len(name) == 14 and name.lower() == b"content-length":
            self.framed = True
            if value.strip().isdigit() and int(value) > self.max_body:
                raise self._too_large()
        elif len(name) == 17 and name.lower() == b"transfer-encoding":
            self.framed = value.rsplit(b",", 1)[-1].strip().lower() == b"chunked"

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.status == 101:
            raise HTTPError("unexpected HTTP 101 Switching Protocols")
        self.phase = _BODY

    def on_chunk_header(self) -> None:
        self.chunks += 1
        if self.chunks > _MAX_CHUNKS:
            raise HTTPError(f"chunked answer in more than {_MAX_CHUNKS} chunks")

    def on_body(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.max_body:
            raise self._too_large()
        self.parts.append(data)

    def on_message_complete(self) -> None:
        if self.status < 200:  # an interim answer: the real one follows
            self.phase = _STATUS
            self.framed = False
            return
        parts = self.parts
        self.body = parts[0] if len(parts) == 1 else b"".join(parts)
        self.keep_alive = self.parser.should_keep_alive()
        self.phase = _DONE

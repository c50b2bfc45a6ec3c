"""HTTP/1.1 on the wire for the fan-out client (agents/fanout.py).

``prepare_get`` builds the bytes of a GET once per (URL, token). ``ResponseParser``
reads one answer at a time from the bytes a connection receives: the status line, the
headers that frame the body (Content-Length, Transfer-Encoding, Connection; names
case-insensitive), and the body, delimited by Content-Length, by chunked encoding or by
the connection closing. 1xx interim answers are skipped. Anything malformed or over the
limits raises ``HTTPError``; the caller then closes the connection.
"""

from __future__ import annotations

import importlib.metadata
import string
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024
_MAX_CHUNK_LINE = 4096
_MAX_CHUNKS = 8192  # 1-byte chunks would cost ~2.6 s of CPU and ~120 MiB per MiB of body
_HEX = frozenset(string.hexdigits.encode())
_LENGTH, _CHUNKED, _UNTIL_CLOSE = 0, 1, 2
_SIZE, _DATA, _DATA_END, _TRAILER = 0, 1, 2, 3

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
    """A prepared GET: where it goes and its bytes."""

    origin: Origin
    request: bytes
    address: str  # host:port, for messages


def prepare_get(url: str, token: str) -> Target | str:
    """The request bytes for one (URL, token), or why there can be none."""
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
        f"GET {target} HTTP/1.1",
        f"Host: {host_header}",
        f"User-Agent: {USER_AGENT}",
        "Accept: application/json",
        "Accept-Encoding: identity",
    ]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    text = "\r\n".join(lines) + "\r\n\r\n"
    # Whitespace or control characters would split the request line or a header.
    if any(c.isspace() or not c.isprintable() for c in target + host_header + token):
        return f"invalid characters in the URL or token for {address}"
    try:
        request = text.encode("ascii")
    except UnicodeEncodeError:
        return f"non-ASCII characters in the URL or token for {address}"
    return Target((scheme, host, port), request, address)


class ResponseParser:
    """The framing state of one connection; ``start`` before each request."""

    __slots__ = (
        "body_size",
        "buffer",
        "chunk_count",
        "chunk_state",
        "chunks",
        "head_done",
        "keep_alive",
        "max_body",
        "mode",
        "remaining",
        "status",
    )

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.max_body = 0
        self.head_done = False
        self.status = 0
        self.keep_alive = True
        self.mode = _LENGTH
        self.remaining = 0
        self.chunk_state = _SIZE
        self.chunks = bytearray()
        self.chunk_count = 0
        self.body_size = 0

    def start(self, max_body: int) -> None:
        self.max_body = max_body
        self.head_done = False
        self.chunks = bytearray()
        self.chunk_count = 0
        self.body_size = 0

    @property
    def leftover(self) -> bool:
        """Bytes beyond the answer: the server said more than it framed."""
        return bool(self.buffer)

    def feed(self, data: bytes) -> bytes | None:
        """The body once the answer is complete (``status`` and ``keep_alive`` then
        describe it), else None for more bytes to come."""
        buffer = self.buffer
        buffer += data
        while not self.head_done:
            end = buffer.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise HTTPError(f"answer head larger than {size_text(MAX_HEAD_BYTES)}")
                return None
            head = bytes(buffer[:end])
            del buffer[: end + 4]
            self._head(head)
        if self.mode == _LENGTH:
            if len(buffer) < self.remaining:
                return None
            body = bytes(buffer[: self.remaining])
            del buffer[: self.remaining]
            return body
        if self.mode == _CHUNKED:
            return bytes(self.chunks) if self._chunks() else None
        if len(buffer) > self.max_body:
            raise HTTPError(self._too_large())
        return None

    def at_close(self) -> bytes | None:
        """The body, if the connection closing completes the answer."""
        if self.head_done and self.mode == _UNTIL_CLOSE:
            body = bytes(self.buffer)
            self.buffer.clear()
            return body
        return None

    def _too_large(self) -> str:
        return f"answer body larger than {size_text(self.max_body)}"

    def _head(self, head: bytes) -> None:
        status_line, *lines = head.split(b"\r\n")
        parts = status_line.split(b" ", 2)
        if (
            len(parts) < 2
            or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0")
            or len(parts[1]) != 3
            or not parts[1].isdigit()
        ):
            raise HTTPError(f"malformed HTTP status line {status_line[:100]!r}")
        status = int(parts[1])
        length: int | None = None
        chunked = encoded = close = keep_alive = False
        for line in lines:
            name, colon, value = line.partition(b":")
            if not colon or not name or name[-1:].isspace() or name[:1].isspace():
                raise HTTPError(f"malformed HTTP header line {line[:100]!r}")
            name = name.lower()
            if name == b"content-length":
                value = value.strip()
                if (
                    not value.isdigit()
                    or len(value) > 18
                    or (length is not None and int(value) != length)
                ):
                    raise HTTPError(f"malformed Content-Length {value[:40]!r}")
                length = int(value)
            elif name == b"transfer-encoding":
                encoded = True
                chunked = value.rsplit(b",", 1)[-1].strip().lower() == b"chunked"
            elif name == b"connection":
                tokens = {token.strip().lower() for token in value.split(b",")}
                close = close or b"close" in tokens
                keep_alive = keep_alive or b"keep-alive" in tokens
        if 100 <= status < 200:
            if status == 101:
                raise HTTPError("unexpected HTTP 101 Switching Protocols")
            return  # an interim answer: the real one follows
        self.head_done = True
        self.status = status
        self.keep_alive = not close and (parts[0] == b"HTTP/1.1" or keep_alive)
        if status in (204, 304):
            self.mode, self.remaining = _LENGTH, 0
        elif encoded:
            # Framed by its encoding; a Content-Length beside it is a smuggling risk.
            self.keep_alive = self.keep_alive and chunked and length is None
            self.mode = _CHUNKED if chunked else _UNTIL_CLOSE
            self.chunk_state = _SIZE
        elif length is not None:
            if length > self.max_body:
                raise HTTPError(self._too_large())
            self.mode, self.remaining = _LENGTH, length
        else:
            self.mode, self.keep_alive = _UNTIL_CLOSE, False

    def _chunks(self) -> bool:
        """Consume chunked framing from the buffer; True once the last chunk is in."""
        buffer = self.buffer
        while True:
            if self.chunk_state == _SIZE:
                end = buffer.find(b"\r\n", 0, _MAX_CHUNK_LINE)
                if end < 0:
                    if len(buffer) >= _MAX_CHUNK_LINE:
                        raise HTTPError("malformed chunk size line")
                    return False
                size_hex = bytes(buffer[:end]).split(b";", 1)[0].strip()
                if not size_hex or not _HEX.issuperset(size_hex) or len(size_hex) > 16:
                    raise HTTPError(f"malformed chunk size {size_hex[:20]!r}")
                del buffer[: end + 2]
                size = int(size_hex, 16)
                if size == 0:
                    self.chunk_state = _TRAILER
                    continue
                self.chunk_count += 1
                if self.chunk_count > _MAX_CHUNKS:
                    raise HTTPError(f"chunked answer in more than {_MAX_CHUNKS} chunks")
                if self.body_size + size > self.max_body:
                    raise HTTPError(self._too_large())
                self.remaining = size
                self.chunk_state = _DATA
            elif self.chunk_state == _DATA:
                if not buffer:
                    return False
                take = min(self.remaining, len(buffer))
                self.chunks += memoryview(buffer)[:take]
                del buffer[:take]
                self.remaining -= take
                self.body_size += take
                if self.remaining:
                    return False
                self.chunk_state = _DATA_END
            elif self.chunk_state == _DATA_END:
                if not b"\r\n".startswith(buffer[:2]):
                    raise HTTPError("malformed chunk: no CRLF after its data")
                if len(buffer) < 2:
                    return False
                del buffer[:2]
                self.chunk_state = _SIZE
            else:  # trailer fields, ignored, up to the empty line
                end = buffer.find(b"\r\n", 0, MAX_HEAD_BYTES)
                if end < 0:
                    if len(buffer) >= MAX_HEAD_BYTES:
                        raise HTTPError("chunked trailer too large")
                    return False
                del buffer[: end + 2]
                if end == 0:
                    return True

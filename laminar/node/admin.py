"""The supervisor's admin endpoint: a small HTTP/1.1 server on asyncio.

Routes (GET, and one POST):

- `/health`: 200 with JSON `{"status": "ok", ...}` when every shard is up and
  ready and every partition can be served, else 503 with `"status":
  "degraded"`, which shards are down and which partitions are offline (and why).
- `/metrics`: Prometheus text (`laminar.node.prometheus`), gathered from the
  shards over their control channels at scrape time.
- `/status`: JSON: the node (ports, runtime, routing mode) and per-shard stats,
  for `laminar status` and people.
- `POST /weight` with the new weight as the body (`laminar weight`): the
  node announces it by gossip, and placement moves partitions to match; 409
  without membership.

Who may ask, and why:

- A write (POST) needs the node's admin token (`Authorization: Bearer ...`):
  a random token the node writes at each start to `admin-token` in its run
  directory, readable by the node's user only, so "can read that file" is the
  permission to change the node. Being on loopback is not: any local process,
  and any web page in a local browser, can reach 127.0.0.1.
- A request that carries `Origin` is refused: browsers add it to cross-site
  requests, and no legitimate client of this endpoint (the CLI, curl,
  Prometheus) sends one.
- `Host` must be an IP literal or `localhost` (or absent): a DNS-rebinding page
  reaches the endpoint under its own host name, which is refused, so it cannot
  read `/status` either. Scrape by IP address.

One request per connection (`Connection: close`); requests are bounded in size
and time, so a stuck client cannot hold the endpoint. With the node's TLS on,
the endpoint speaks HTTPS only, with the node's certificate (reloaded on
SIGHUP with the rest). The supervisor supplies
the content through `AdminSource`; this module only speaks HTTP.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import os
import secrets
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from laminar.node.prometheus import CONTENT_TYPE

logger = logging.getLogger("laminar.admin")

REQUEST_TIMEOUT_S: Final = 5.0
MAX_REQUEST_BYTES: Final = 16 << 10
WEIGHT_BODY_BYTES_MAX: Final = 64
TOKEN_FILE: Final = "admin-token"
TOKEN_BYTES: Final = 32
_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    503: "Service Unavailable",
}


class AdminRefusal(Exception):
    """A request the node cannot do as asked: the HTTP code and why."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class AdminSource:
    """Where the admin pages come from."""

    health: Callable[[], Awaitable[tuple[bool, dict[str, Any]]]]
    metrics: Callable[[], Awaitable[str]]
    status: Callable[[], Awaitable[dict[str, Any]]]
    set_weight: Callable[[float], Awaitable[dict[str, Any]]]
    """Announce a new weight (raises `AdminRefusal`); the answer's JSON."""


def _response(code: int, content_type: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


def _json(code: int, body: dict[str, Any]) -> bytes:
    return _response(code, "application/json", json.dumps(body, indent=1).encode() + b"\n")


def create_token_file(run_dir: str) -> str:
    """A fresh admin token in `run_dir/admin-token` (owner-only); the token.

    Made again at every start, so it need not survive a power cut: no fsync."""
    token = secrets.token_hex(TOKEN_BYTES)
    path = os.path.join(run_dir, TOKEN_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an older file of that name may have had other bits
        os.write(fd, token.encode() + b"\n")
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return token


class AdminServer:
    """Serves the admin routes on a listening socket the supervisor bound;
    writes need `token`."""

    def __init__(
        self,
        sock: socket.socket,
        source: AdminSource,
        token: str,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._sock = sock
        self._tls = tls
        self._source = source
        self._token = token.encode()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._sock.setblocking(False)
        handshake_s = None if self._tls is None else REQUEST_TIMEOUT_S
        self._server = await asyncio.start_server(
            self._handle, sock=self._sock, ssl=self._tls, ssl_handshake_timeout=handshake_s
        )

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
            reply = await self._route(head, reader)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            reply = None
        except Exception:
            logger.exception("admin request failed")
            reply = _response(500, "text/plain", b"internal error\n")
        try:
            if reply is not None:
                writer.write(reply)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def _route(self, head: bytes, reader: asyncio.StreamReader) -> bytes:
        if len(head) > MAX_REQUEST_BYTES:
            return _response(405, "text/plain", b"request too large\n")
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split()
        if len(parts) != 3:
            return _response(405, "text/plain", b"malformed request line\n")
        method, target, _ = parts
        path = target.split("?", 1)[0]
        headers = _headers(head)
        if b"origin" in headers:
            return _error(403, "requests from web pages (with an Origin header) are refused")
        if not _local_host(headers.get(b"host")):
            return _error(403, "the Host must be an IP address or localhost (scrape by address)")
        if method == "POST" and path == "/weight":
            if not self._authorized(headers.get(b"authorization")):
                return _error(401, f"a write needs the node's admin token (file {TOKEN_FILE})")
            return await self._set_weight(headers, reader)
        if method not in ("GET", "HEAD"):
            return _response(405, "text/plain", b"only GET is served (and POST /weight)\n")
        if path == "/health":
            ok, body = await self._source.health()
            return _json(200 if ok else 503, body)
        if path == "/metrics":
            text = await self._source.metrics()
            return _response(200, CONTENT_TYPE, text.encode())
        if path == "/status":
            return _json(200, await self._source.status())
        return _response(404, "text/plain", b"routes: /health /metrics /status, POST /weight\n")

    def _authorized(self, value: bytes | None) -> bool:
        scheme, _, token = (value or b"").partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._token)

    async def _set_weight(self, headers: dict[bytes, bytes], reader: asyncio.StreamReader) -> bytes:
        length = _content_length(headers)
        if length is None or not 0 < length <= WEIGHT_BODY_BYTES_MAX:
            return _error(400, f"send the weight as a body of 1-{WEIGHT_BODY_BYTES_MAX} bytes")
        body = await asyncio.wait_for(reader.readexactly(length), REQUEST_TIMEOUT_S)
        try:
            weight = float(body.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            return _error(400, f"the weight must be a number, got {body[:20]!r}")
        try:
            return _json(200, await self._source.set_weight(weight))
        except AdminRefusal as exc:
            return _error(exc.code, str(exc))


def _error(code: int, message: str) -> bytes:
    return _json(code, {"error": message})


def _headers(head: bytes) -> dict[bytes, bytes]:
    """Header fields by lower-case name (a repeated field: the last one)."""
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return fields


def _content_length(headers: dict[bytes, bytes]) -> int | None:
    text = headers.get(b"content-length", b"")
    return int(text) if text.isdigit() and len(text) < 10 else None


def _local_host(host: bytes | None) -> bool:
    """True for no Host, `localhost` or an IP literal, each with an optional port."""
    if host is None:
        return True
    text = host.decode("latin-1").lower()
    if text.startswith("["):  # [v6]:port
        name, bracket, _ = text[1:].partition("]")
        text = name if bracket else text
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    if text == "localhost":
        return True
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True

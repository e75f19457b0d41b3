"""The supervisor's admin endpoint: a small HTTP/1.1 server on asyncio.

Routes (GET, and one POST):

- `/health`: 200 with JSON `{"status": "ok", ...}` when every shard is up and
  ready and every partition can be served, else 503 with `"status":
  "degraded"`, which shards are down and which partitions are offline (and why).
- `/metrics`: Prometheus text (`laminar.shards.prometheus`), gathered from the
  shards over their control channels at scrape time.
- `/status`: JSON: the node (ports, runtime, routing mode) and per-shard stats,
  for `laminar status` and people.
- `POST /weight` with the new weight as the body (`laminar weight`): the
  node announces it by gossip, and placement moves partitions to match. Only
  from a loopback address (the endpoint has no authentication: whoever can
  reach it from elsewhere must not be able to move data), and 409 without
  membership.

One request per connection (`Connection: close`); requests are bounded in size
and time, so a stuck client cannot hold the endpoint. The supervisor supplies
the content through `AdminSource`; this module only speaks HTTP.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from laminar.shards.prometheus import CONTENT_TYPE

logger = logging.getLogger("laminar.admin")

REQUEST_TIMEOUT_S: Final = 5.0
MAX_REQUEST_BYTES: Final = 16 << 10
WEIGHT_BODY_BYTES_MAX: Final = 64
_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
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


class AdminServer:
    """Serves the admin routes on a listening socket the supervisor bound."""

    def __init__(self, sock: socket.socket, source: AdminSource) -> None:
        self._sock = sock
        self._source = source
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._sock.setblocking(False)
        self._server = await asyncio.start_server(self._handle, sock=self._sock)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
            reply = await self._route(head, reader, _loopback(writer.get_extra_info("peername")))
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

    async def _route(self, head: bytes, reader: asyncio.StreamReader, loopback: bool) -> bytes:
        if len(head) > MAX_REQUEST_BYTES:
            return _response(405, "text/plain", b"request too large\n")
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split()
        if len(parts) != 3:
            return _response(405, "text/plain", b"malformed request line\n")
        method, target, _ = parts
        path = target.split("?", 1)[0]
        if method == "POST" and path == "/weight":
            return await self._set_weight(head, reader, loopback)
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

    async def _set_weight(self, head: bytes, reader: asyncio.StreamReader, loopback: bool) -> bytes:
        if not loopback:
            return _error(403, "the weight can be set only from this host (a loopback address)")
        length = _content_length(head)
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


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep and name.strip().lower() == b"content-length":
            text = value.strip()
            return int(text) if text.isdigit() and len(text) < 10 else None
    return None


def _loopback(peer: object) -> bool:
    """True for a peer on 127.0.0.0/8 or ::1 (a Unix or unknown peer is not)."""
    if not isinstance(peer, tuple) or not peer or not isinstance(peer[0], str):
        return False
    try:
        return ipaddress.ip_address(peer[0]).is_loopback
    except ValueError:
        return False

"""The supervisor's admin endpoint: a small HTTP/1.1 server on asyncio.

Routes (GET only):

- `/health`: 200 with JSON `{"status": "ok", ...}` when every shard is up and
  ready and every partition can be served, else 503 with `"status":
  "degraded"`, which shards are down and which partitions are offline (and why).
- `/metrics`: Prometheus text (`laminar.shards.prometheus`), gathered from the
  shards over their control channels at scrape time.
- `/status`: JSON: the node (ports, runtime, routing mode) and per-shard stats,
  for `laminar status` and people.

One request per connection (`Connection: close`); requests are bounded in size
and time, so a stuck client cannot hold the endpoint. The supervisor supplies
the content through `AdminSource`; this module only speaks HTTP.
"""

from __future__ import annotations

import asyncio
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
_REASONS: Final = {
    200: "OK",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}


@dataclass(frozen=True, slots=True)
class AdminSource:
    """Where the admin pages come from."""

    health: Callable[[], Awaitable[tuple[bool, dict[str, Any]]]]
    metrics: Callable[[], Awaitable[str]]
    status: Callable[[], Awaitable[dict[str, Any]]]


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
            reply = await self._route(head)
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

    async def _route(self, head: bytes) -> bytes:
        if len(head) > MAX_REQUEST_BYTES:
            return _response(405, "text/plain", b"request too large\n")
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split()
        if len(parts) != 3:
            return _response(405, "text/plain", b"malformed request line\n")
        method, target, _ = parts
        path = target.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return _response(405, "text/plain", b"only GET is served\n")
        if path == "/health":
            ok, body = await self._source.health()
            return _json(200 if ok else 503, body)
        if path == "/metrics":
            text = await self._source.metrics()
            return _response(200, CONTENT_TYPE, text.encode())
        if path == "/status":
            return _json(200, await self._source.status())
        return _response(404, "text/plain", b"routes: /health /metrics /status\n")

"""A pipelined RESP2 client for the Redis target: one connection, many in flight.

redis-py gives each request in flight a pooled connection of its own (or a
pipeline that waits for all of its replies), so "64 requests in flight on one
connection" cannot be said with it; and its pure-Python reply parser made the
load generator, not Redis, the bottleneck of earlier comparisons. Redis answers
the commands of one connection strictly in order, so pipelining is just a FIFO
of futures: this client writes each command as it is issued, coalesced per
loop iteration into one write (as laminar's client does), and parses replies
with hiredis (C). It is the load generator a Redis user who cares about speed
would write, so the comparison measures Redis, not its Python client.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import hiredis

_NEED_DATA: Any = object()


class RespError(RuntimeError):
    """Redis answered with an error reply."""


def encode_command(*args: bytes | str | int) -> bytes:
    """One command in RESP2 (an array of bulk strings)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class _Protocol(asyncio.Protocol):
    def __init__(self, client: RespClient) -> None:
        self._client = client

    def data_received(self, data: bytes) -> None:
        self._client._received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._client._lost(exc)


class RespClient:
    """Pipelined commands on one connection (see the module docstring)."""

    def __init__(self) -> None:
        self._reader = hiredis.Reader(notEnoughData=_NEED_DATA)
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._transport: asyncio.Transport | None = None
        self._error: BaseException | None = None

    async def connect(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(lambda: _Protocol(self), host, port)
        self._transport = transport

    def execute(self, *args: bytes | str | int) -> asyncio.Future[Any]:
        """Send a command (with the others of this loop iteration); its reply."""
        if self._error is not None or self._transport is None:
            raise ConnectionError(f"redis connection lost: {self._error}")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        self._out.append(encode_command(*args))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._transport is not None and self._out:
            self._transport.write(b"".join(self._out))
            self._out.clear()

    def _received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        waiting = self._waiting
        while True:
            reply = reader.gets()
            if reply is _NEED_DATA:  # (None is a nil reply: XREAD that timed out)
                return
            fut = waiting.popleft()
            if fut.done():
                continue
            if isinstance(reply, hiredis.ReplyError):
                fut.set_exception(RespError(str(reply)))
            else:
                fut.set_result(reply)

    def _lost(self, exc: Exception | None) -> None:
        self._error = exc or ConnectionError("closed by the server")
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(ConnectionError(f"redis connection lost: {self._error}"))

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

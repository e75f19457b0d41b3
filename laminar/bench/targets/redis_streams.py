"""Redis Streams: one stream key per partition, a pipelined RESP client.

A produce is one XADD per record with a single field `v`, all pipelined on
the worker's one connection (`laminar.bench.targets.resp`: commands coalesced
per loop iteration, replies parsed by hiredis); it is acknowledged when every
reply is in. A reader is an XREAD cursor on the last id seen, blocking up to
the fetch wait when nothing is there (each reader has a connection of its own,
since a blocked XREAD holds its connection).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from laminar.bench.servers.redis_server import RedisServer, redis_version
from laminar.bench.targets.base import (
    Durability,
    Endpoint,
    Start,
    System,
    SystemUnavailable,
)
from laminar.bench.targets.resp import RespClient

KIND = "redis-streams"
VARIANTS = {"always": "always", "everysec": "everysec"}
_FIELD = b"v"


def _key(stream: str, partition: int) -> str:
    return f"{stream}:{partition}"


class RedisReader:
    def __init__(self, client: RespClient, key: str, last_id: bytes) -> None:
        self._client = client
        self._key = key
        self._last_id = last_id

    async def fetch(self, max_records: int, max_wait_ms: int) -> list[bytes]:
        args: list[Any] = ["XREAD", "COUNT", max_records]
        if max_wait_ms > 0:  # BLOCK 0 would mean "forever" to Redis
            args += ["BLOCK", max_wait_ms]
        # RESP2 answer: [[key, [[id, [field, value]], ...]]] or nil.
        answer: Any = await self._client.execute(*args, "STREAMS", self._key, self._last_id)
        if not answer:
            return []
        entries = answer[0][1]
        if not entries:
            return []
        self._last_id = entries[-1][0]
        return [fields[1] for _id, fields in entries]

    async def close(self) -> None:
        await self._client.close()


class RedisStreamsTarget:
    """The client side: one pipelined connection for produces."""

    def __init__(self, endpoint: Endpoint) -> None:
        host, _, port = endpoint.address.rpartition(":")
        self._host = host
        self._port = int(port)
        self._client = RespClient()

    async def connect(self) -> None:
        await self._client.connect(self._host, self._port)
        await self._client.execute("PING")

    async def create_stream(self, stream: str, partitions: int) -> None:
        # A stream key exists once written; nothing to create.
        del stream, partitions

    async def produce(self, stream: str, partition: int, values: Sequence[bytes]) -> None:
        key = _key(stream, partition)
        execute = self._client.execute
        replies = [execute("XADD", key, "*", _FIELD, value) for value in values]
        for reply in replies:
            await reply

    async def open_reader(
        self, stream: str, partition: int, start: Start, prefetch: int = 0
    ) -> RedisReader:
        """One XREAD at a time whatever `prefetch` says: each one's cursor is the
        last id of the previous reply, so a client cannot ask ahead."""
        key = _key(stream, partition)
        last_id = b"0-0"
        if start == "tail":
            newest: Any = await self._client.execute("XREVRANGE", key, "+", "-", "COUNT", 1)
            if newest:
                last_id = newest[0][0]
        client = RespClient()  # a blocked XREAD holds its connection
        await client.connect(self._host, self._port)
        return RedisReader(client, key, last_id)

    async def close(self) -> None:
        await self._client.close()


class RedisStreamsSystem(System):
    """redis-server started by the harness, `appendfsync` per variant."""

    def __init__(self, variant: str = "always") -> None:
        if variant not in VARIANTS:
            raise SystemUnavailable(
                f"redis-streams has variants {', '.join(VARIANTS)}, not {variant!r}"
            )
        self.variant = variant
        self.name = KIND if variant == "always" else f"{KIND}:{variant}"
        self._server: RedisServer | None = None

    def start(self, workdir: Path) -> Endpoint:
        if redis_version() is None:
            raise SystemUnavailable("redis-server is not installed (make bench installs it)")
        self._server = RedisServer(workdir, appendfsync=VARIANTS[self.variant])
        return Endpoint(KIND, self._server.start())

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    def durability(self) -> Durability:
        settings = {
            "appendonly": "yes",
            "appendfsync": self.variant,
            "save": '""',
            "auto-aof-rewrite-percentage": "0",
        }
        if self.variant == "always":
            return Durability(
                True,
                "ack after fsync",
                "appendfsync always: the AOF is written and fsynced before the "
                "replies of the same event-loop iteration are sent",
                settings,
            )
        return Durability(
            False,
            "ack before fsync (AOF fsync every 1 s)",
            "appendfsync everysec: acknowledged once written to the AOF (page "
            "cache); a background thread fsyncs about once a second",
            settings,
        )

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {
            "redis-server": redis_version() or "not installed",
            "client": f"laminar.bench.targets.resp (pipelined, hiredis {version('hiredis')})",
        }

    def server_pids(self) -> dict[str, int]:
        pid = None if self._server is None else self._server.pid
        return {} if pid is None else {self.name: pid}

    def log_tail(self) -> str:
        return "" if self._server is None else self._server.log_tail()

"""Redis Streams: one stream key per partition, redis-py's asyncio client.

A produce is one pipeline (no MULTI) of one XADD per record with a single
field `v`; it is acknowledged when every reply is in. redis-py does not
multiplex a connection, so each request in flight takes a pooled connection
of its own (a window of 8 is 8 connections). A reader is an XREAD cursor on
the last id seen, blocking up to the fetch wait when nothing is there.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from laminar.bench.servers.redis_server import RedisServer, redis_version
from laminar.bench.targets.base import (
    Durability,
    Endpoint,
    Start,
    System,
    SystemUnavailable,
)

KIND = "redis-streams"
VARIANTS = {"always": "always", "everysec": "everysec"}
_FIELD = b"v"


def _key(stream: str, partition: int) -> str:
    return f"{stream}:{partition}"


class RedisReader:
    def __init__(self, client: aioredis.Redis, key: str, last_id: bytes) -> None:
        self._client = client
        self._key = key
        self._last_id = last_id

    async def fetch(self, max_records: int, max_wait_ms: int) -> list[bytes]:
        # BLOCK 0 would mean "forever" to Redis: no wait is no BLOCK at all.
        block = max_wait_ms if max_wait_ms > 0 else None
        # RESP2 answer: [[key, [(id, {field: value}), ...]]]; redis-py types it loosely.
        answer: Any = await self._client.xread(
            {self._key: self._last_id}, count=max_records, block=block
        )
        if not answer:
            return []
        entries = answer[0][1]
        if not entries:
            return []
        self._last_id = entries[-1][0]
        return [fields[_FIELD] for _id, fields in entries]

    async def close(self) -> None:
        pass


class RedisStreamsTarget:
    """The redis-py client side."""

    def __init__(self, endpoint: Endpoint) -> None:
        host, _, port = endpoint.address.rpartition(":")
        self._client = aioredis.Redis(
            host=host, port=int(port), decode_responses=False, max_connections=1024
        )

    async def connect(self) -> None:
        await self._client.ping()

    async def create_stream(self, stream: str, partitions: int) -> None:
        # A stream key exists once written; nothing to create.
        del stream, partitions

    async def produce(self, stream: str, partition: int, values: Sequence[bytes]) -> None:
        key = _key(stream, partition)
        async with self._client.pipeline(transaction=False) as pipe:
            for value in values:
                pipe.xadd(key, {_FIELD: value})
            await pipe.execute()

    async def open_reader(self, stream: str, partition: int, start: Start) -> RedisReader:
        key = _key(stream, partition)
        last_id = b"0-0"
        if start == "tail":
            newest: Any = await self._client.xrevrange(key, count=1)
            if newest:
                last_id = newest[0][0]
        # Each reader blocks on a connection of its own from the pool.
        return RedisReader(self._client, key, last_id)

    async def close(self) -> None:
        await self._client.aclose()


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
        import redis

        return {"redis-server": redis_version() or "not installed", "redis-py": redis.__version__}

    def log_tail(self) -> str:
        return "" if self._server is None else self._server.log_tail()

"""laminar: a topic with N partitions, `laminar.client.AsyncClient`.

A produce is one produce request with the whole batch, acknowledged by the
owning shard after its group-commit flush (with `--flush always`: after
fdatasync). A reader is an index cursor; `fetch` is a long-poll
`fetch_batch` whose values are views into the answer (no object per record).
The node is either started by the harness (`laminar`, `laminar:interval`) or
an existing one given with `--bootstrap` (its flush policy is then whatever it
was started with, and the results say that the harness does not know it).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from laminar.bench.servers.laminar_node import LaminarNode
from laminar.bench.targets.base import (
    Durability,
    Endpoint,
    Start,
    System,
    SystemUnavailable,
)
from laminar.client import AsyncClient, TopicExistsError

KIND = "laminar"
VARIANTS = ("always", "interval")
_FETCH_MAX_BYTES = 8 << 20


class LaminarReader:
    def __init__(self, client: AsyncClient, topic: str, partition: int, index: int) -> None:
        self._client = client
        self._topic = topic
        self._partition = partition
        self._index = index

    async def fetch(self, max_records: int, max_wait_ms: int) -> list[memoryview]:
        batch = await self._client.fetch_batch(
            self._topic,
            self._partition,
            self._index,
            max_bytes=_FETCH_MAX_BYTES,
            max_records=max_records,
            max_wait_ms=max_wait_ms,
        )
        if batch.next_index is not None:
            self._index = batch.next_index
        return batch.values()  # views into the answer's buffer, no object per record

    async def close(self) -> None:
        pass


class LaminarTarget:
    """The `AsyncClient` side."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._client = AsyncClient(endpoint.address)

    async def connect(self) -> None:
        await self._client.connect()

    async def create_stream(self, stream: str, partitions: int) -> None:
        with contextlib.suppress(TopicExistsError):
            await self._client.create_topic(stream, partitions)

    async def produce(self, stream: str, partition: int, values: Sequence[bytes]) -> None:
        await self._client.produce(stream, partition, values)

    async def open_reader(self, stream: str, partition: int, start: Start) -> LaminarReader:
        lowest, highest = await self._client.offsets(stream, partition)
        return LaminarReader(
            self._client, stream, partition, lowest if start == "beginning" else highest
        )

    async def close(self) -> None:
        await self._client.close()


class LaminarSystem(System):
    """A node the harness starts (flush policy per variant), or `--bootstrap`."""

    def __init__(
        self,
        variant: str = "always",
        *,
        bootstrap: str | None = None,
        cores: int | None = None,
        runtime: str = "auto",
    ) -> None:
        if variant not in VARIANTS:
            raise SystemUnavailable(f"laminar has variants {', '.join(VARIANTS)}, not {variant!r}")
        self.variant = variant
        self.name = KIND if variant == "always" else f"{KIND}:{variant}"
        self.bootstrap = bootstrap
        self.cores = cores or os.cpu_count() or 1
        self.runtime = runtime
        self._node: LaminarNode | None = None

    def start(self, workdir: Path) -> Endpoint:
        if self.bootstrap is not None:
            return Endpoint(KIND, self.bootstrap)
        self._node = LaminarNode(workdir, self.cores, flush=self.variant, runtime=self.runtime)
        return Endpoint(KIND, self._node.start())

    def stop(self) -> None:
        if self._node is not None:
            self._node.stop()

    def durability(self) -> Durability:
        if self.bootstrap is not None:
            return Durability(
                self.variant == "always",
                "as the external node was started",
                f"--bootstrap {self.bootstrap}: the harness did not start this node and "
                "cannot see its --flush policy; results assume the policy named by the "
                "target variant",
                {"flush": f"{self.variant} (assumed)"},
            )
        settings = {"flush": self.variant, "cores": str(self.cores), "runtime": self.runtime}
        if self.variant == "always":
            return Durability(
                True,
                "ack after fsync",
                "--flush always: a produce is acknowledged after its group-commit "
                "flush (write + fdatasync) completed",
                settings,
            )
        return Durability(
            False,
            "ack before fsync (sync every 100 ms)",
            "--flush interval: acknowledged once written to the page cache; a "
            "background task fdatasyncs every 100 ms",
            settings,
        )

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {"laminar": version("laminar"), "client": "laminar.client.AsyncClient"}

    def server_pid(self) -> int | None:
        return None if self._node is None else self._node.pid

    def log_tail(self) -> str:
        return "" if self._node is None else self._node.log_tail()

"""The seam between the harness and a system under test.

A system is two things: a server the coordinator starts and stops (a
`System`), and a client each load-generator process opens (a `Target`). They
meet in an `Endpoint`, a picklable description of where the server listens,
sent to the worker processes.

The client interface is deliberately small, the operations every compared
system has in the same meaning:

- `create_stream(stream, partitions)`: a log split into partitions;
- `produce(stream, partition, values)`: append a batch and return only when
  the server acknowledged it, with the durability that `Durability` states;
- `open_reader(stream, partition, start, prefetch)`: a cursor from the
  beginning or the tail, whose `fetch` returns what is there, waiting at most
  `max_wait_ms` when nothing is; with `prefetch` > 0 it may ask ahead of what
  it returned, where its client can.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

Start = Literal["beginning", "tail"]


@dataclass(frozen=True, slots=True)
class Durability:
    """What an acknowledgement means for a target, in words and settings."""

    fsync_before_ack: bool
    """True when a produce is acknowledged only after its data was fsync'ed."""
    summary: str
    """One line for tables: "ack after fsync" / "ack before fsync (every 1 s)"."""
    detail: str
    """How that was established (config, version, measurement)."""
    settings: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a started system listens; what a worker needs to connect."""

    kind: str
    """The client to use: "laminar", "nats-jetstream" or "redis-streams"."""
    address: str
    """host:port."""
    options: dict[str, str] = field(default_factory=dict)


class Reader(Protocol):
    async def fetch(self, max_records: int, max_wait_ms: int) -> Sequence[bytes | memoryview]:
        """The next values in order (empty after `max_wait_ms` with none); a
        value may be a view into the client's receive buffer."""
        ...

    async def close(self) -> None: ...


class Target(Protocol):
    """A client of one system, used from one event loop in one process."""

    async def connect(self) -> None: ...

    async def create_stream(self, stream: str, partitions: int) -> None: ...

    async def produce(self, stream: str, partition: int, values: Sequence[bytes]) -> None:
        """Return once the whole batch is acknowledged; raise if any part failed."""
        ...

    async def open_reader(
        self, stream: str, partition: int, start: Start, prefetch: int = 0
    ) -> Reader: ...

    async def close(self) -> None: ...


class SystemUnavailable(RuntimeError):
    """The system cannot run here (not installed, variant not supported); the
    message says why, and the run is reported as failed with it."""


class System(ABC):
    """A system under test as the coordinator sees it: start, describe, stop.

    `start` gets a fresh empty directory for every run, so that no target
    starts with state (or warm caches of its own files) that another lacks.
    """

    name: str

    @abstractmethod
    def start(self, workdir: Path) -> Endpoint: ...

    @abstractmethod
    def stop(self) -> None:
        """Stop what `start` started; safe to call twice or without `start`."""

    @abstractmethod
    def durability(self) -> Durability: ...

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """Server and client versions, for the results."""

    def log_tail(self) -> str:
        """The end of the server's log, for error reports ('' if none)."""
        return ""

    def server_pids(self) -> dict[str, int]:
        """Each started server process by name (a cluster has several; a
        process's children count as its own, e.g. a laminar node's shards), for
        the server CPU shown next to every figure; empty if the harness did not
        start the server."""
        return {}

"""NATS JetStream: one file-storage stream per partition, nats-py's client.

A produce is one `publish_async` per record (JetStream 2.9 has no batch
publish), all pipelined on the connection; it is acknowledged when every
PubAck is in.

`nats-jetstream-r<N>` is N nats-servers routed as one JetStream cluster on
loopback, with streams of `num_replicas` N: a publish is acknowledged by the
stream's leader once the message is committed by a majority of the stream's
Raft group (written, not fsynced: see `durability`). The client connects to
one of the servers (the URL list has all) and the cluster routes each publish
to the stream's leader. Readers come in two kinds:

- from the beginning (the backlog consume workload): a pull consumer (ack
  none); each `fetch` is one JetStream fetch request for up to `max_records`,
  so NATS, like every other target there, reads with prefetch off: one
  request, one answer, nothing buffered ahead of the caller. With
  `--prefetch` the push consumer below reads the backlog instead (NATS's way
  of reading ahead: the server pushes, flow-controlled);
- at the tail (end-to-end workloads): an ordered push consumer (ack none,
  flow control, the way NATS recommends to follow a stream): messages land in
  a local buffer as the server pushes them and `fetch` returns what is
  buffered, waiting up to the fetch wait for the first. A pull fetch would
  hold a partial batch until its timeout, adding that wait to every tailing
  read.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import nats
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
)
from nats.js.errors import BadRequestError

from laminar.bench.servers.nats_server import (
    NatsCluster,
    NatsServer,
    nats_version,
    supports_sync_always,
)
from laminar.bench.targets.base import (
    Durability,
    Endpoint,
    Start,
    System,
    SystemUnavailable,
)

KIND = "nats-jetstream"
VARIANTS = ("default", "sync-always")
_MAX_PENDING_PUBLISHES = 100_000
_API_TIMEOUT_S = 30.0
"""JetStream API requests (stream and consumer creation; not publishes): an R3
stream's or consumer's creation is a Raft round in the cluster, and nats-py's
5 s default timed out under this machine's load (1 round in 5 lost so)."""


def _stream_name(stream: str, partition: int) -> str:
    return f"{stream}_p{partition}".replace(".", "_").replace("-", "_")


def _subject(stream: str, partition: int) -> str:
    return f"{_stream_name(stream, partition)}.records"


class NatsReader:
    """An ordered push consumer feeding a local buffer."""

    def __init__(self) -> None:
        self._buffer: deque[bytes] = deque()
        self._arrived = asyncio.Event()
        self._sub: JetStreamContext.PushSubscription | None = None

    async def start(self, js: JetStreamContext, stream: str, subject: str, start: Start) -> None:
        policy = DeliverPolicy.ALL if start == "beginning" else DeliverPolicy.NEW
        self._sub = await js.subscribe(
            subject,
            stream=stream,
            cb=self._on_message,
            ordered_consumer=True,
            deliver_policy=policy,
            pending_msgs_limit=-1,
            pending_bytes_limit=-1,
        )

    async def _on_message(self, msg: Msg) -> None:
        self._buffer.append(msg.data)
        self._arrived.set()

    async def fetch(self, max_records: int, max_wait_ms: int) -> list[bytes]:
        if not self._buffer and max_wait_ms > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), max_wait_ms / 1000)
            except TimeoutError:
                return []
        buffer = self._buffer
        n = min(max_records, len(buffer))
        out = [buffer.popleft() for _ in range(n)]
        if not buffer:
            self._arrived.clear()
        return out

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()


class NatsPullReader:
    """A pull consumer: one fetch request per `fetch`, no prefetch."""

    def __init__(self) -> None:
        self._sub: JetStreamContext.PullSubscription | None = None

    async def start(self, js: JetStreamContext, stream: str, subject: str) -> None:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE)
        self._sub = await js.pull_subscribe(subject, stream=stream, config=config)

    async def fetch(self, max_records: int, max_wait_ms: int) -> list[bytes]:
        assert self._sub is not None
        try:
            msgs = await self._sub.fetch(max_records, timeout=max(max_wait_ms, 1) / 1000)
        except (TimeoutError, NatsTimeoutError):
            return []
        return [m.data for m in msgs]

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()


class NatsJetStreamTarget:
    """The nats-py client side."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._urls = [f"nats://{address}" for address in endpoint.address.split(",")]
        self._replicas = int(endpoint.options.get("replicas", "1"))
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None

    @property
    def js(self) -> JetStreamContext:
        if self._js is None:
            raise RuntimeError("connect() first")
        return self._js

    async def connect(self) -> None:
        self._nc = await nats.connect(
            servers=self._urls,
            allow_reconnect=False,
            pending_size=64 << 20,
            max_outstanding_pings=10,
        )
        self._js = self._nc.jetstream(
            timeout=_API_TIMEOUT_S, publish_async_max_pending=_MAX_PENDING_PUBLISHES
        )

    async def create_stream(self, stream: str, partitions: int) -> None:
        for p in range(partitions):
            try:
                await self.js.add_stream(
                    name=_stream_name(stream, p),
                    subjects=[_subject(stream, p)],
                    storage=StorageType.FILE,
                    retention=RetentionPolicy.LIMITS,
                    discard=DiscardPolicy.OLD,
                    num_replicas=self._replicas,
                )
            except BadRequestError as exc:  # already there (another process made it)
                if "already in use" not in str(exc):
                    raise

    async def produce(self, stream: str, partition: int, values: Sequence[bytes]) -> None:
        js = self.js
        subject = _subject(stream, partition)
        name = _stream_name(stream, partition)
        acks = [await js.publish_async(subject, value) for value in values]
        for ack in await asyncio.gather(*acks):
            if ack.stream != name:
                raise RuntimeError(f"acknowledged by stream {ack.stream!r}, not {name!r}")

    async def open_reader(
        self, stream: str, partition: int, start: Start, prefetch: int = 0
    ) -> NatsReader | NatsPullReader:
        name, subject = _stream_name(stream, partition), _subject(stream, partition)
        if start == "beginning" and not prefetch:
            pull = NatsPullReader()
            await pull.start(self.js, name, subject)
            return pull
        reader = NatsReader()
        await reader.start(self.js, name, subject, start)
        return reader

    async def close(self) -> None:
        if self._nc is not None:
            await self._nc.close()


class NatsJetStreamSystem(System):
    """nats-server started by the harness; `sync-always` needs a server >= 2.10."""

    def __init__(self, variant: str = "default", *, replicas: int | None = None) -> None:
        if variant not in VARIANTS:
            raise SystemUnavailable(
                f"nats-jetstream has variants {', '.join(VARIANTS)}, not {variant!r}"
            )
        self.variant = variant
        self.replicas = replicas or 1
        base = KIND if replicas is None else f"{KIND}-r{replicas}"
        self.name = base if variant == "default" else f"{base}:{variant}"
        self._server: NatsServer | None = None
        self._cluster: NatsCluster | None = None

    def start(self, workdir: Path) -> Endpoint:
        version = nats_version()
        if version is None:
            raise SystemUnavailable("nats-server is not installed (make bench installs it)")
        sync = None
        if self.variant == "sync-always":
            if not supports_sync_always(version):
                raise SystemUnavailable(
                    f"nats-server {'.'.join(map(str, version))} has no sync_interval option "
                    "(added in 2.10): JetStream cannot fsync before acknowledging here"
                )
            sync = "always"
        options = {"replicas": str(self.replicas)}
        if self.replicas > 1:
            self._cluster = NatsCluster(workdir, self.replicas, sync=sync)
            return Endpoint(KIND, self._cluster.start(), options)
        self._server = NatsServer(workdir, sync=sync)
        return Endpoint(KIND, self._server.start(), options)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        if self._cluster is not None:
            self._cluster.stop()

    def durability(self) -> Durability:
        settings = {"storage": "file", "replicas": str(self.replicas)}
        replicated = ""
        if self.replicas > 1:
            settings["servers"] = str(self.replicas)
            replicated = (
                f"; {self.replicas} clustered servers, num_replicas {self.replicas}: "
                "acknowledged once a majority of the stream's replicas have it"
            )
        if self.variant == "sync-always":
            settings["sync_interval"] = "always"
            return Durability(
                True,
                "ack after fsync",
                "sync_interval: always: the file store syncs on every write" + replicated,
                settings,
            )
        version = nats_version()
        shown = "not installed" if version is None else ".".join(map(str, version))
        if version is not None and supports_sync_always(version):
            settings["sync_interval"] = "2m (default)"
            detail = (
                f"nats-server {shown} default: acknowledged once written to the page "
                "cache; the file store fsyncs every sync_interval (2 minutes)"
            )
        else:
            settings["sync_interval"] = "not configurable (2.9)"
            detail = (
                f"nats-server {shown}: acknowledged once written to the page cache; "
                "the file store fsyncs on a timer (observed: about 2 minutes); "
                "sync_interval/always does not exist before 2.10"
            )
        summary = "ack before fsync (periodic sync, ~2 min)"
        if self.replicas > 1:
            summary = f"ack on a majority of {self.replicas}, before fsync (periodic sync)"
        return Durability(False, summary, detail + replicated, settings)

    def versions(self) -> dict[str, str]:
        version = nats_version()
        shown = "not installed" if version is None else ".".join(map(str, version))
        return {"nats-server": shown, "nats-py": _nats_py_version()}

    def server_pids(self) -> dict[str, int]:
        if self._cluster is not None:
            return self._cluster.pids()
        pid = None if self._server is None else self._server.pid
        return {} if pid is None else {self.name: pid}

    def log_tail(self) -> str:
        if self._cluster is not None:
            return self._cluster.log_tail()
        return "" if self._server is None else self._server.log_tail()


def _nats_py_version() -> str:
    from importlib.metadata import version

    return version("nats-py")

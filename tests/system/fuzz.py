"""A structure-aware fuzzer against a real node, and the guard that judges it.

Frames come from the protocol's own encoders (every client request, valid),
then are mutated (bytes flipped, fields rewritten, truncated, spliced, headers
replaced by hostile msgpack), pipelined in bursts, sent over TCP to the node
port and the shard ports (answers read, half read, or never read) and over
UDP. Meanwhile a `Guard`, on connections of its own, pings every shard,
produces known records, and samples every shard's RSS. The node passes when:

- every shard's RSS grew by at most the input budget + 64 MiB;
- every guard ping was answered, the slowest within `ping_max_s`;
- every acknowledged known record is present exactly once, in the order its
  producer was answered (identity, not counts); no known record is present
  twice, answered or not.

Briefly in `make test` (`test_node_fuzz.py`), for minutes in `make soak`:

    python -m tests.system.fuzz --seconds 600 [--seed N]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import msgpack

from laminar.placement import partition_id, shard_for
from laminar.wire import (
    AlterTopicRequest,
    CreateTopicRequest,
    DeleteTopicRequest,
    FetchRequest,
    ListOffsetsRequest,
    ListTopicsRequest,
    Message,
    MetadataRequest,
    Ping,
    ProduceRequest,
)
from laminar.wire.writes import (
    AbortWriteRequest,
    CommitWriteRequest,
    StagedPart,
    StageRequest,
    WriteStatusRequest,
)
from tests.system.nodes import RunningNode, rss_bytes, start_node
from tests.system.wireclient import NodeClient, ServerError

KNOWN_TOPIC = "known"
FUZZ_TOPIC = "fuzz"
PARTITIONS = 4
FUZZ_NAMES = ("fuzz", "fz-a", "fz-b", "fz-c")
"""The only topic names the fuzzer writes: never the known topic's."""
RSS_SLACK = 64 << 20
NODE_FLAGS = {
    "cores": 2,
    "max_input_bytes": 32 << 20,
    "max_frame_bytes": 1 << 20,
    "frame_timeout": 2.0,
    "idle_timeout": 5,
    "max_topics": 16,
}


# -- what is sent ---------------------------------------------------------------------


def valid_request(rng: random.Random, pids: list[int]) -> Message:
    """One well-formed client request, as the client library would encode it."""
    pid = rng.choice(pids)
    values = [b"fuzz-%d" % rng.randrange(1 << 30) * rng.randrange(1, 40)]
    kind = rng.randrange(13)
    if kind == 0:
        return ProduceRequest.from_values(pid, values * rng.randrange(1, 5))
    if kind == 1:
        producer = rng.randrange(1 << 62)
        return ProduceRequest.from_values(pid, values, producer_id=producer, sequence=0)
    if kind == 2:
        return FetchRequest(pid, rng.randrange(50), max_bytes=rng.choice([1, 4096, 1 << 20]))
    if kind == 3:
        return ListOffsetsRequest(pid, rng.choice([None, 0, int(time.time() * 1000)]))
    if kind == 4:
        return MetadataRequest(layout_only=rng.random() < 0.5)
    if kind == 5:
        return ListTopicsRequest()
    if kind == 6:
        return Ping(pid)
    if kind == 7:
        name = rng.choice(FUZZ_NAMES)
        return CreateTopicRequest(name, rng.randrange(1, 5), {"retention_ms": 3_600_000})
    if kind == 8:
        return DeleteTopicRequest(rng.choice(FUZZ_NAMES[1:]))
    if kind == 9:
        return AlterTopicRequest(rng.choice(FUZZ_NAMES[1:]), {"retention_bytes": 1 << 30})
    write_id = rng.randrange(1 << 64)
    if kind == 10:
        return StageRequest(pid, write_id, rng.randrange(4), rng.randrange(4), 0, tuple(values))
    if kind == 11:
        part = StagedPart(pid, write_id, rng.randrange(4), rng.randrange(4), 1, 1)
        return CommitWriteRequest(write_id, (part,))
    if rng.random() < 0.5:
        return AbortWriteRequest(write_id)
    return WriteStatusRequest(write_id)


def hostile_header(rng: random.Random) -> bytes:
    """A msgpack header a well-behaved client would never send."""
    choices: list[Callable[[], object]] = [
        lambda: {"index": rng.choice([-1, 2**64 - 1, 1.5, "x", None, [1], {"a": 1}])},
        lambda: {"max_bytes": 2**63, "index": 0, "max_records": 0, "max_wait_ms": 2**40},
        lambda: {"name": "é" * rng.randrange(300), "partitions": 2**40},
        lambda: {f"k{i}": [[]] * 3 for i in range(rng.randrange(200))},
        lambda: [1, 2, 3],
        lambda: {"parts": [[1, 2, 3, 4, 5]] * rng.randrange(100), "commit_id": -5},
    ]
    return bytes(msgpack.packb(rng.choice(choices)(), use_bin_type=True))


def mutate(rng: random.Random, data: bytes) -> bytes:
    """`data` with one structure-aware mutation (or none, a fifth of the time)."""
    kind = rng.randrange(9)
    raw = bytearray(data)
    if kind == 0 or len(raw) < 24:
        return data
    if kind == 1:  # flip bytes anywhere
        for _ in range(rng.randrange(1, 6)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
    elif kind == 2:  # a prefix field: length, op, flags, correlation, partition
        offset = rng.choice([0, 6, 7, 8, 12, 16])
        raw[offset] = rng.randrange(256)
    elif kind == 3:  # truncated
        return bytes(raw[: rng.randrange(len(raw))])
    elif kind == 4:  # the frame length lies
        struct.pack_into(">I", raw, 0, rng.choice([0, 1, len(raw), 2**31, 2**32 - 1]))
    elif kind == 5:  # the header length lies
        struct.pack_into(">I", raw, 20, rng.choice([0, 2**31, len(raw) * 2]))
    elif kind == 6:  # a hostile header in a well-framed frame
        header = hostile_header(rng)
        body = bytes(raw[4:20]) + struct.pack(">I", len(header)) + header
        return struct.pack(">I", len(body)) + body
    elif kind == 7:  # trailing garbage inside the frame
        extra = rng.randbytes(rng.randrange(1, 64))
        raw += extra
        struct.pack_into(">I", raw, 0, len(raw) - 4)
    else:  # an op that is not a client's
        raw[6] = rng.choice([0, 19, 31, 32, 33, 64, 70, 96, 127, 200, 255])
    return bytes(raw)


# -- the guard ------------------------------------------------------------------------


@dataclass
class Guard:
    """Pings every shard, produces known records and samples shard RSS, on
    connections of its own, while the fuzzer runs."""

    node: RunningNode
    ping_max_s: float
    rss_growth_max: int
    acked: dict[int, list[bytes]] = field(default_factory=dict)
    unanswered: set[bytes] = field(default_factory=set)
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    peaks: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._pids = self.node.shard_pids()
        self.baseline = {pid: rss_bytes(pid) for pid in self._pids}
        self.peaks = dict(self.baseline)
        self._threads = [
            threading.Thread(target=self._sample, daemon=True),
            threading.Thread(target=self._work, daemon=True),
        ]

    def __enter__(self) -> Guard:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            for pid in self._pids:
                with contextlib.suppress(OSError, AssertionError):  # a shard restarting
                    self.peaks[pid] = max(self.peaks[pid], rss_bytes(pid))

    def _work(self) -> None:
        with NodeClient(self.node.host, self.node.port) as client:
            info = client.topic(KNOWN_TOPIC)
            per_shard = {}
            for p in range(PARTITIONS):
                pid = partition_id(info.topic_id, p)
                per_shard.setdefault(shard_for(pid, len(self._pids)), pid)
            n = 0
            while not self._stop.wait(0.02):
                for pid in per_shard.values():
                    start = time.monotonic()
                    try:
                        client.ping(pid)
                    except (OSError, ServerError) as exc:
                        self.failures.append(f"ping of partition {pid}: {exc!r}")
                        return
                    self.latencies.append(time.monotonic() - start)
                n += 1
                if n % 5 == 0:
                    self._produce(client, n)

    def _produce(self, client: NodeClient, n: int) -> None:
        partition = n % PARTITIONS
        value = b"known-%d" % n
        try:
            client.produce(KNOWN_TOPIC, partition, [value])
        except (OSError, ServerError):
            self.unanswered.add(value)
            return
        self.acked.setdefault(partition, []).append(value)

    def verdict(self) -> list[str]:
        """What went wrong (empty: nothing)."""
        problems = list(self.failures)
        if not self.latencies:
            problems.append("no guard ping went through")
        elif max(self.latencies) > self.ping_max_s:
            problems.append(f"the slowest guard ping took {max(self.latencies):.2f} s")
        for pid, peak in self.peaks.items():
            growth = peak - self.baseline[pid]
            if growth > self.rss_growth_max:
                problems.append(f"shard pid {pid} grew by {growth >> 20} MiB")
        problems += self._records()
        return problems

    def _records(self) -> list[str]:
        problems = []
        with NodeClient(self.node.host, self.node.port) as client:
            for p in range(PARTITIONS):
                present = [v for v in client.fetch_all(KNOWN_TOPIC, p) if v.startswith(b"known-")]
                acked = self.acked.get(p, [])
                if len(set(present)) != len(present):
                    problems.append(f"partition {p} holds a known record twice")
                answered = [v for v in present if v not in self.unanswered]
                if answered != acked:
                    missing = sorted(set(acked) - set(answered))[:5]
                    problems.append(f"partition {p}: acknowledged records lost: {missing}")
        return problems

    def summary(self) -> str:
        ordered = sorted(self.latencies) or [0.0]
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        growth = max(peak - self.baseline[pid] for pid, peak in self.peaks.items())
        acked = sum(len(v) for v in self.acked.values())
        return (
            f"guard: {len(self.latencies)} pings, p99 {p99 * 1000:.1f} ms, "
            f"max {ordered[-1] * 1000:.1f} ms; {acked} known records acknowledged; "
            f"largest shard RSS growth {growth >> 20} MiB"
        )


# -- the fuzzer -----------------------------------------------------------------------


@dataclass
class Tally:
    tcp_bursts: int = 0
    frames: int = 0
    datagrams: int = 0
    refused_connections: int = 0


def fuzz(node: RunningNode, rng: random.Random, seconds: float) -> Tally:
    """Send mutated bursts at `node` for `seconds`."""
    with NodeClient(node.host, node.port) as client:
        pids = [
            partition_id(client.topic(name).topic_id, p)
            for name in (KNOWN_TOPIC, FUZZ_TOPIC)
            for p in range(PARTITIONS)
        ]
    pids += [0, 2**64 - 1, rng.randrange(2**64)]
    tally = Tally()
    deadline = time.monotonic() + seconds
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setblocking(False)
    try:
        while time.monotonic() < deadline:
            if rng.random() < 0.25:
                _datagrams(udp, node, rng, pids, tally)
            else:
                _burst(node, rng, pids, tally)
    finally:
        udp.close()
    return tally


def _frames(rng: random.Random, pids: list[int]) -> Iterator[bytes]:
    for n in range(rng.randrange(1, 60)):
        yield mutate(rng, valid_request(rng, pids).encode(n + 1))


def _burst(node: RunningNode, rng: random.Random, pids: list[int], tally: Tally) -> None:
    port = rng.choice([node.port, *node.shard_ports])
    try:
        sock = socket.create_connection((node.host, port), timeout=2)
    except OSError:
        tally.refused_connections += 1
        return
    tally.tcp_bursts += 1
    with sock:
        frames = list(_frames(rng, pids))
        tally.frames += len(frames)
        with contextlib.suppress(OSError):
            if rng.random() < 0.5:
                sock.sendall(b"".join(frames))  # pipelined in one write
            else:
                for frame in frames:
                    sock.sendall(frame)
            ending = rng.randrange(3)
            if ending == 0:
                return  # answers never read
            sock.shutdown(socket.SHUT_WR)
            if ending == 1:
                sock.recv(rng.randrange(1, 4096))  # half read
                return
            while sock.recv(1 << 16):  # all read, until the node closes
                pass


def _datagrams(
    udp: socket.socket, node: RunningNode, rng: random.Random, pids: list[int], tally: Tally
) -> None:
    for frame in _frames(rng, pids):
        with contextlib.suppress(OSError):
            udp.sendto(frame[:1472], (node.host, node.port))
            tally.datagrams += 1
    with contextlib.suppress(OSError):
        while udp.recv(1 << 16):
            pass


def prepare(node: RunningNode) -> None:
    with NodeClient(node.host, node.port) as client:
        for name in (KNOWN_TOPIC, FUZZ_TOPIC):
            client.create_topic(name, PARTITIONS)


def run(node: RunningNode, seed: int, seconds: float, ping_max_s: float) -> tuple[Guard, Tally]:
    """Fuzz `node` for `seconds` under a guard; the guard's verdict is the result."""
    rng = random.Random(seed)
    prepare(node)
    budget = int(NODE_FLAGS["max_input_bytes"])
    with Guard(node, ping_max_s, budget + RSS_SLACK) as guard:
        tally = fuzz(node, rng, seconds)
    return guard, tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--ping-max-s", type=float, default=2.0)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    with tempfile.TemporaryDirectory() as tmp, start_node(Path(tmp), **NODE_FLAGS) as node:
        guard, tally = run(node, seed, args.seconds, args.ping_max_s)
        problems = guard.verdict()
    print(f"seed {seed}: {tally}")
    print(guard.summary())
    for problem in problems:
        print(f"FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

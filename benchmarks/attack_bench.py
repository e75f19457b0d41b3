"""What each attack of issue 24 does to a node, next to the same node unattacked.

    .venv/bin/python benchmarks/attack_bench.py [--seconds 4] [--json]

One node (`--cores 2`, defaults otherwise, a cluster secret so that peer
sessions exist, as on any cluster). For every attack: a window without it,
then a window with it, on the same node. In both, a legitimate client opens a
fresh connection to shard 0's port every 50 ms, pings, produces one 1 KiB
record as an idempotent producer (its own producer id, sequences in order),
and every tenth time a 2 MiB batch. Reported: shard 0's RSS growth at its
peak, the legitimate client's ping (connect included) and produce p99 in
both windows and their ratio, its requests refused, and the records lost
(every acknowledged value is looked for by identity at the end: must be 0).

Attacks (numbers as in the issue):

1. `unread-fetches`: 3 connections x 150 FETCH frames of a 4 MiB answer
   each, in one write per connection, answers never read;
4. `peer-hellos`: 40 connections each open a peer handshake without the
   secret and answer the challenge with an 8 MiB proof frame;
6. `idle-flood`: as many idle connections as the node accepts (up to 3,000);
   `partial-produces`: 40 connections each send 7 of the 8 MiB of a produce
   frame, then stall; `producer-churn`: 4,200 one-record produces under
   random producer ids, to the legitimate producer's partition;
7. `udp-reflection`: forged UDP fetches (of a record whose answer fits a
   datagram) and metadata requests: bytes answered per byte sent.

Targets: RSS growth <= the input budget + 64 MiB; the legitimate p99 under
attack <= 5x unattacked; nothing refused that was the client's own doing; 0 lost.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import socket
import sys
import tempfile
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import psutil

from laminar.bench.servers.laminar_node import LaminarNode
from laminar.placement import partition_id, shard_for
from laminar.replication.transport import PEER_HELLO, PEER_PROOF
from laminar.wire import (
    NEED_DATA,
    CreateTopicRequest,
    ErrorResponse,
    FetchRequest,
    FrameDecoder,
    Message,
    MetadataRequest,
    Ping,
    ProduceRequest,
    decode_response,
    encode_frame,
)

INPUT_BUDGET = 256 << 20
"""The node's default `--max-input-bytes`."""
TOPIC = "target"
SAMPLE_S = 0.05
LEGIT_ADDRESS = "127.0.0.2"
"""The legitimate client's source address: the attacker is another host (127.0.0.1)."""


def rss_bytes(pid: int) -> int:
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return 0


def call(sock: socket.socket, message: Message, corr: int = 1) -> Any:
    sock.sendall(message.encode(corr))
    decoder = FrameDecoder(64 << 20)
    while (frame := decoder.next_frame()) is NEED_DATA:
        data = sock.recv(1 << 20)
        if not data:
            raise ConnectionError("closed by the node")
        decoder.feed(data)
    return decode_response(frame)


@dataclass
class Target:
    host: str
    port: int
    """Shard 0's own port."""
    pid: int
    """A partition shard 0 owns."""
    shard_pid: int
    node_port: int
    small_pid: int
    """A partition holding one record whose fetch answer fits a datagram."""


@dataclass
class Window:
    """What the legitimate client saw in one window."""

    pings: list[float] = field(default_factory=list)
    produces: list[float] = field(default_factory=list)
    big_produces: list[float] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    rss_growth: int = 0

    @staticmethod
    def p99(values: list[float]) -> float | None:
        if not values:
            return None
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


class Legit:
    """The legitimate client: an idempotent producer on fresh connections."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.producer_id = random.SystemRandom().randrange(1 << 62)
        self.sequence = 0
        self.acked: list[bytes] = []

    def window(self, seconds: float) -> Window:
        window = Window()
        baseline = peak = rss_bytes(self.target.shard_pid)
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            n += 1
            self._sample(window, big=n % 10 == 0)
            peak = max(peak, rss_bytes(self.target.shard_pid))
            time.sleep(SAMPLE_S)
        window.rss_growth = peak - baseline
        return window

    def _sample(self, window: Window, big: bool) -> None:
        t = self.target
        start = time.monotonic()
        try:
            with socket.create_connection((t.host, t.port), 30, (LEGIT_ADDRESS, 0)) as sock:
                answer = call(sock, Ping(t.pid))
                if isinstance(answer, ErrorResponse):
                    window.refused.append(f"ping: {answer.code.name}")
                    return
                window.pings.append(time.monotonic() - start)
                self._produce(sock, window, [os.urandom(1024)], window.produces)
                if big:
                    big_values = [os.urandom(1 << 20), os.urandom(1 << 20)]
                    self._produce(sock, window, big_values, window.big_produces)
        except OSError as exc:
            window.refused.append(f"connection: {exc!r}")

    def _produce(
        self, sock: socket.socket, window: Window, values: list[bytes], into: list[float]
    ) -> None:
        request = ProduceRequest.from_values(
            self.target.pid, values, producer_id=self.producer_id, sequence=self.sequence
        )
        start = time.monotonic()
        answer = call(sock, request)
        if isinstance(answer, ErrorResponse):
            window.refused.append(f"produce: {answer.code.name}: {answer.message[:80]}")
            return
        into.append(time.monotonic() - start)
        self.sequence += len(values)
        self.acked += values

    def lost(self) -> int:
        """Acknowledged values not present exactly once (by identity)."""
        t = self.target
        present: dict[bytes, int] = {}
        index = 0
        with socket.create_connection((t.host, t.port), timeout=30) as sock:
            while True:
                answer = call(sock, FetchRequest(t.pid, index, max_bytes=8 << 20))
                if isinstance(answer, ErrorResponse) or not answer.records:
                    break
                for record in answer.records:
                    value = record.decode()[0]
                    present[value] = present.get(value, 0) + 1
                index = answer.next_index
        return sum(1 for value in self.acked if present.get(value) != 1)


# -- the attacks ------------------------------------------------------------------------


Attack = Callable[[Target, Event, MutableMapping[str, Any]], None]


def _connect(t: Target, port: int | None = None) -> socket.socket | None:
    try:
        return socket.create_connection((t.host, port or t.port), timeout=5)
    except OSError:
        return None


def _hold(socks: list[socket.socket], stop: Event) -> None:
    """Keep the attack's connections open until the window ends."""
    stop.wait()
    for sock in socks:
        sock.close()


def unread_fetches(t: Target, stop: Event, notes: MutableMapping[str, Any]) -> None:
    socks = [s for s in (_connect(t) for _ in range(3)) if s is not None]
    frames = b"".join(FetchRequest(t.pid, 0, max_bytes=4 << 20).encode(i) for i in range(150))
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.sendall(frames)
    _hold(socks, stop)


def peer_hellos(t: Target, stop: Event, notes: MutableMapping[str, Any]) -> None:
    hello = encode_frame(PEER_HELLO, 1, 0, {"node_id": "intruder", "nonce": os.urandom(32)})
    proof = encode_frame(PEER_PROOF, 2, 0, {"mac": os.urandom(32)}, os.urandom((8 << 20) - 4096))
    socks = [s for s in (_connect(t) for _ in range(40)) if s is not None]
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.sendall(hello)
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.recv(4096)  # the challenge (or a refusal)
            sock.sendall(proof)
    notes["handshakes_opened"] = len(socks)
    _hold(socks, stop)


def idle_flood(t: Target, stop: Event, notes: MutableMapping[str, Any]) -> None:
    socks = []
    for _ in range(3000):
        sock = _connect(t)
        if sock is None:
            break
        socks.append(sock)
    notes["idle_connections"] = len(socks)
    _hold(socks, stop)


def partial_produces(t: Target, stop: Event, notes: MutableMapping[str, Any]) -> None:
    frame = ProduceRequest.from_values(t.pid, [b"x" * ((8 << 20) - 4096)]).encode(1)
    socks = [s for s in (_connect(t) for _ in range(40)) if s is not None]
    pending = {sock: memoryview(frame)[: 7 << 20] for sock in socks}
    sent = 0
    last_progress = time.monotonic()
    while pending and time.monotonic() - last_progress < 2.0:  # until the node stops reading
        for sock, rest in list(pending.items()):
            try:
                n = sock.send(rest, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                del pending[sock]
                continue
            sent += n
            last_progress = time.monotonic()
            pending[sock] = rest[n:]
            if n == len(rest):
                del pending[sock]
        time.sleep(0.005)
    notes["partial_frames"] = len(socks)
    notes["partial_mib_sent"] = sent >> 20
    _hold(socks, stop)


def producer_churn(t: Target, stop: Event, notes: MutableMapping[str, Any]) -> None:
    rng = random.Random(7)
    sock = _connect(t)
    if sock is None:
        return
    with sock:
        batch = b"".join(
            ProduceRequest.from_values(
                t.pid, [b"churn"], producer_id=rng.randrange(1 << 62), sequence=0
            ).encode(i)
            for i in range(4200)
        )
        with contextlib.suppress(OSError):
            sock.sendall(batch)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(1 << 20):
                pass
    notes["churned_producer_ids"] = 4200
    stop.wait()


def udp_reflection(t: Target, stop: Event, notes: MutableMapping[str, Any]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(1)
        sent = received = 0
        requests = [FetchRequest(t.small_pid, 0, max_bytes=1400), MetadataRequest()]
        for i in range(300):
            data = requests[i % len(requests)].encode(i)
            sock.sendto(data, (t.host, t.node_port))
            sent += len(data)
            with contextlib.suppress(OSError):
                received += len(sock.recv(1 << 16))
    notes["udp_bytes_answered_per_byte_sent"] = round(received / sent, 2)
    stop.wait()


ATTACKS: dict[str, Attack] = {
    "unread-fetches": unread_fetches,
    "peer-hellos": peer_hellos,
    "idle-flood": idle_flood,
    "partial-produces": partial_produces,
    "producer-churn": producer_churn,
    "udp-reflection": udp_reflection,
}


# -- the run ---------------------------------------------------------------------------


def prepare(node: LaminarNode) -> Target:
    host, node_port = "127.0.0.1", int(node.info["port"])
    shard_ports = node.info["shard_ports"]
    with socket.create_connection((host, node_port), timeout=30) as sock:
        created = call(sock, CreateTopicRequest(TOPIC, 4))
    topic_id = created.topic.topic_id
    pid = next(
        partition_id(topic_id, p)
        for p in range(4)
        if shard_for(partition_id(topic_id, p), len(shard_ports)) == 0
    )
    small = next(partition_id(topic_id, p) for p in range(4) if partition_id(topic_id, p) != pid)
    shard_pid = int(node.info["shard_pids"][0])
    t = Target(host, int(shard_ports[0]), pid, shard_pid, node_port, small)
    with socket.create_connection((host, t.port), timeout=30) as sock:
        call(sock, ProduceRequest.from_values(pid, [os.urandom(16 << 10)] * 64))  # to fetch
    with socket.create_connection((host, node_port), timeout=30) as sock:
        call(sock, ProduceRequest.from_values(small, [os.urandom(1300)]))
    return t


def settle(t: Target, timeout_s: float = 60.0) -> None:
    """Wait until the attacker's address is served again (its connections are gone)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with (
            contextlib.suppress(OSError, ConnectionError),
            socket.create_connection((t.host, t.port), timeout=5) as sock,
        ):
            if not isinstance(call(sock, Ping(t.pid)), ErrorResponse):
                return
        time.sleep(0.1)


def run(seconds: float, only: list[str]) -> list[dict[str, Any]]:
    rows = []
    context = multiprocessing.get_context("fork")  # the attacker has a GIL of its own
    with tempfile.TemporaryDirectory() as tmp:
        secret = Path(tmp) / "secret"
        secret.write_bytes(os.urandom(32).hex().encode())
        secret.chmod(0o600)
        node = LaminarNode(Path(tmp), 2, extra_args=("--cluster-secret-file", str(secret)))
        node.start()
        try:
            target = prepare(node)
            legit = Legit(target)
            for name in only:
                calm = legit.window(seconds)
                stop, notes = context.Event(), context.Manager().dict()
                attacker = context.Process(target=ATTACKS[name], args=(target, stop, notes))
                attacker.start()
                attacked = legit.window(seconds)
                stop.set()
                attacker.join(60)
                settle(target)
                rows.append(_row(name, calm, attacked, dict(notes)))
                print(_format(rows[-1]), file=sys.stderr, flush=True)
            lost = legit.lost()
        finally:
            node.stop()
    for row in rows:
        row["lost_at_end"] = lost
    return rows


def _row(name: str, calm: Window, attacked: Window, notes: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"attack": name, "rss_growth_mib": attacked.rss_growth / (1 << 20)}
    for what in ("pings", "produces", "big_produces"):
        before, during = Window.p99(getattr(calm, what)), Window.p99(getattr(attacked, what))
        row[f"{what}_p99_ms"] = [before, during]
        row[f"{what}_ratio"] = during / before if before and during else None
    row["refused_calm"] = calm.refused[:3]
    row["refused_attacked"] = len(attacked.refused)
    row["refused_examples"] = sorted(set(attacked.refused))[:3]
    row["samples_attacked"] = len(attacked.pings)
    row["notes"] = notes
    return row


def _format(row: dict[str, Any]) -> str:
    def ms(pair: list[float | None]) -> str:
        return " / ".join("-" if v is None else f"{v:.1f}" for v in pair)

    return (
        f"{row['attack']:>17}: RSS +{row['rss_growth_mib']:.0f} MiB, ping p99 "
        f"{ms(row['pings_p99_ms'])} ms, produce p99 {ms(row['produces_p99_ms'])} ms, "
        f"2 MiB produce p99 {ms(row['big_produces_p99_ms'])} ms, refused "
        f"{row['refused_attacked']} {row['refused_examples']} {row['notes']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="each window")
    parser.add_argument("--attacks", nargs="*", default=list(ATTACKS), choices=list(ATTACKS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = run(args.seconds, args.attacks)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for row in rows:
            print(_format(row))
        print(f"acknowledged records lost: {rows[0]['lost_at_end'] if rows else 0}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

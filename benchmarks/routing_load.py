"""The load generator of routing_bench.py: closed-loop small requests, one process.

    python benchmarks/routing_load.py udp --host H --port P --pids FILE ...
    python benchmarks/routing_load.py tcp --host H --shard-ports A,B --pids FILE ...

Sends PING requests (the smallest partition request: the owning shard answers
it without touching a log, so what is measured is the path to the owner) for
the partition ids in FILE, round robin, keeping `--inflight` requests
outstanding in total, for `--warmup` then `--seconds` seconds. Each request's
latency is its round trip (closed loop: no request waits for a schedule slot,
so there is no coordinated omission to correct). Prints one JSON object.

- udp: `--sockets` connected UDP sockets to the node port, the in-flight
  requests split evenly. Several source ports stand for several clients: the
  kernel's reuseport hash spreads them over the shards when nothing steers.
  A request unanswered after `LOST_AFTER_S` is counted lost and replaced.
- tcp: one connection per shard port; one sequence of requests, each sent to
  the connection of its owning shard (`placement.shard_for`, what the client
  library does); the answers of a wakeup are read and as many next requests
  written, one write per connection.

The frames are encoded once up front (correlation id = slot); the loop only
sends them and reads the correlation id of each answer (bytes 8..11), so the
generator costs a few microseconds per request.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import socket
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from laminar.placement import shard_for
from laminar.wire import Ping

SLOTS = 1 << 16
"""Distinct pre-encoded requests (correlation id = slot); far more than in flight."""
LOST_AFTER_S = 1.0
_CORR = struct.Struct(">I")
_LEN = struct.Struct(">I")


class Recorder:
    """Completions and latencies inside the measured window."""

    def __init__(self, warmup_s: float, seconds: float) -> None:
        now = time.perf_counter()
        self.start = now + warmup_s
        self.end = self.start + seconds
        self.latencies: list[float] = []
        self.lost = 0

    def done(self, sent_at: float, now: float) -> None:
        if self.start <= sent_at and now <= self.end:
            self.latencies.append(now - sent_at)

    def result(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        n = len(lat)

        def q(x: float) -> float:
            return lat[min(n - 1, int(x * n))] * 1e6 if n else 0.0

        return {
            "requests_per_s": n / (self.end - self.start),
            "completed": n,
            "lost": self.lost,
            "latency_us": {
                "p50": q(0.5),
                "p90": q(0.9),
                "p99": q(0.99),
                "p99.9": q(0.999),
                "max": lat[-1] * 1e6 if n else 0.0,
            },
        }


def _requests(pids: list[int]) -> list[bytes]:
    return [Ping(pids[slot % len(pids)]).encode(slot) for slot in range(SLOTS)]


def run_udp(args: argparse.Namespace, pids: list[int]) -> dict[str, Any]:
    requests = _requests(pids)
    socks = []
    for _ in range(args.sockets):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.connect((args.host, args.port))
        sock.setblocking(False)
        socks.append(sock)
    by_fd = {s.fileno(): s for s in socks}
    poller = select.epoll()
    for fd in by_fd:
        poller.register(fd, select.EPOLLIN)
    sent_at = [0.0] * SLOTS
    owner = [-1] * SLOTS  # the socket fd a slot is in flight on
    perf, unpack = time.perf_counter, _CORR.unpack_from
    next_slot = 0
    rec = Recorder(args.warmup, args.seconds)

    def send(sock: socket.socket) -> None:
        nonlocal next_slot
        slot = next_slot
        next_slot = (slot + 1) & (SLOTS - 1)
        sent_at[slot] = perf()
        owner[slot] = sock.fileno()
        # A full buffer or an ICMP error: counted lost by the sweep, like a drop.
        with contextlib.suppress(BlockingIOError, ConnectionRefusedError):
            sock.send(requests[slot])

    for i, sock in enumerate(socks):  # exactly `inflight` in total
        for _ in range(args.inflight // len(socks) + (i < args.inflight % len(socks))):
            send(sock)
    next_sweep = perf() + LOST_AFTER_S
    while (now := perf()) < rec.end:
        for fd, _ in poller.poll(0.1):
            sock = by_fd[fd]
            while True:
                try:
                    data = sock.recv(65536)
                except (BlockingIOError, ConnectionRefusedError):
                    break
                slot = unpack(data, 8)[0]
                if owner[slot] != fd:
                    continue  # an answer to a request already counted lost
                owner[slot] = -1
                rec.done(sent_at[slot], perf())
                send(sock)
        if now >= next_sweep:
            next_sweep = now + LOST_AFTER_S
            for slot in range(SLOTS):
                if owner[slot] >= 0 and now - sent_at[slot] > LOST_AFTER_S:
                    sock = by_fd[owner[slot]]
                    owner[slot] = -1
                    rec.lost += 1
                    send(sock)
    return rec.result()


def run_tcp(args: argparse.Namespace, pids: list[int]) -> dict[str, Any]:
    ports = [int(p) for p in args.shard_ports.split(",")]
    shards = len(ports)
    requests = _requests(pids)
    owner_of = [shard_for(pids[slot % len(pids)], shards) for slot in range(SLOTS)]
    conns = []
    for port in ports:
        conn = socket.create_connection((args.host, port))
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.setblocking(False)
        conns.append(conn)
    poller = select.epoll()
    for conn in conns:
        poller.register(conn.fileno(), select.EPOLLIN)
    index = {c.fileno(): i for i, c in enumerate(conns)}
    perf, unpack_len, unpack_corr = time.perf_counter, _LEN.unpack_from, _CORR.unpack_from
    sent_at = [0.0] * SLOTS
    buffers = [bytearray() for _ in range(shards)]
    next_slot = 0
    rec = Recorder(args.warmup, args.seconds)

    def send(count: int) -> None:
        """The next `count` requests of the one sequence, each to its owner's connection."""
        nonlocal next_slot
        out: list[list[bytes]] = [[] for _ in range(shards)]
        now = perf()
        for _ in range(count):
            slot = next_slot
            next_slot = (slot + 1) & (SLOTS - 1)
            sent_at[slot] = now
            out[owner_of[slot]].append(requests[slot])
        for shard, frames in enumerate(out):
            if frames:
                conns[shard].setblocking(True)
                conns[shard].sendall(b"".join(frames))
                conns[shard].setblocking(False)

    send(args.inflight)
    while perf() < rec.end:
        answered = 0
        for fd, _ in poller.poll(0.1):
            shard = index[fd]
            try:
                data = conns[shard].recv(1 << 20)
            except BlockingIOError:
                continue
            if not data:
                raise ConnectionError(f"shard {shard} closed the connection")
            buf = buffers[shard]
            buf += data
            pos, now = 0, perf()
            while len(buf) - pos >= 4:
                size = 4 + unpack_len(buf, pos)[0]
                if len(buf) - pos < size:
                    break
                rec.done(sent_at[unpack_corr(buf, pos + 8)[0]], now)
                pos += size
                answered += 1
            del buf[:pos]
        if answered:
            send(answered)
    return rec.result()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("transport", choices=("udp", "tcp"))
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, default=0, help="the node port (udp)")
    p.add_argument("--shard-ports", default="", help="comma-separated, shard order (tcp)")
    p.add_argument("--pids", required=True, help="a JSON file with the partition ids")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--sockets", type=int, default=8, help="UDP source sockets")
    p.add_argument("--cpu", type=int, default=None, help="pin the generator to this CPU")
    args = p.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    pids = [int(x) for x in json.loads(Path(args.pids).read_text())]
    runners: dict[str, Callable[[argparse.Namespace, list[int]], dict[str, Any]]] = {
        "udp": run_udp,
        "tcp": run_tcp,
    }
    result = runners[args.transport](args, pids)
    result["cpu_s"] = time.process_time()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

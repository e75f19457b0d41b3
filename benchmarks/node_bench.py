"""End-to-end node benchmark (issue 4): durable produce and consume, next to the log.

    .venv/bin/python benchmarks/node_bench.py [--seconds 4] [--rounds 3] [--cores 2]

Workload: 1 KiB records in batches of 64, spread over 8 partitions of one
topic, `--inflight` batches in flight (closed loop), every produce acknowledged
only after fdatasync (`--flush always`, the default). Three variants per round,
interleaved, each on a fresh data directory on the same file system:

- `log`: the log alone: one process on one core appends the same batches to 8
  `SegmentedLog`s with the node's own log settings and the same number of
  appends in flight (io_uring backend when available). This is the rate the
  node's storage can give; the node's protocol, routing and network cost is
  measured against it.
- `produce`: `laminar-node --cores N` on ephemeral ports, loaded by a separate
  client process (`laminar.client.AsyncClient`, shard-direct) for the same
  time: records/s and latency percentiles (closed loop: each latency is one
  request's round trip, no coordinated-omission correction is needed since no
  request waits for a schedule slot). The topic is made so that its partitions
  split evenly over the shards (`balanced_topic`); `--client raw` swaps the
  client library for a minimal pipelined raw-socket generator, to show how
  much of the two cores the client itself takes.
- `consume`: the same client process then reads everything it produced back
  (one fetch loop per partition, 1 MiB per fetch): records/s.

Prints one JSON object (medians over rounds, plus every round) and a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RECORD_BYTES = 1024
BATCH = 64
PARTITIONS = 8
TOPIC = "bench"
REPO = Path(__file__).resolve().parent.parent


def batch_values(seed: int) -> list[bytes]:
    rnd = os.urandom(RECORD_BYTES)
    return [rnd[i:] + rnd[:i] + bytes([seed & 0xFF]) for i in range(BATCH)]


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {}
    samples = sorted(samples)
    n = len(samples)
    return {
        f"p{q}": samples[min(n - 1, int(float(q) / 100 * n))] * 1000
        for q in ("50", "90", "99", "99.9")
    } | {"max": samples[-1] * 1000}


# -- the log alone -------------------------------------------------------------------


async def _log_only(directory: str, seconds: float, inflight: int) -> dict[str, Any]:
    from laminar.log import SegmentedLog, SyscallBackend
    from laminar.reactor import UringEventLoop
    from laminar.shards.config import NodeConfig

    loop = asyncio.get_running_loop()
    uring = isinstance(loop, UringEventLoop)
    if uring:
        from laminar.reactor.storage import UringBackend

        backend: Any = UringBackend()
    else:
        backend = SyscallBackend()
    config = NodeConfig(cores=1, data_dir=directory).log_config(pipelined=uring)
    logs = [
        await SegmentedLog.open(os.path.join(directory, f"1-{p}"), config, backend=backend)
        for p in range(PARTITIONS)
    ]
    values = batch_values(0)
    deadline = time.perf_counter() + seconds
    done = 0

    async def appender(k: int) -> None:
        nonlocal done
        turn = k
        while time.perf_counter() < deadline:
            await logs[turn % PARTITIONS].append(values)
            done += BATCH
            turn += inflight

    start = time.perf_counter()
    await asyncio.gather(*(appender(k) for k in range(inflight)))
    elapsed = time.perf_counter() - start
    for log in logs:
        await log.close()
    return {"records_per_s": done / elapsed, "backend": "uring" if uring else "syscall"}


def log_only_main(args: argparse.Namespace) -> None:
    from laminar.reactor import run

    os.sched_setaffinity(0, {0})
    result = run(_log_only(args.dir, args.seconds, args.inflight), runtime=args.runtime)
    print(json.dumps(result))


# -- the client process -----------------------------------------------------------------


async def balanced_topic(client: Any) -> Any:
    """Create the bench topic so its partitions split evenly over the shards.

    Placement is a hash: 8 partitions of one topic can land 6/2 on 2 shards
    (topic id 1 does), and then the benchmark measures one busy shard and
    placement luck. Topic ids are assigned by the node, so the topic is
    re-created (new id) until the split is even; the split is reported.
    """
    from laminar.placement import partition_id, shard_for

    shards = (await client.metadata()).shards
    for _ in range(50):
        topic = await client.create_topic(TOPIC, partitions=PARTITIONS)
        owners = [
            shard_for(partition_id(topic.topic_id, p), len(shards)) for p in range(PARTITIONS)
        ]
        counts = [owners.count(i) for i in range(len(shards))]
        if max(counts) - min(counts) <= 1:
            return topic, counts
        await client.delete_topic(TOPIC)
    return topic, counts


async def _client(bootstrap: str, seconds: float, inflight: int) -> dict[str, Any]:
    from laminar.client import AsyncClient

    async with AsyncClient(bootstrap, timeout_s=60) as client:
        _, split = await balanced_topic(client)
        values = batch_values(1)
        latencies: list[float] = []
        counts = [0] * PARTITIONS
        warmup_end = time.perf_counter() + min(0.5, seconds / 5)
        deadline = warmup_end + seconds

        async def producer(k: int) -> None:
            turn = k
            while True:
                start = time.perf_counter()
                if start >= deadline:
                    return
                p = turn % PARTITIONS
                await client.produce(TOPIC, p, values)
                end = time.perf_counter()
                counts[p] += BATCH
                if start >= warmup_end:
                    latencies.append(end - start)
                turn += inflight

        await asyncio.gather(*(producer(k) for k in range(inflight)))
        produce_s = seconds  # latencies cover the timed window; the rate uses it too
        produced_timed = len(latencies) * BATCH

        async def consumer(p: int) -> int:
            index = 0
            got = 0
            while index < counts[p]:
                records = await client.fetch(TOPIC, p, index, max_bytes=1 << 20)
                got += len(records)
                index = records[-1].index + 1
            return got

        start = time.perf_counter()
        fetched = sum(await asyncio.gather(*(consumer(p) for p in range(PARTITIONS))))
        consume_s = time.perf_counter() - start
    return {
        "produce_records_per_s": produced_timed / produce_s,
        "produce_latency_ms": percentiles(latencies),
        "requests": len(latencies),
        "consume_records_per_s": fetched / consume_s,
        "consumed": fetched,
        "partitions_per_shard": split,
    }


class RawShardConnection:
    """The minimal load generator: one pipelined socket to a shard, frames encoded
    once per partition and sent with a fresh correlation id. It measures the
    node with as little client CPU as possible (this box has two cores)."""

    def __init__(self, sock: Any) -> None:
        from laminar.wire import FrameDecoder

        self.sock = sock
        self.decoder = FrameDecoder(64 << 20)
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.next_id = 1
        self.reader: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> RawShardConnection:
        import socket

        loop = asyncio.get_running_loop()
        sock = socket.socket()
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await loop.sock_connect(sock, (host, port))
        conn = cls(sock)
        conn.reader = loop.create_task(conn._read())
        return conn

    async def _read(self) -> None:
        from laminar.wire import NEED_DATA

        loop = asyncio.get_running_loop()
        while data := await loop.sock_recv(self.sock, 1 << 20):
            self.decoder.feed(data)
            while (frame := self.decoder.next_frame()) is not NEED_DATA:
                self.waiting.pop(frame.correlation_id).set_result(frame)

    async def call(self, head: bytes, body: bytes) -> Any:
        loop = asyncio.get_running_loop()
        corr = self.next_id
        self.next_id += 1
        fut = loop.create_future()
        self.waiting[corr] = fut
        await loop.sock_sendall(self.sock, head[:8] + corr.to_bytes(4, "big") + head[12:] + body)
        frame = await fut
        if frame.is_error:
            raise RuntimeError(f"node error: {frame.header}")
        return frame


async def _raw_client(bootstrap: str, seconds: float, inflight: int) -> dict[str, Any]:
    from laminar.client import AsyncClient
    from laminar.placement import partition_id, shard_for
    from laminar.wire import FetchRequest, ProduceRequest
    from laminar.wire.records import decode_fetch_batch

    async with AsyncClient(bootstrap, timeout_s=60) as client:
        topic, split = await balanced_topic(client)
        meta = await client.metadata()
    conns = [await RawShardConnection.open(s.host, s.port) for s in meta.shards]
    pids = [partition_id(topic.topic_id, p) for p in range(PARTITIONS)]
    owner = [conns[shard_for(pid, len(conns))] for pid in pids]
    values = batch_values(1)
    frames = [ProduceRequest.from_values(pid, values).encode(0) for pid in pids]
    latencies: list[float] = []
    counts = [0] * PARTITIONS
    warmup_end = time.perf_counter() + min(0.5, seconds / 5)
    deadline = warmup_end + seconds

    async def producer(k: int) -> None:
        turn = k
        while True:
            start = time.perf_counter()
            if start >= deadline:
                return
            p = turn % PARTITIONS
            frame = frames[p]
            await owner[p].call(frame[:20], frame[20:])
            end = time.perf_counter()
            counts[p] += BATCH
            if start >= warmup_end:
                latencies.append(end - start)
            turn += inflight

    await asyncio.gather(*(producer(k) for k in range(inflight)))

    async def consumer(p: int) -> int:
        index = 0
        got = 0
        while index < counts[p]:
            request = FetchRequest(pids[p], index, max_bytes=1 << 20).encode(0)
            frame = await owner[p].call(request[:20], request[20:])
            records = decode_fetch_batch(frame.payload)
            got += len(records)
            index = records[-1].index + 1
        return got

    start = time.perf_counter()
    fetched = sum(await asyncio.gather(*(consumer(p) for p in range(PARTITIONS))))
    consume_s = time.perf_counter() - start
    for conn in conns:
        if conn.reader is not None:
            conn.reader.cancel()
        conn.sock.close()
    return {
        "produce_records_per_s": len(latencies) * BATCH / seconds,
        "produce_latency_ms": percentiles(latencies),
        "requests": len(latencies),
        "consume_records_per_s": fetched / consume_s,
        "consumed": fetched,
        "partitions_per_shard": split,
    }


def client_main(args: argparse.Namespace) -> None:
    from laminar.reactor import run

    body = _raw_client if args.client == "raw" else _client
    print(json.dumps(run(body(args.bootstrap, args.seconds, args.inflight), runtime="auto")))


# -- orchestration -----------------------------------------------------------------------


def run_log_only(base: Path, args: argparse.Namespace) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix="log-", dir=base)
    try:
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--role",
                "log",
                "--dir",
                directory,
                "--seconds",
                str(args.seconds),
                "--inflight",
                str(args.inflight),
                "--runtime",
                args.runtime,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        result: dict[str, Any] = json.loads(out.stdout)
        return result
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_node(base: Path, args: argparse.Namespace) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="node-", dir=base))
    log_path = directory / "node.log"
    with open(log_path, "wb") as log:
        node = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "laminar.cli.node",
                "--cores",
                str(args.cores),
                "--port",
                "0",
                "--data-dir",
                str(directory / "data"),
                "--runtime",
                args.runtime,
                "--flush",
                args.flush,
                "--log-level",
                "WARNING",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    try:
        info_path = directory / "data" / "run" / "node.json"
        deadline = time.monotonic() + 60
        while not info_path.exists():
            if node.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("node did not start:\n" + log_path.read_text())
            time.sleep(0.05)
        info = json.loads(info_path.read_text())
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--role",
                "client",
                "--bootstrap",
                f"{info['host']}:{info['port']}",
                "--seconds",
                str(args.seconds),
                "--inflight",
                str(args.inflight),
                "--client",
                args.client,
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        if out.returncode:
            raise RuntimeError(f"client failed:\n{out.stderr}")
        result: dict[str, Any] = json.loads(out.stdout)
        result["runtime"] = info["runtime"]
        return result
    finally:
        node.terminate()
        node.wait(60)
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--role", choices=("bench", "log", "client"), default="bench")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--inflight", type=int, default=16, help="batches in flight")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument(
        "--client",
        choices=("laminar", "raw"),
        default="laminar",
        help="load from laminar.client.AsyncClient, or from a minimal raw-socket generator",
    )
    p.add_argument("--runtime", default="auto")
    p.add_argument("--flush", default="always")
    p.add_argument("--dir", default="")
    p.add_argument("--bootstrap", default="")
    p.add_argument("--base-dir", default=None, help="where data dirs go (default: a temp dir)")
    args = p.parse_args()
    if args.role == "log":
        log_only_main(args)
        return
    if args.role == "client":
        client_main(args)
        return

    base = Path(tempfile.mkdtemp(prefix="node-bench-", dir=args.base_dir or REPO))
    rounds: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            log = run_log_only(base, args)
            node = run_node(base, args)
            rounds.append({"log": log, "node": node})
            print(
                f"round {r + 1}: log {log['records_per_s']:,.0f} rec/s; node produce "
                f"{node['produce_records_per_s']:,.0f} rec/s "
                f"(p50 {node['produce_latency_ms']['p50']:.2f} ms, "
                f"p99 {node['produce_latency_ms']['p99']:.2f} ms); consume "
                f"{node['consume_records_per_s']:,.0f} rec/s",
                file=sys.stderr,
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)

    def med(values: list[float]) -> float:
        return statistics.median(values)

    log_rate = med([r["log"]["records_per_s"] for r in rounds])
    produce_rate = med([r["node"]["produce_records_per_s"] for r in rounds])
    consume_rate = med([r["node"]["consume_records_per_s"] for r in rounds])
    latency = {
        key: med([r["node"]["produce_latency_ms"][key] for r in rounds])
        for key in rounds[0]["node"]["produce_latency_ms"]
    }
    summary = {
        "workload": {
            "record_bytes": RECORD_BYTES,
            "batch": BATCH,
            "partitions": PARTITIONS,
            "inflight": args.inflight,
            "cores": args.cores,
            "flush": args.flush,
            "seconds": args.seconds,
            "rounds": args.rounds,
        },
        "log_only_records_per_s": log_rate,
        "node_produce_records_per_s": produce_rate,
        "node_vs_log": produce_rate / log_rate,
        "produce_latency_ms": latency,
        "node_consume_records_per_s": consume_rate,
        "runtime": rounds[0]["node"]["runtime"],
        "log_backend": rounds[0]["log"]["backend"],
        "rounds": rounds,
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

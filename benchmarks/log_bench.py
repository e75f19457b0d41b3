"""Durable append and read throughput of the segmented log, next to a bare loop.

    .venv/bin/python benchmarks/log_bench.py [--seconds 2] [--rounds 3] [--appenders 8]

Prints one JSON object. Every variant runs once per round, interleaved, each on
a fresh directory on the same file system, and the figures are medians over
rounds, so a noisy neighbour hurts every variant alike. The reference is the
loop a careful programmer writes by hand: `os.writev` of 64 records, then
`os.fdatasync`, sequentially.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from laminar.log import LogConfig, SegmentedLog, StorageBackend
from laminar.reactor import UringEventLoop, uring_unavailable_reason
from laminar.reactor.storage import UringBackend

RECORD_BYTES = 1024
BATCH = 64
MiB = 1 << 20


def batch_values() -> list[bytes]:
    return [os.urandom(RECORD_BYTES) for _ in range(BATCH)]


def bare_writev_fdatasync(directory: str, seconds: float) -> float:
    """Records/s of a sequential writev(64 records) + fdatasync loop."""
    values = batch_values()
    fd = os.open(os.path.join(directory, "bare"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        records = 0
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            os.writev(fd, values)
            os.fdatasync(fd)
            records += BATCH
        return records / (time.perf_counter() - start)
    finally:
        os.close(fd)


async def log_append(
    directory: str,
    seconds: float,
    appenders: int,
    config: LogConfig,
    backend: StorageBackend | None = None,
) -> float:
    """Records/s of `appenders` tasks appending 64-record batches concurrently."""
    values = batch_values()
    log = await SegmentedLog.open(directory, config, backend=backend)
    records = 0
    deadline = time.perf_counter() + seconds

    async def appender() -> None:
        nonlocal records
        while time.perf_counter() < deadline:
            await log.append(values)
            records += BATCH

    start = time.perf_counter()
    await asyncio.gather(*(appender() for _ in range(appenders)))
    elapsed = time.perf_counter() - start
    await log.close()
    return records / elapsed


async def log_read_range(directory: str, records: int) -> float:
    """Records/s of reading a log front to back with read_range (page cache warm)."""
    log = await SegmentedLog.open(directory, LogConfig(flush="never"))
    values = batch_values()
    for _ in range(records // BATCH):
        await log.append(values)
    index = log.lowest_index
    await log.read_range(index, max_bytes=MiB)  # warm
    start = time.perf_counter()
    read = 0
    while index < log.highest_index:
        batch = await log.read_range(index, max_bytes=MiB)
        read += len(batch)
        index = batch[-1].index + 1
    elapsed = time.perf_counter() - start
    await log.close()
    return read / elapsed


def in_fresh_dir(root: str, run: Callable[[str], float]) -> float:
    directory = tempfile.mkdtemp(dir=root)
    try:
        return run(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per variant per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--appenders", type=int, default=8)
    parser.add_argument("--read-records", type=int, default=200_000)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="laminar-log-bench-", dir=args.dir)

    def appends(flush: str, in_flight: int = 1) -> Callable[[str], float]:
        config = LogConfig(flush=flush, max_flushes_in_flight=in_flight)  # type: ignore[arg-type]
        return lambda d: asyncio.run(log_append(d, args.seconds, args.appenders, config))

    def uring_appends(in_flight: int) -> Callable[[str], float]:
        config = LogConfig(flush="always", max_flushes_in_flight=in_flight)

        def run(directory: str) -> float:
            with asyncio.Runner(loop_factory=UringEventLoop) as runner:
                return runner.run(
                    log_append(directory, args.seconds, args.appenders, config, UringBackend())
                )

        return run

    variants: dict[str, Callable[[str], float]] = {
        "bare_writev_fdatasync": lambda d: bare_writev_fdatasync(d, args.seconds),
        "log_append_always": appends("always"),
        "log_append_always_4_in_flight": appends("always", 4),
        "log_append_never": appends("never"),
        "log_read_range": lambda d: asyncio.run(log_read_range(d, args.read_records)),
    }
    if uring_unavailable_reason() is None:
        variants["uring_log_append_always_4_in_flight"] = uring_appends(4)
        variants["uring_log_append_always_8_in_flight"] = uring_appends(8)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for round_no in range(args.rounds):
            for name, run in variants.items():
                samples[name].append(in_fresh_dir(root, run))
                rate = samples[name][-1]
                print(f"round {round_no + 1}: {name} {rate:,.0f} rec/s", file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    medians = {name: statistics.median(values) for name, values in samples.items()}
    bare = medians["bare_writev_fdatasync"]
    result: dict[str, Any] = {
        "benchmark": "log",
        "command": "python benchmarks/log_bench.py " + " ".join(argv or sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
        "record_bytes": RECORD_BYTES,
        "batch_records": BATCH,
        "appenders": args.appenders,
        "rounds": args.rounds,
        "seconds_per_variant": args.seconds,
        "results": {
            name: {
                "records_per_s_median": round(value),
                "mib_per_s_median": round(value * RECORD_BYTES / MiB, 1),
                "samples": [round(v) for v in samples[name]],
                "ratio_to_bare": round(value / bare, 2),
            }
            for name, value in medians.items()
        },
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

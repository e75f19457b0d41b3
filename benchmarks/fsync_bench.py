"""What a flush's fsyncs and preallocation cost: measured before anything is built.

    .venv/bin/python benchmarks/fsync_bench.py flush [--dir DIR] [--seconds 4] [--rounds 3]
    .venv/bin/python benchmarks/fsync_bench.py prealloc [--dir DIR] [--seconds 4] [--rounds 3]
    .venv/bin/python benchmarks/fsync_bench.py rollover [--dir DIR] [--seconds 4] [--rounds 3]
    .venv/bin/python benchmarks/fsync_bench.py idle [--dir DIR] [--partitions N] [--growing-only]

`flush` compares the log as built (each flush writes and fdatasyncs the store
and the index: two fsyncs, ring operations run by io-wq workers, submitted as
one `write_durably`) with the same two files written by their own
`writev(..., sync=True)` each (`per-file`, the shape before), with a
prototype of the single-fsync format (the index write left unsynced: the one
fdatasync a framed store would need) and with the loop thread making the
writes and syncs itself (`inline-syncs`, as Redis's appendfsync always does).
`prealloc` compares segment preallocation by fallocate (unwritten extents, the
default), by writing zeros (what a background zero-filler would leave), and
none. Workloads: closed loop (1, 16 or 64 appenders of one 1 KiB record:
flushes/s, records/s) and open loop at 2,000 and 20,000 records/s (one record per append,
latency from each record's intended start, so stalls are not hidden: p50, p99,
p99.9). Variants run interleaved in every round, in rotated order, each on a
fresh directory of the same file system; figures are medians over rounds.
Where the file system has a journal, jbd2 transactions per flush come from
/proc/fs/jbd2/<dev>/info. The load generator runs in the benchmark's process;
its CPU share is reported.

`rollover` compares one 64 MiB segment with a rollover every 1 MiB (every
~1,000 records) to show what rollover costs the produce tail.

`idle` opens N partitions with one 100-byte record each and reports the disk
space they hold while open, with the preallocation step growing with the
write rate (as built) and with the full step from the first record (before).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from laminar.log import LogConfig, SegmentedLog, Storage, StorageBackend, SyscallBackend
from laminar.log import commit as commit_module
from laminar.log.storage import Buffer, WrappedBackend
from laminar.reactor import UringEventLoop, uring_unavailable_reason
from laminar.reactor.storage import UringBackend

RECORD = os.urandom(1024)
MiB = 1 << 20


# -- prototypes (wrappers over the real backend) -------------------------------------


class _Wrapped:
    """A `Storage` passing everything through; subclasses change one thing."""

    def __init__(self, inner: Storage, path: str) -> None:
        self.inner = inner
        self.path = path

    @property
    def size(self) -> int:
        return self.inner.size

    async def read_at(self, length: int, offset: int) -> bytes:
        return await self.inner.read_at(length, offset)

    def read_at_nowait(self, length: int, offset: int) -> Buffer | None:
        return self.inner.read_at_nowait(length, offset)

    async def writev(self, buffers: Sequence[Buffer], offset: int, *, sync: bool) -> None:
        await self.inner.writev(buffers, offset, sync=sync)

    async def sync(self) -> None:
        await self.inner.sync()

    async def truncate(self, size: int) -> None:
        await self.inner.truncate(size)

    async def allocate(self, size: int) -> None:
        await self.inner.allocate(size)

    async def drop_cache(self) -> None:
        await self.inner.drop_cache()

    async def close(self) -> None:
        await self.inner.close()


class UnsyncedIndex(_Wrapped):
    """The single-fsync prototype: index writes are never synced."""

    async def writev(self, buffers: Sequence[Buffer], offset: int, *, sync: bool) -> None:
        await self.inner.writev(buffers, offset, sync=sync and not self.path.endswith(".index"))


class InlineSyncs(_Wrapped):
    """The Redis way: the loop thread writes and fdatasyncs itself (blocking
    syscalls, store then index), with no ring operation, worker or wake-up."""

    def __init__(self, inner: Storage, path: str) -> None:
        super().__init__(inner, path)
        self._fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        self._end = 0

    @property
    def size(self) -> int:
        return max(self.inner.size, self._end)

    async def writev(self, buffers: Sequence[Buffer], offset: int, *, sync: bool) -> None:
        written = os.pwritev(self._fd, buffers, offset)
        if sync:
            os.fdatasync(self._fd)
        self._end = max(self._end, offset + written)

    async def close(self) -> None:
        os.close(self._fd)
        await self.inner.close()


class ZeroFilled(_Wrapped):
    """Preallocation by writing zeros (written extents) instead of fallocate."""

    async def allocate(self, size: int) -> None:
        have = self.inner.size
        if size > have:
            zeros = bytes(min(size - have, 4 * MiB))
            at = have
            while at < size:
                chunk = zeros[: size - at]
                await self.inner.writev([chunk], at, sync=False)
                at += len(chunk)
            await self.inner.sync()


class Wrapping(WrappedBackend):
    """A `StorageBackend` handing out `kind`-wrapped files. Its durable writes
    are each file's own `writev(..., sync=True)` (`write_each_durably`)."""

    def __init__(self, inner: StorageBackend, kind: type[_Wrapped]) -> None:
        super().__init__(inner)
        self.kind = kind

    async def open(self, path: str, *, create: bool) -> Storage:
        return self.kind(await self._inner.open(path, create=create), path)


# -- jbd2 ----------------------------------------------------------------------------


def jbd2_info(directory: str) -> str | None:
    """The /proc/fs/jbd2/<dev>/info of the file system holding `directory`."""
    dev = os.stat(directory).st_dev
    try:
        with open(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/uevent") as f:
            name = next(line.split("=", 1)[1].strip() for line in f if line.startswith("DEVNAME"))
    except (OSError, StopIteration):
        return None
    path = f"/proc/fs/jbd2/{name}-8/info"
    return path if os.path.exists(path) else None


def jbd2_transactions(path: str | None) -> int | None:
    if path is None:
        return None
    with open(path) as f:
        return int(f.readline().split()[0])  # "N transactions (M requested), ..."


# -- workloads -----------------------------------------------------------------------


async def closed_loop(log: SegmentedLog, seconds: float, appenders: int = 16) -> dict[str, float]:
    records = 0
    deadline = time.perf_counter() + seconds
    flushes = log.flush_count

    async def appender() -> None:
        nonlocal records
        while time.perf_counter() < deadline:
            await log.append([RECORD])
            records += 1

    start = time.perf_counter()
    await asyncio.gather(*(appender() for _ in range(appenders)))
    elapsed = time.perf_counter() - start
    return {"records_s": records / elapsed, "flushes_s": (log.flush_count - flushes) / elapsed}


async def open_loop(log: SegmentedLog, seconds: float, rate: int) -> dict[str, float]:
    """One record per append, started at fixed intended times; latencies from them."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    tasks: set[asyncio.Task[None]] = set()

    async def produce(intended: float) -> None:
        await log.append([RECORD])
        latencies.append(time.perf_counter() - intended)

    start = time.perf_counter()
    sent = 0
    total = int(seconds * rate)
    while sent < total:
        now = time.perf_counter()
        due = min(total, int((now - start) * rate) + 1)
        while sent < due:
            task = loop.create_task(produce(start + sent / rate))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            sent += 1
        await asyncio.sleep(0.0005)
    await asyncio.gather(*tasks)
    latencies.sort()

    def q(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return {"p50_ms": q(0.5), "p99_ms": q(0.99), "p999_ms": q(0.999)}


async def one_run(
    directory: str, variant: str, workload: str, seconds: float, runtime: str
) -> dict[str, Any]:
    base: StorageBackend = UringBackend() if runtime == "uring" else SyscallBackend()
    config = LogConfig(max_flushes_in_flight=4 if runtime == "uring" else 1)
    backend = base
    if variant == "per-file":
        backend = Wrapping(base, _Wrapped)
    elif variant == "index-unsynced":
        backend = Wrapping(base, UnsyncedIndex)
    elif variant == "inline-syncs":
        backend = Wrapping(base, InlineSyncs)
    elif variant == "zero-filled":
        backend = Wrapping(base, ZeroFilled)
    elif variant == "no-prealloc":
        config = LogConfig(max_flushes_in_flight=config.max_flushes_in_flight, preallocate_bytes=0)
    elif variant == "rollover-every-1MiB":
        config = LogConfig(max_flushes_in_flight=config.max_flushes_in_flight, segment_bytes=MiB)
    log = await SegmentedLog.open(directory, config, backend=backend)
    journal = jbd2_info(directory)
    before = jbd2_transactions(journal)
    flushes = log.flush_count
    cpu = time.process_time()
    wall = time.perf_counter()
    if workload.startswith("closed"):
        figures = await closed_loop(log, seconds, int(workload.partition("-")[2] or 16))
    else:
        figures = await open_loop(log, seconds, int(workload.removeprefix("open-")))
    figures["process_cpu_pct"] = 100 * (time.process_time() - cpu) / (time.perf_counter() - wall)
    after = jbd2_transactions(journal)
    flushed = log.flush_count - flushes
    if before is not None and after is not None and flushed:
        figures["jbd2_per_flush"] = (after - before) / flushed
    await log.close()
    return figures


def run_async(runtime: str, coro: Any) -> Any:
    factory = UringEventLoop if runtime == "uring" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def compare(args: argparse.Namespace, variants: list[str], workloads: list[str]) -> dict[str, Any]:
    runtime = args.runtime
    results: dict[str, dict[str, list[dict[str, Any]]]] = {
        w: {v: [] for v in variants} for w in workloads
    }
    for round_no in range(args.rounds):
        for workload in workloads:
            order = variants[round_no % len(variants) :] + variants[: round_no % len(variants)]
            for variant in order:
                directory = tempfile.mkdtemp(prefix="fsync-bench-", dir=args.dir)
                try:
                    figures = run_async(
                        runtime, one_run(directory, variant, workload, args.seconds, runtime)
                    )
                finally:
                    shutil.rmtree(directory, ignore_errors=True)
                results[workload][variant].append(figures)
                print(json.dumps({"round": round_no, workload: {variant: figures}}), flush=True)
    summary: dict[str, Any] = {}
    for workload, by_variant in results.items():
        summary[workload] = {
            variant: {
                key: round(statistics.median(r[key] for r in runs), 3)
                for key in runs[0]
                if all(key in r for r in runs)
            }
            for variant, runs in by_variant.items()
        }
        first = variants[0]
        for variant in variants[1:]:
            ratios = {}
            for key in results[workload][first][0]:
                pairs = [
                    b[key] / a[key]
                    for a, b in zip(results[workload][first], by_variant[variant], strict=True)
                    if key in a and key in b and a[key]
                ]
                if pairs:
                    ratios[key] = round(statistics.median(pairs), 3)
            summary[workload][f"{variant} / {first}"] = ratios
    return summary


def idle(args: argparse.Namespace) -> dict[str, Any]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * args.partitions + 100
    if soft < need:  # root may raise the hard limit too
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, max(need, hard)))
        except ValueError:
            raise SystemExit(
                f"{args.partitions} open partitions need {need} file descriptors; the hard "
                f"limit is {hard} and cannot be raised here: use --partitions {(hard - 100) // 2}"
            ) from None

    def allocated(directory: str) -> int:
        """What `du` reports: allocated blocks, preallocation included."""
        total = 0
        for root, _, names in os.walk(directory):
            for name in names:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
        return total

    async def measure(growing: bool) -> dict[str, float]:
        directory = tempfile.mkdtemp(prefix="idle-bench-", dir=args.dir)
        saved = commit_module.MIN_PREALLOCATE_BYTES
        if not growing:
            commit_module.MIN_PREALLOCATE_BYTES = LogConfig().preallocate_bytes
        try:
            logs = []
            for n in range(args.partitions):
                log = await SegmentedLog.open(os.path.join(directory, f"1-{n}"))
                await log.append([b"x" * 100])
                logs.append(log)
            held = allocated(directory)
            for log in logs:
                await log.close()
            after_close = allocated(directory)
        finally:
            commit_module.MIN_PREALLOCATE_BYTES = saved
            shutil.rmtree(directory, ignore_errors=True)
        return {
            "allocated_while_open_mib": round(held / MiB, 1),
            "per_partition_kib": round(held / args.partitions / 1024, 1),
            "allocated_after_close_mib": round(after_close / MiB, 1),
        }

    figures: dict[str, Any] = {
        "partitions": args.partitions,
        "growing_step (as built)": asyncio.run(measure(True)),
    }
    if not args.growing_only:  # the full step reserves ~4.3 MiB a partition
        figures["full_step_from_the_start (before)"] = asyncio.run(measure(False))
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["flush", "prealloc", "rollover", "idle"])
    parser.add_argument("--dir", default=None, help="where to put the logs (default: $TMPDIR)")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument(
        "--growing-only", action="store_true", help="idle: skip the full-step variant"
    )
    default_runtime = "uring" if uring_unavailable_reason() is None else "asyncio"
    parser.add_argument("--runtime", choices=["uring", "asyncio"], default=default_runtime)
    args = parser.parse_args(argv)
    info: dict[str, Any] = {
        "host": platform.node(),
        "load_avg_before": os.getloadavg(),
        "dir": args.dir or tempfile.gettempdir(),
        "runtime": args.runtime,
        "journal": jbd2_info(args.dir or tempfile.gettempdir()),
    }
    if args.what == "idle":
        info["idle"] = idle(args)
    elif args.what == "flush":
        info["flush"] = compare(
            args,
            ["two-fsyncs", "per-file", "index-unsynced", "inline-syncs"],
            ["closed-1", "closed-16", "closed-64", "open-2000", "open-20000"],
        )
    elif args.what == "prealloc":
        info["prealloc"] = compare(
            args, ["fallocate", "zero-filled", "no-prealloc"], ["open-2000", "open-20000"]
        )
    else:
        info["rollover"] = compare(
            args, ["one-segment", "rollover-every-1MiB"], ["closed", "open-2000", "open-20000"]
        )
    info["load_avg_after"] = os.getloadavg()
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()

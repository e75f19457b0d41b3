"""A shard's counters and latency summaries, and the storage timing wrapper.

Each shard counts for itself (no shared memory, no locks) and hands a plain
snapshot (`ShardMetrics.snapshot()`, msgpack-able) to the supervisor over the
control channel when /metrics is scraped; `laminar.node.prometheus` renders
the snapshots. Latencies go into `LatencySummary`, a fixed log-scale histogram
(four buckets per power of two, 1 us to ~1 h): constant memory, O(1) record,
quantiles within ~10% of the true value, which is what an operator needs.

`TimedBackend` wraps the log's storage backend and times every durable write
(write linked to fdatasync; a flush's writes of its store and index together,
one sample) and every sync: that is the node's fsync latency, measured where
it happens rather than guessed from request latency.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

from laminar.log.storage import (
    Buffer,
    DurableWrite,
    Storage,
    StorageBackend,
    WrappedBackend,
    write_each_durably,
)

_BUCKETS_PER_OCTAVE: Final = 4
_MIN_S: Final = 1e-6
_BUCKETS: Final = 4 * 32  # 1 us * 2**32 ~ 71 minutes
QUANTILES: Final = (0.5, 0.9, 0.99, 0.999)

_perf = time.perf_counter


class LatencySummary:
    """Count, sum and approximate quantiles of durations in seconds."""

    __slots__ = ("buckets", "count", "max_s", "sum_s")

    def __init__(self) -> None:
        self.buckets = [0] * (_BUCKETS + 1)
        self.count = 0
        self.sum_s = 0.0
        self.max_s = 0.0

    def record(self, seconds: float) -> None:
        self.count += 1
        self.sum_s += seconds
        if seconds > self.max_s:
            self.max_s = seconds
        if seconds <= _MIN_S:
            self.buckets[0] += 1
            return
        slot = int(math.log2(seconds / _MIN_S) * _BUCKETS_PER_OCTAVE) + 1
        self.buckets[min(slot, _BUCKETS)] += 1

    def quantile(self, q: float) -> float:
        """The upper bound of the bucket holding the q-th sample (0 when empty)."""
        if not self.count:
            return 0.0
        rank = q * self.count
        seen = 0
        for slot, n in enumerate(self.buckets):
            seen += n
            if seen >= rank and n:
                if slot == _BUCKETS:  # the overflow bucket has no upper bound
                    return self.max_s
                return min(_MIN_S * 2 ** (slot / _BUCKETS_PER_OCTAVE), self.max_s)
        return self.max_s

    def snapshot(self) -> dict[str, float]:
        out = {"count": float(self.count), "sum": self.sum_s, "max": self.max_s}
        for q in QUANTILES:
            out[str(q)] = self.quantile(q)
        return out


class ShardMetrics:
    """Everything one shard counts. Plain attributes: incremented on the hot path."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.auth_failures: Counter[str] = Counter()
        """Refused logins, by `AuthFailure` value (both doors)."""
        self.latency: dict[str, LatencySummary] = {}
        self.bytes_in = 0
        self.bytes_out = 0
        self.records_in = 0
        self.records_out = 0
        self.forwarded_out = 0
        self.forwarded_in = 0
        self.forward_failures = 0
        self.connections_total = 0
        self.connections_open = 0
        self.connections_closed_idle = 0
        self.connections_closed_slow = 0
        self.connections_shed = 0
        self.connections_refused = 0
        self.connections_refused_address = 0
        self.channel_refused = 0
        self.handshakes_refused = 0
        self.tls_refused = 0
        self.retention_segments_deleted = 0
        self.retention_bytes_deleted = 0
        self.protocol_errors = 0
        self.datagrams_in = 0
        self.datagrams_dropped = 0
        self.fsync = LatencySummary()
        self.flushes_closed_logs = 0

    def request_done(self, op: str, seconds: float) -> None:
        self.requests[op] += 1
        summary = self.latency.get(op)
        if summary is None:
            summary = self.latency[op] = LatencySummary()
        summary.record(seconds)

    def error(self, code: str) -> None:
        self.errors[code] += 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": dict(self.requests),
            "errors": dict(self.errors),
            "auth_failures": dict(self.auth_failures),
            "latency": {op: s.snapshot() for op, s in self.latency.items()},
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "records_in": self.records_in,
            "records_out": self.records_out,
            "forwarded_out": self.forwarded_out,
            "forwarded_in": self.forwarded_in,
            "forward_failures": self.forward_failures,
            "connections_total": self.connections_total,
            "connections_open": self.connections_open,
            "connections_closed_idle": self.connections_closed_idle,
            "connections_closed_slow": self.connections_closed_slow,
            "connections_shed": self.connections_shed,
            "connections_refused": self.connections_refused,
            "connections_refused_address": self.connections_refused_address,
            "channel_refused": self.channel_refused,
            "handshakes_refused": self.handshakes_refused,
            "tls_refused": self.tls_refused,
            "retention_segments_deleted": self.retention_segments_deleted,
            "retention_bytes_deleted": self.retention_bytes_deleted,
            "protocol_errors": self.protocol_errors,
            "datagrams_in": self.datagrams_in,
            "datagrams_dropped": self.datagrams_dropped,
            "fsync": self.fsync.snapshot(),
        }


class TimedStorage:
    """A `Storage` whose durable writes and syncs are timed into a summary."""

    __slots__ = ("_inner", "_summary")

    def __init__(self, inner: Storage, summary: LatencySummary) -> None:
        self._inner = inner
        self._summary = summary

    @property
    def size(self) -> int:
        return self._inner.size

    async def read_at(self, length: int, offset: int) -> bytes:
        return await self._inner.read_at(length, offset)

    def read_at_nowait(self, length: int, offset: int) -> Buffer | None:
        return self._inner.read_at_nowait(length, offset)

    async def writev(self, buffers: Sequence[Buffer], offset: int, *, sync: bool) -> None:
        if not sync:
            await self._inner.writev(buffers, offset, sync=False)
            return
        start = _perf()
        await self._inner.writev(buffers, offset, sync=True)
        self._summary.record(_perf() - start)

    async def sync(self) -> None:
        start = _perf()
        await self._inner.sync()
        self._summary.record(_perf() - start)

    async def truncate(self, size: int) -> None:
        await self._inner.truncate(size)

    async def allocate(self, size: int) -> None:
        await self._inner.allocate(size)

    async def drop_cache(self) -> None:
        await self._inner.drop_cache()

    async def close(self) -> None:
        await self._inner.close()


class TimedBackend(WrappedBackend):
    """A `StorageBackend` that hands out `TimedStorage` files."""

    def __init__(self, inner: StorageBackend, summary: LatencySummary) -> None:
        super().__init__(inner)
        self._summary = summary

    async def open(self, path: str, *, create: bool) -> Storage:
        return TimedStorage(await self._inner.open(path, create=create), self._summary)

    async def write_durably(self, writes: Sequence[DurableWrite]) -> None:
        """The inner backend's durable write over the inner files, as one sample."""
        inner = [
            DurableWrite(w.file._inner, w.buffers, w.offset)
            for w in writes
            if isinstance(w.file, TimedStorage)
        ]
        if len(inner) < len(writes):
            await write_each_durably(writes)
            return
        start = _perf()
        await self._inner.write_durably(inner)
        self._summary.record(_perf() - start)

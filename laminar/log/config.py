"""Settings of one segmented log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .index import MAX_FLUSHES_IN_FLIGHT

FlushPolicy = Literal["always", "interval", "never"]
FLUSH_POLICIES: tuple[FlushPolicy, ...] = ("always", "interval", "never")

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class LogConfig:
    """How a log stores, flushes and retains its records.

    flush:
        "always" (default): `append` returns once its records are on disk
        (fdatasync). "interval": `append` returns once written to the page
        cache; a background task syncs every `flush_interval_ms`. "never": the
        log syncs only when a segment is sealed or the log is closed.
    segment_bytes / overflow_bytes:
        a segment rolls over once its store reaches `segment_bytes`; it may run
        past that by at most `overflow_bytes` (default half a segment), so a
        batch larger than `segment_bytes + overflow_bytes` is refused
        (`AppendTooLarge`): the append-threshold guard.
    preallocate_bytes:
        the store grows in steps of this many bytes reserved with fallocate, so
        that syncs overwrite allocated blocks instead of extending the file (0:
        off). The index grows in steps of 1/16 of it.
    max_flushes_in_flight:
        how many group-commit flushes may be writing or syncing at once; they are
        acknowledged in order. Backends that pipeline (io_uring) gain from 4-8.
    retention_bytes / retention_ms:
        `apply_retention` removes whole oldest segments while the rest still hold
        `retention_bytes`, and segments whose newest record is older than
        `retention_ms`. The write segment is never removed. None: keep forever.
    """

    segment_bytes: int = 64 * MiB
    overflow_bytes: int | None = None
    flush: FlushPolicy = "always"
    flush_interval_ms: int = 100
    preallocate_bytes: int = 4 * MiB
    max_flushes_in_flight: int = 1
    retention_bytes: int | None = None
    retention_ms: int | None = None

    def __post_init__(self) -> None:
        if self.segment_bytes < 1:
            raise ValueError(f"segment_bytes must be positive, got {self.segment_bytes}")
        if self.overflow_bytes is not None and self.overflow_bytes < 0:
            raise ValueError(f"overflow_bytes must not be negative, got {self.overflow_bytes}")
        if self.flush not in FLUSH_POLICIES:
            raise ValueError(
                f"flush must be one of {', '.join(FLUSH_POLICIES)}, got {self.flush!r}"
            )
        if self.flush_interval_ms < 1:
            raise ValueError(f"flush_interval_ms must be positive, got {self.flush_interval_ms}")
        if self.preallocate_bytes < 0:
            raise ValueError(
                f"preallocate_bytes must not be negative, got {self.preallocate_bytes}"
            )
        if not 1 <= self.max_flushes_in_flight <= MAX_FLUSHES_IN_FLIGHT:
            raise ValueError(
                f"max_flushes_in_flight must be between 1 and {MAX_FLUSHES_IN_FLIGHT}, "
                f"got {self.max_flushes_in_flight}"
            )
        for name in ("retention_bytes", "retention_ms"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")

    @property
    def append_threshold_bytes(self) -> int:
        """The most store bytes one segment may hold."""
        overflow = self.segment_bytes // 2 if self.overflow_bytes is None else self.overflow_bytes
        return self.segment_bytes + overflow

"""The byte layout of staging files, and the scan that recovers them. No I/O.

A staging file is a sequence of frames, each written once and never changed::

    u32 body_len | u64 xxh3_64(body) | body          body = u8 kind | fields

Files are only ever appended to, one durable write at a time, so a crash can
damage only the tail: `scan` returns every frame up to the first one that does
not check out, and where the valid part ends (the shell truncates the rest,
which no one was told was durable).

Two kinds of file (`laminar.writes` says why):

- an *attempt file* per (partition, write id, task, attempt): an ATTEMPT
  header (with its owner: the principal that staged it), then one BATCH
  frame per staged batch (its sequence, its record count, and the records
  as a produce batch payload, stored as received);
- a *commit file* per (partition, commit id): a COMMIT header, then CLAIM
  frames (the parts a commit claims here; the last one counts), an INTENT
  (where a publish started and how its batches are cut into appends) and
  PUBLISHED (where its records landed).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import msgpack
import xxhash

from laminar.log.storage import Buffer
from laminar.wire.records import decode_produce_batch, encode_produce_batch
from laminar.wire.writes import StagedPart

_PREFIX: Final = struct.Struct(">IQ")
PREFIX_BYTES: Final = _PREFIX.size
FRAME_BYTES_MAX: Final = 1 << 30
"""A sanity bound on one frame (a batch is bounded by the node's frame limit)."""

_ATTEMPT: Final = struct.Struct(">QQIQI")  # pid, write_id, task, attempt, timeout_ms
_BATCH: Final = struct.Struct(">II")  # sequence, records
_COMMIT: Final = struct.Struct(">QQ")  # pid, commit_id
_PUBLISHED: Final = struct.Struct(">QQ")  # first_index, count


class Kind(enum.IntEnum):
    ATTEMPT = 1
    BATCH = 2
    COMMIT = 3
    CLAIM = 4
    INTENT = 5
    PUBLISHED = 6


class AttemptKey(NamedTuple):
    """Whose staged data: a task attempt of a write."""

    write_id: int
    task: int
    attempt: int

    @classmethod
    def of(cls, part: StagedPart) -> AttemptKey:
        return cls(part.write_id, part.task, part.attempt)


class StagingFormatError(ValueError):
    """A frame that passed its checksum does not hold what its kind says."""


@dataclass(frozen=True, slots=True)
class FileFrame:
    """One valid frame of a file: its kind, where it starts, its whole length."""

    kind: Kind
    offset: int
    length: int
    body: bytes


def frame(kind: Kind, *fields: Buffer) -> list[Buffer]:
    """The buffers of one frame (the fields are not copied)."""
    size = 1 + sum(len(b) for b in fields)
    digest = xxhash.xxh3_64()
    head = bytes((kind,))
    digest.update(head)
    for b in fields:
        digest.update(b)
    return [_PREFIX.pack(size, digest.intdigest()), head, *fields]


def frame_bytes(buffers: Sequence[Buffer]) -> int:
    return sum(len(b) for b in buffers)


def scan(data: bytes) -> tuple[list[FileFrame], int]:
    """Every valid frame of a file, and the offset where the valid part ends."""
    frames: list[FileFrame] = []
    pos = 0
    end = len(data)
    view = memoryview(data)
    while pos + PREFIX_BYTES <= end:
        size, digest = _PREFIX.unpack_from(data, pos)
        start = pos + PREFIX_BYTES
        stop = start + size
        if size < 1 or size > FRAME_BYTES_MAX or stop > end:
            break
        if xxhash.xxh3_64_intdigest(view[start:stop]) != digest:
            break
        try:
            kind = Kind(data[start])
        except ValueError:
            break
        frames.append(FileFrame(kind, pos, stop - pos, data[start + 1 : stop]))
        pos = stop
    return frames, pos


# --- attempt files --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttemptHeader:
    partition_id: int
    key: AttemptKey
    timeout_ms: int
    principal: str | None = None
    """Who staged it (its owner); None on a node without logins."""


def attempt_header(
    partition_id: int, key: AttemptKey, timeout_ms: int, principal: str | None = None
) -> list[Buffer]:
    """The ATTEMPT frame: the fixed fields, then the owner's principal in UTF-8
    (nothing for None; files written before owners existed end there too)."""
    owner = b"" if principal is None else principal.encode()
    return frame(Kind.ATTEMPT, _ATTEMPT.pack(partition_id, *key, timeout_ms), owner)


def read_attempt_header(f: FileFrame) -> AttemptHeader:
    if f.kind is not Kind.ATTEMPT or len(f.body) < _ATTEMPT.size:
        raise StagingFormatError(f"expected an ATTEMPT frame at {f.offset}")
    pid, write_id, task, attempt, timeout_ms = _ATTEMPT.unpack_from(f.body)
    try:
        principal = f.body[_ATTEMPT.size :].decode() or None
    except UnicodeDecodeError:
        raise StagingFormatError(f"an ATTEMPT frame's owner is not UTF-8 at {f.offset}") from None
    return AttemptHeader(pid, AttemptKey(write_id, task, attempt), timeout_ms, principal)


def batch_frame(sequence: int, blobs: Sequence[bytes]) -> list[Buffer]:
    payload = [b if type(b) is not memoryview else bytes(b) for b in encode_produce_batch(blobs)]
    return frame(Kind.BATCH, _BATCH.pack(sequence, len(blobs)), *payload)


def read_batch_head(f: FileFrame) -> tuple[int, int]:
    """`(sequence, records)` of a BATCH frame."""
    if f.kind is not Kind.BATCH or len(f.body) < _BATCH.size:
        raise StagingFormatError(f"expected a batch frame at offset {f.offset}")
    sequence, records = _BATCH.unpack_from(f.body)
    return sequence, records


def read_batch_blobs(data: bytes) -> tuple[int, tuple[bytes, ...]]:
    """`(sequence, blobs)` of one whole BATCH frame read back from its file."""
    frames, end = scan(data)
    if len(frames) != 1 or end != len(data):
        raise StagingFormatError("a staged batch no longer checks out (damaged file)")
    (f,) = frames
    sequence, records = read_batch_head(f)
    blobs = decode_produce_batch(f.body[_BATCH.size :], check=False)
    if len(blobs) != records:
        raise StagingFormatError("a staged batch holds another record count than it says")
    return sequence, blobs


# --- commit files ---------------------------------------------------------------------


class Intent(NamedTuple):
    """A publish under way: the partition's next index when it started (its
    chunks are at or after it) and how many batches each chunk takes, in order."""

    start_index: int
    chunk_batches: tuple[int, ...]


def commit_header(partition_id: int, commit_id: int) -> list[Buffer]:
    return frame(Kind.COMMIT, _COMMIT.pack(partition_id, commit_id))


def read_commit_header(f: FileFrame) -> tuple[int, int]:
    pid, commit_id = _COMMIT.unpack(_expect(f, Kind.COMMIT, _COMMIT.size))
    return pid, commit_id


def claim_frame(parts: Sequence[StagedPart]) -> list[Buffer]:
    return frame(Kind.CLAIM, msgpack.packb([p.to_wire() for p in parts]))


def read_claim(f: FileFrame) -> tuple[StagedPart, ...]:
    raw = _unpack(f, Kind.CLAIM)
    if type(raw) is not list:
        raise StagingFormatError("a claim frame holds a list of parts")
    try:
        return tuple(StagedPart.from_wire(item) for item in raw)
    except ValueError as exc:
        raise StagingFormatError(f"a claim frame is damaged: {exc}") from None


def intent_frame(intent: Intent) -> list[Buffer]:
    return frame(Kind.INTENT, msgpack.packb([intent.start_index, list(intent.chunk_batches)]))


def read_intent(f: FileFrame) -> Intent:
    raw = _unpack(f, Kind.INTENT)
    if (
        type(raw) is not list
        or len(raw) != 2
        or type(raw[0]) is not int
        or type(raw[1]) is not list
        or not all(type(n) is int and n > 0 for n in raw[1])
    ):
        raise StagingFormatError("an intent frame is [start_index, [batches per chunk]]")
    return Intent(raw[0], tuple(raw[1]))


def published_frame(first_index: int, count: int) -> list[Buffer]:
    return frame(Kind.PUBLISHED, _PUBLISHED.pack(first_index, count))


def read_published(f: FileFrame) -> tuple[int, int]:
    first, count = _PUBLISHED.unpack(_expect(f, Kind.PUBLISHED, _PUBLISHED.size))
    return first, count


def _expect(f: FileFrame, kind: Kind, size: int) -> bytes:
    if f.kind is not kind or len(f.body) != size:
        raise StagingFormatError(f"expected a {kind.name} frame of {size} bytes at {f.offset}")
    return f.body


def _unpack(f: FileFrame, kind: Kind) -> Any:
    if f.kind is not kind:
        raise StagingFormatError(f"expected a {kind.name} frame at {f.offset}")
    try:
        return msgpack.unpackb(f.body)
    except Exception as exc:  # a checksummed frame that does not decode: a bug or damage
        raise StagingFormatError(f"a {kind.name} frame does not decode: {exc}") from None

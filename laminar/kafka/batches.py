"""Kafka RecordBatch v2 <-> laminar records, sans I/O.

A record has one stored form whichever door wrote it: laminar's record blob
(`laminar.wire.records`), one log record per Kafka record, so a Kafka offset
is a laminar index and every laminar reader works unchanged. The Kafka door
converts at its edge:

- produce (`decode_produce`): exactly one RecordBatch v2 is checked once
  (header fields, CRC-32C over the bytes received), decompressed with a cap,
  and split into blobs by one C loop (`laminar_kafka_split` in
  `laminar.native_build`) that checks every varint and length;
- fetch (`encode_fetch`): one RecordBatch v2 is built from a log's `LogBatch`
  by one C loop (`laminar_kafka_batch`), with the log's append timestamps
  (CreateTime per record: a producer's create timestamps are not kept, as with
  Kafka's LogAppendTime).

The C side only loops; the rules, the limits and the Kafka error each failure
maps to are here. See docs/architecture.md, "The Kafka door".
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from typing import Any, Final, NamedTuple, Protocol

import cramjam
import google_crc32c

from laminar._native import ffi as _ffi
from laminar._native import lib as _native
from laminar.kafka.errors import ErrorCode, KafkaError
from laminar.log.record import LogBatch
from laminar.wire.records import PRODUCER_HEADER

BATCH_HEADER_BYTES: Final = 61
"""A RecordBatch v2 up to its records: baseOffset i64, batchLength i32,
partitionLeaderEpoch i32, magic i8, crc u32, attributes i16, lastOffsetDelta
i32, baseTimestamp i64, maxTimestamp i64, producerId i64, producerEpoch i16,
baseSequence i32, recordCount i32."""

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_START: Final = 21  # the CRC covers attributes .. the batch's end
_MAGIC_AT: Final = 16
_RECORD_BYTES_MIN: Final = 7  # length, attributes, timestamp, offset, key, value, headers
_COMPRESSION_MASK: Final = 0x07
_TRANSACTIONAL: Final = 0x10
_CONTROL: Final = 0x20
_RESERVED: Final = PRODUCER_HEADER.encode()
_uncleared = _ffi.new_allocator(should_clear_after_alloc=False)
_Buffer = Any  # a cffi buffer: slicing it makes bytes


class _Into(Protocol):
    def __call__(self, data: memoryview, out: bytearray, /) -> int: ...


_CODECS: Final = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_SNAPPY: Final = 2
_STREAM_CODECS: Final[dict[int, _Into]] = {
    1: cramjam.gzip.decompress_into,
    3: cramjam.lz4.decompress_into,  # Kafka's lz4 is the LZ4 frame format
    4: cramjam.zstd.decompress_into,
}
_FULL: Final = "whole buffer"  # cramjam's complaint when the output buffer is full
_FIRST_GUESS: Final = 64 * 1024
_XERIAL: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER_BYTES: Final = 16  # magic, version i32, compatible version i32

_SPLIT_ERRORS: Final = {
    -1: (ErrorCode.CORRUPT_MESSAGE, "a field runs past the end of its record"),
    -2: (ErrorCode.CORRUPT_MESSAGE, "a varint is longer than its type allows"),
    -3: (ErrorCode.CORRUPT_MESSAGE, "the record's length differs from its fields"),
    -4: (ErrorCode.CORRUPT_MESSAGE, "bytes follow the last record of the batch"),
    -5: (ErrorCode.CORRUPT_MESSAGE, "a length below -1 or a negative header count"),
    -6: (ErrorCode.INVALID_RECORD, "the record's attributes are not 0"),
    -7: (ErrorCode.INVALID_RECORD, "offsetDelta is not the record's position in the batch"),
    -8: (ErrorCode.INVALID_RECORD, "a header key is null"),
    -9: (ErrorCode.INVALID_RECORD, "a header key is not valid UTF-8"),
    -10: (
        ErrorCode.INVALID_RECORD,
        f"the header name {PRODUCER_HEADER!r} is reserved for laminar's idempotent producer",
    ),
}


class ProducedBatch(NamedTuple):
    """One produced RecordBatch v2, checked and split into laminar blobs (one
    per Kafka record, in offset order), with the batch fields the produce path
    needs for idempotence (-1 when the producer is not idempotent). A
    NamedTuple: one is made per produce, and a frozen dataclass costs 1.5 us
    more to make."""

    blobs: tuple[bytes, ...]
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    max_timestamp: int


def decode_produce(records: bytes | memoryview, *, max_bytes: int) -> ProducedBatch:
    """The blobs of a Produce request's `records` for one partition: exactly one
    RecordBatch v2 (Kafka requires one for Produce v3+) of at most `max_bytes`,
    compressed or not; its records at most `max_bytes` once decompressed.
    Raises `KafkaError` with the code a Kafka broker answers."""
    view = memoryview(records)
    size = len(view)
    if size == 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, "a produce must carry exactly one batch")
    if size > max_bytes:
        raise KafkaError(
            ErrorCode.RECORD_LIST_TOO_LARGE, f"a batch of {size} bytes is over {max_bytes}"
        )
    if size > _MAGIC_AT and view[_MAGIC_AT] != 2:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
            f"record batch magic {view[_MAGIC_AT]}: only RecordBatch v2 (magic 2) is taken",
        )
    if size < BATCH_HEADER_BYTES:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"{size} bytes are shorter than a batch header")
    (
        _base_offset,
        batch_length,
        _leader_epoch,
        _magic,
        crc,
        attributes,
        last_offset_delta,
        _base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = _HEADER.unpack_from(view)
    end = 12 + batch_length
    if end < BATCH_HEADER_BYTES or end > size:
        raise KafkaError(
            ErrorCode.CORRUPT_MESSAGE,
            f"batchLength {batch_length} does not fit the {size} bytes received",
        )
    if end < size:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"{size - end} bytes follow the batch: a produce carries exactly one batch",
        )
    # google-crc32c takes bytes only: the slice copy costs less than its lead
    # over laminar_crc32c (10 against 6.6 GB/s, 0.5 against 0.9 us per call)
    if google_crc32c.value(bytes(view[_CRC_START:])) != crc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "the batch's CRC-32C does not match")
    if attributes & _CONTROL:
        raise KafkaError(ErrorCode.INVALID_RECORD, "control batches are not produced by clients")
    if attributes & _TRANSACTIONAL:
        raise KafkaError(
            ErrorCode.INVALID_TXN_STATE, "transactional batches are not supported by laminar"
        )
    section = _decompress(attributes & _COMPRESSION_MASK, view[BATCH_HEADER_BYTES:], max_bytes)
    if count < 1 or count > len(section) // _RECORD_BYTES_MIN:
        raise KafkaError(
            ErrorCode.CORRUPT_MESSAGE,
            f"a record count of {count} does not fit {len(section)} bytes of records",
        )
    if last_offset_delta != count - 1:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"lastOffsetDelta {last_offset_delta} for {count} records",
        )
    return ProducedBatch(
        _split(section, count), producer_id, producer_epoch, base_sequence, count, max_timestamp
    )


def _decompress(codec: int, data: memoryview, max_bytes: int) -> memoryview:
    """The records section, decompressed into at most `max_bytes` (a bomb
    fails once it passes them, without allocating more)."""
    if codec == 0:
        return data
    try:
        if codec == _SNAPPY:
            return _snappy(data, max_bytes)
        if codec in _STREAM_CODECS:
            return _bounded(_STREAM_CODECS[codec], data, max_bytes)
    except cramjam.DecompressionError as exc:
        raise KafkaError(
            ErrorCode.CORRUPT_MESSAGE, f"the records do not decompress ({_CODECS[codec]}): {exc}"
        ) from None
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression type {codec}")


def _too_large(max_bytes: int) -> KafkaError:
    return KafkaError(
        ErrorCode.RECORD_LIST_TOO_LARGE, f"the records decompress to more than {max_bytes} bytes"
    )


def _bounded(decompress_into: _Into, data: memoryview, max_bytes: int) -> memoryview:
    """gzip, lz4 (frame) and zstd need not declare their size: decompress into
    a buffer that grows 4x per try up to `max_bytes` + 1 (cramjam stops when
    the buffer is full), so a bomb costs at most ~1.3x `max_bytes` of work."""
    size = min(max_bytes + 1, max(_FIRST_GUESS, 4 * len(data)))
    while True:
        out = bytearray(size)
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if _FULL not in str(exc):
                raise
            written = size
        if written < size:
            return memoryview(out)[:written]
        if size > max_bytes:
            raise _too_large(max_bytes)
        size = min(max_bytes + 1, 4 * size)


def _snappy(data: memoryview, max_bytes: int) -> memoryview:
    """Raw snappy (librdkafka) or xerial-framed blocks (Java clients), as a
    Kafka broker reads both; each raw block declares its size up front."""
    if bytes(data[: len(_XERIAL)]) != _XERIAL:
        blocks = [data]
    else:
        blocks = []
        pos = _XERIAL_HEADER_BYTES
        while pos < len(data):
            if pos + 4 > len(data):
                raise cramjam.DecompressionError("xerial snappy: a block length is cut off")
            end = pos + 4 + int.from_bytes(data[pos : pos + 4], "big")
            if end > len(data):
                raise cramjam.DecompressionError("xerial snappy: a block runs past the end")
            blocks.append(data[pos + 4 : end])
            pos = end
    sizes = [cramjam.snappy.decompress_raw_len(block) for block in blocks]
    if sum(sizes) > max_bytes:
        raise _too_large(max_bytes)
    out = bytearray(sum(sizes))
    view = memoryview(out)
    pos = 0
    for block, size in zip(blocks, sizes, strict=True):
        if cramjam.snappy.decompress_raw_into(block, view[pos : pos + size]) != size:
            raise cramjam.DecompressionError("a snappy block is shorter than it declares")
        pos += size
    return view


def _split(section: memoryview, count: int) -> tuple[bytes, ...]:
    """The C loop sizes the blobs, then writes them; the per-record step left
    in Python is one slice each into a tuple of bytes (the log appends bytes)."""
    status, at, out, lengths = _split_into(section, count)
    if status != 0:
        code, reason = _SPLIT_ERRORS[status]
        raise KafkaError(code, f"record {at} of the batch: {reason}")
    blobs = []
    pos = 0
    for length in lengths:
        end = pos + length
        blobs.append(out[pos:end])  # one copy per blob, straight into its bytes
        pos = end
    return tuple(blobs)


def _split_into(section: memoryview, count: int) -> tuple[int, int, _Buffer, array[int]]:
    """`(status, record, blobs, lengths)` from the C loop. Its buffers are
    released here, before any error is raised: a traceback that kept a cffi
    buffer over a memoryview crashed CPython 3.11's garbage collector."""
    at = _ffi.new("size_t *")
    total = _ffi.new("uint64_t *")
    lengths = array("I", bytes(4 * count))
    with _ffi.from_buffer(section) as source:
        args = (source, len(section), count, _RESERVED, len(_RESERVED))
        status = _native.laminar_kafka_split(*args, _ffi.NULL, _ffi.NULL, total, at)
        if status != 0:
            return status, at[0], _ffi.buffer(_ffi.NULL, 0), lengths
        out = _uncleared("unsigned char[]", total[0])  # C writes every byte
        with _ffi.from_buffer("uint32_t[]", lengths) as sizes:
            status = _native.laminar_kafka_split(*args, out, sizes, total, at)
    return status, at[0], _ffi.buffer(out), lengths


def encode_fetch(batch: LogBatch, *, leader_epoch: int = 0) -> bytes:
    """One RecordBatch v2 holding `batch`'s records (b"" for no records), with
    the log's timestamps; `ValueError` on a blob that is not a laminar record
    (the log holds only checked ones, so that is a bug or a corrupt store)."""
    if len(batch) == 0:
        return b""
    if len(batch.timestamps_ms) != len(batch):
        raise ValueError(f"{len(batch.timestamps_ms)} timestamps for {len(batch)} records")
    status, at, data = _batch_into(batch, leader_epoch)
    if status < 0:
        raise ValueError(
            f"log record {batch.first_index + at} is not a laminar record blob "
            "or the batch's lengths do not add up"
        )
    return data


def _batch_into(batch: LogBatch, leader_epoch: int) -> tuple[int, int, bytes]:
    """`(status, record, batch bytes)` from the C loop, its buffers released
    before the caller raises (see `_split_into`)."""
    at = _ffi.new("size_t *")
    with (
        _ffi.from_buffer("uint64_t[]", _column(batch.timestamps_ms, "Q")) as stamps,
        _ffi.from_buffer("uint32_t[]", _column(batch.lengths, "I")) as sizes,
        _ffi.from_buffer(batch.payload) as payload,
    ):
        args = (batch.first_index, stamps, sizes, len(batch), payload, len(batch.payload))
        size = _native.laminar_kafka_batch(
            *args, leader_epoch, _RESERVED, len(_RESERVED), _ffi.NULL, at
        )
        if size < 0:
            return size, at[0], b""
        out = _uncleared("unsigned char[]", size)  # C writes every byte
        _native.laminar_kafka_batch(*args, leader_epoch, _RESERVED, len(_RESERVED), out, at)
    return 0, 0, _ffi.buffer(out)[:]


def _column(values: Sequence[int], typecode: str) -> array[int]:
    if isinstance(values, array) and values.typecode == typecode:
        return values
    return array(typecode, values)

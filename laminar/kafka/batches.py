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
from dataclasses import dataclass
from typing import Final

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


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    """One produced RecordBatch v2, checked and split into laminar blobs (one
    per Kafka record, in offset order), with the batch fields the produce path
    needs for idempotence (-1 when the producer is not idempotent)."""

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
    with memoryview(records) as view:
        return _decode_one(view, max_bytes)


def _decode_one(view: memoryview, max_bytes: int) -> ProducedBatch:
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
    if _native.laminar_crc32c(_ffi.from_buffer(view[_CRC_START:]), size - _CRC_START) != crc:
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
    if codec == 0:
        return data
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression type {codec}")


def _split(section: memoryview, count: int) -> tuple[bytes, ...]:
    """The C loop sizes the blobs, then writes them; the per-record step left
    in Python is one slice each into a tuple of bytes (the log appends bytes)."""
    at = _ffi.new("size_t *")
    total = _ffi.new("uint64_t *")
    source = _ffi.from_buffer(section)
    args = (source, len(section), count, _RESERVED, len(_RESERVED))
    status = _native.laminar_kafka_split(*args, _ffi.NULL, _ffi.NULL, total, at)
    if status == 0:
        out = bytearray(total[0])
        lengths = array("I", bytes(4 * count))
        status = _native.laminar_kafka_split(
            *args, _ffi.from_buffer(out), _ffi.from_buffer("uint32_t[]", lengths), total, at
        )
    if status != 0:
        code, reason = _SPLIT_ERRORS[status]
        raise KafkaError(code, f"record {at[0]} of the batch: {reason}")
    blobs = []
    pos = 0
    for length in lengths:
        end = pos + length
        blobs.append(bytes(out[pos:end]))
        pos = end
    return tuple(blobs)


def encode_fetch(batch: LogBatch, *, leader_epoch: int = 0) -> bytes:
    """One RecordBatch v2 holding `batch`'s records (b"" for no records), with
    the log's timestamps; `ValueError` on a blob that is not a laminar record
    (the log holds only checked ones, so that is a bug or a corrupt store)."""
    count = len(batch)
    if count == 0:
        return b""
    stamps = _column(batch.timestamps_ms, "Q")
    sizes = _column(batch.lengths, "I")
    at = _ffi.new("size_t *")
    args = (
        batch.first_index,
        _ffi.from_buffer("uint64_t[]", stamps),
        _ffi.from_buffer("uint32_t[]", sizes),
        count,
        _ffi.from_buffer(batch.payload),
        len(batch.payload),
        leader_epoch,
        _RESERVED,
        len(_RESERVED),
    )
    size = _native.laminar_kafka_batch(*args, _ffi.NULL, at)
    if size < 0:
        raise ValueError(
            f"log record {batch.first_index + at[0]} is not a laminar record blob "
            "or the batch's lengths do not add up"
        )
    out = bytearray(size)
    _native.laminar_kafka_batch(*args, _ffi.from_buffer(out), at)
    return bytes(out)


def _column(values: Sequence[int], typecode: str) -> array[int]:
    if isinstance(values, array) and values.typecode == typecode:
        return values
    return array(typecode, values)

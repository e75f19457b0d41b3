"""RecordBatch v2 <-> laminar record blobs (`laminar.kafka.batches`), held to
kafka-python 3's record code as the oracle: it builds the batches a Kafka
producer sends (every codec) and reads the batches the Kafka door serves."""

from __future__ import annotations

import re
import struct
import tracemalloc
import zlib
from array import array
from collections.abc import Sequence

import google_crc32c
import lz4.frame as lz4_frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from laminar.kafka.batches import BATCH_HEADER_BYTES, ProducedBatch, decode_produce, encode_fetch
from laminar.kafka.errors import ErrorCode, KafkaError
from laminar.log.record import LogBatch
from laminar.wire import ProduceRequest
from laminar.wire.records import (
    PRODUCER_HEADER,
    ProducerStamp,
    decode_record,
    encode_record,
    producer_stamp,
)

Header = tuple[str, bytes | None]
KafkaRecord = tuple[bytes | None, bytes | None, list[Header]]  # key, value, headers

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
MAX_BYTES = 1 << 20

SAMPLE: list[KafkaRecord] = [
    (b"k1", b"v1", [("h", b"x"), ("h", None), ("\u00e9" * 40, b"y" * 300)]),  # dup, null
    (None, None, []),  # a tombstone without a key
    (b"user-7", None, [("why", b"deleted")]),  # a keyed tombstone
    (b"", b"", []),  # empty is not null
    (None, b"z" * 70_000, [("big", b"b" * 70_000)]),  # sizes past 16 bits
]


def build(
    records: Sequence[KafkaRecord],
    codec: int = NONE,
    *,
    producer: tuple[int, int, int] = (-1, -1, -1),
    timestamps: Sequence[int] | None = None,
) -> bytes:
    """A produced batch as kafka-python's producer makes it."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 30,
    )
    for k, (key, value, headers) in enumerate(records):
        stamp = 1_700_000_000_000 + k if timestamps is None else timestamps[k]
        builder.append(k, timestamp=stamp, key=key, value=value, headers=headers)
    return bytes(builder.build())


def rebatch(batch: bytes, section: bytes, *, attributes: int | None = None, **fields: int) -> bytes:
    """`batch` with another records section (and header fields), its batchLength
    and CRC made right again (with google-crc32c: independent of laminar's)."""
    header = bytearray(batch[:BATCH_HEADER_BYTES])
    struct.pack_into(">i", header, 8, BATCH_HEADER_BYTES - 12 + len(section))
    if attributes is not None:
        struct.pack_into(">h", header, 21, attributes)
    for name, (at, fmt) in {"last": (23, ">i"), "count": (57, ">i"), "magic": (16, ">b")}.items():
        if name in fields:
            struct.pack_into(fmt, header, at, fields[name])
    body = bytes(header[21:]) + section
    return bytes(header[:17]) + struct.pack(">I", google_crc32c.value(body)) + body


def log_batch(blobs: Sequence[bytes], first_index: int, stamps: Sequence[int]) -> LogBatch:
    return LogBatch(
        first_index,
        array("Q", [1] * len(blobs)),
        array("Q", stamps),
        array("I", map(len, blobs)),
        b"".join(blobs),
    )


def read(data: bytes) -> DefaultRecordBatch:
    """The one batch in `data`, read by kafka-python, its CRC checked."""
    batch = DefaultRecordBatch(data)
    assert batch.size_in_bytes == len(data)
    assert batch.validate_crc()
    return batch


def assert_laminar_view(produced: ProducedBatch, records: Sequence[KafkaRecord]) -> None:
    """What laminar's own door decodes: the same key and value, the headers as a
    dict (a repeated name holds its last value)."""
    assert len(produced.blobs) == produced.record_count == len(records)
    for blob, (key, value, headers) in zip(produced.blobs, records, strict=True):
        assert decode_record(blob) == (value, key, dict(headers) or None)


def assert_kafka_view(data: bytes, records: Sequence[KafkaRecord], first: int) -> None:
    """What a Kafka consumer reads back: every header, in order, repeats kept."""
    got = [(r.offset, r.key, r.value, r.headers) for r in read(data)]
    assert got == [(first + k, key, value, hs) for k, (key, value, hs) in enumerate(records)]


@pytest.mark.parametrize("codec", CODECS)
def test_a_kafka_batch_reads_the_same_through_both_doors(codec: int) -> None:
    produced = decode_produce(build(SAMPLE, codec, producer=(42, 3, 17)), max_bytes=MAX_BYTES)
    assert (produced.producer_id, produced.producer_epoch, produced.base_sequence) == (42, 3, 17)
    assert produced.max_timestamp == 1_700_000_000_000 + len(SAMPLE) - 1
    assert_laminar_view(produced, SAMPLE)
    stamps = [5_000, 5_003, 5_001, 5_003, 5_002]  # the log's, not the producer's
    data = encode_fetch(log_batch(produced.blobs, 900, stamps), leader_epoch=7)
    assert_kafka_view(data, SAMPLE, 900)


def test_the_fetched_batch_header() -> None:
    produced = decode_produce(build(SAMPLE[:3]), max_bytes=MAX_BYTES)
    data = encode_fetch(log_batch(produced.blobs, 2**40, [10, 30, 20]), leader_epoch=7)
    batch = read(data)
    assert (batch.base_offset, batch.leader_epoch, batch.magic) == (2**40, 7, 2)
    assert (batch.attributes, batch.compression_type, batch.timestamp_type) == (0, 0, 0)
    assert not batch.is_transactional and not batch.is_control_batch
    assert (batch.last_offset_delta, batch.records_count) == (2, 3)
    assert (batch.first_timestamp, batch.max_timestamp) == (10, 30)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert [r.timestamp for r in batch] == [10, 30, 20]  # CreateTime: the log's per record


def test_laminar_blobs_fetch_through_the_kafka_door() -> None:
    """Records laminar's own producers wrote, the idempotent producer's stamp
    left out as laminar's consumers leave it out."""
    stamp = ProducerStamp(9, 0, 3).encode()
    blobs = [
        encode_record(b"plain"),
        encode_record(b"v", b"k", {"a": b"1", PRODUCER_HEADER: stamp}),
        encode_record(b"bare", None, {PRODUCER_HEADER: stamp}),
        encode_record(None, b"gone"),
    ]
    data = encode_fetch(log_batch(blobs, 0, [1, 2, 3, 4]))
    expected = [
        (None, b"plain", []),
        (b"k", b"v", [("a", b"1")]),
        (None, b"bare", []),
        (b"gone", None, []),
    ]
    assert_kafka_view(data, expected, 0)


def test_an_empty_log_batch_is_no_batch() -> None:
    assert encode_fetch(log_batch([], 5, [])) == b""


@pytest.mark.parametrize(
    "blob", [b"", b"\x08v", b"\x01\x00\x00\x00\x09k", b"\x04v", b"\x02\x00\x00\x00\x01\x90"]
)
def test_encode_fetch_refuses_a_blob_that_is_not_a_record(blob: bytes) -> None:
    with pytest.raises(ValueError, match="log record 11 is not"):
        encode_fetch(log_batch([encode_record(b"fine"), blob], 10, [1, 2]))


header_names = st.text(max_size=8).filter(lambda name: name != PRODUCER_HEADER)
kafka_records = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(header_names, st.none() | st.binary(max_size=20)), max_size=4),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    kafka_records,
    st.sampled_from(CODECS),
    st.integers(0, 2**62),
    st.lists(st.integers(0, 2**41), min_size=30, max_size=30),
)
def test_random_batches_round_trip(
    records: list[KafkaRecord], codec: int, first: int, stamps: list[int]
) -> None:
    produced = decode_produce(build(records, codec), max_bytes=MAX_BYTES)
    assert_laminar_view(produced, records)
    stamps = stamps[: len(records)]
    data = encode_fetch(log_batch(produced.blobs, first, stamps))
    assert_kafka_view(data, records, first)
    batch = read(data)
    assert [r.timestamp for r in batch] == stamps
    assert batch.max_timestamp == max(stamps)


def test_raw_snappy_from_librdkafka_is_read_like_xerial_from_java() -> None:
    plain = build(SAMPLE)
    raw = rebatch(plain, snappy.compress(plain[BATCH_HEADER_BYTES:]), attributes=SNAPPY)
    assert_laminar_view(decode_produce(raw, max_bytes=MAX_BYTES), SAMPLE)


# --- what a broker refuses --------------------------------------------------------------


def refused(data: bytes, max_bytes: int = MAX_BYTES) -> KafkaError:
    with pytest.raises(KafkaError) as caught:
        decode_produce(data, max_bytes=max_bytes)
    return caught.value


def varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    return bytes(out + bytes([raw]))


def record(
    *,
    attributes: int = 0,
    offset_delta: int = 0,
    key: bytes = varint(-1),
    value: bytes = varint(1) + b"v",
    headers: bytes = varint(0),
    extra: bytes = b"",
    length_delta: int = 0,
) -> bytes:
    body = bytes([attributes]) + varint(0) + varint(offset_delta) + key + value + headers + extra
    return varint(len(body) + length_delta) + body


def header(name: bytes | None, value: bytes | None = b"x") -> bytes:
    """One Kafka record header (length-prefixed, -1 for null)."""
    encoded_name = varint(-1) if name is None else varint(len(name)) + name
    return encoded_name + (varint(-1) if value is None else varint(len(value)) + value)


ONE = build([(None, b"v", [])])


def with_records(*records: bytes, **fields: int) -> bytes:
    return rebatch(
        ONE, b"".join(records), **{"count": len(records), "last": len(records) - 1, **fields}
    )


def test_a_handmade_batch_is_accepted() -> None:
    """The helpers below make valid batches unless told otherwise."""
    data = with_records(record(), record(offset_delta=1, headers=varint(1) + header(b"h", None)))
    produced = decode_produce(data, max_bytes=MAX_BYTES)
    assert [decode_record(b) for b in produced.blobs] == [
        (b"v", None, None),
        (b"v", None, {"h": None}),
    ]


MALFORMED: list[tuple[bytes, ErrorCode, str]] = [
    (b"", ErrorCode.INVALID_RECORD, "exactly one batch"),
    (ONE + ONE, ErrorCode.INVALID_RECORD, "exactly one batch"),
    (rebatch(ONE, ONE[61:], magic=1), ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, "magic 1"),
    (rebatch(ONE, ONE[61:], attributes=5), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "type 5"),
    (rebatch(ONE, ONE[61:], attributes=7), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "type 7"),
    (rebatch(ONE, ONE[61:], attributes=0x10), ErrorCode.INVALID_TXN_STATE, "transactional"),
    (rebatch(ONE, ONE[61:], attributes=0x20), ErrorCode.INVALID_RECORD, "control"),
    (ONE[:-1] + bytes([ONE[-1] ^ 1]), ErrorCode.CORRUPT_MESSAGE, "CRC"),
    (with_records(record(), count=0, last=-1), ErrorCode.CORRUPT_MESSAGE, "count of 0"),
    (with_records(record(), count=2, last=1), ErrorCode.CORRUPT_MESSAGE, "count of 2"),
    (
        with_records(record(), record(offset_delta=1), count=1, last=0),
        ErrorCode.CORRUPT_MESSAGE,
        "follow the last",
    ),
    (
        with_records(record(), count=10**6, last=10**6 - 1),
        ErrorCode.CORRUPT_MESSAGE,
        "count of",
    ),
    (with_records(record(), last=3), ErrorCode.INVALID_RECORD, "lastOffsetDelta 3"),
    (
        with_records(record(), record(offset_delta=2)),
        ErrorCode.INVALID_RECORD,
        "record 1 .*offsetDelta",
    ),
    (with_records(record(offset_delta=1), record()), ErrorCode.INVALID_RECORD, "offsetDelta"),
    (with_records(record(attributes=1)), ErrorCode.INVALID_RECORD, "attributes"),
    (with_records(record(length_delta=1)), ErrorCode.CORRUPT_MESSAGE, "past the end"),
    (with_records(record(length_delta=-1)), ErrorCode.CORRUPT_MESSAGE, "past the end"),
    (with_records(record(extra=b"\x00")), ErrorCode.CORRUPT_MESSAGE, "length differs"),
    (with_records(record(key=b"\xff" * 5 + b"\x01")), ErrorCode.CORRUPT_MESSAGE, "varint"),
    (with_records(record(key=b"\x80\x80\x80\x80\x10")), ErrorCode.CORRUPT_MESSAGE, "varint"),
    (with_records(record(key=varint(-5))), ErrorCode.CORRUPT_MESSAGE, "below -1"),
    (with_records(record(key=varint(2**31 - 1))), ErrorCode.CORRUPT_MESSAGE, "past the end"),
    (with_records(record(value=varint(-2))), ErrorCode.CORRUPT_MESSAGE, "below -1"),
    (with_records(record(headers=varint(-1))), ErrorCode.CORRUPT_MESSAGE, "header count"),
    (with_records(record(headers=varint(10**9))), ErrorCode.CORRUPT_MESSAGE, "past the end"),
    (with_records(record(headers=varint(1) + header(None))), ErrorCode.INVALID_RECORD, "null"),
    (
        with_records(record(headers=varint(1) + header(b"\xff"))),
        ErrorCode.INVALID_RECORD,
        "UTF-8",
    ),
    (
        with_records(record(headers=varint(1) + header(b"\xed\xa0\x80"))),
        ErrorCode.INVALID_RECORD,
        "UTF-8",
    ),
    (
        with_records(record(headers=varint(1) + header(b"\xc0\x80"))),
        ErrorCode.INVALID_RECORD,
        "UTF-8",
    ),
    (
        with_records(record(headers=varint(1) + header(b"h", None)[:-1] + varint(-3))),
        ErrorCode.CORRUPT_MESSAGE,
        "below -1",
    ),
    (
        with_records(record(headers=varint(1) + header(PRODUCER_HEADER.encode()))),
        ErrorCode.INVALID_RECORD,
        "reserved",
    ),
]


@pytest.mark.parametrize(
    ("data", "code", "match"),
    MALFORMED,
    ids=[f"{k}-{c.name}" for k, (_, c, _) in enumerate(MALFORMED)],
)
def test_malformed_batches_get_the_brokers_error(data: bytes, code: ErrorCode, match: str) -> None:
    error = refused(data)
    assert error.code == code
    assert re.search(match, error.args[0]), error.args[0]


def test_a_batch_over_max_bytes_is_too_large() -> None:
    assert refused(ONE, max_bytes=len(ONE) - 1).code == ErrorCode.RECORD_LIST_TOO_LARGE


@pytest.mark.parametrize("codec", CODECS)
def test_every_truncation_is_corrupt(codec: int) -> None:
    data = build(SAMPLE[:4], codec)
    for size in range(1, len(data)):
        assert refused(data[:size]).code == ErrorCode.CORRUPT_MESSAGE, size


def test_every_flipped_bit_is_refused_or_harmless() -> None:
    """A bit flipped under the CRC is caught by it; one outside it (baseOffset,
    batchLength, leader epoch, magic, the CRC itself) is refused or ignored."""
    data = build(SAMPLE[:4])
    for bit in range(8 * len(data)):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        try:
            decode_produce(bytes(flipped), max_bytes=MAX_BYTES)
        except KafkaError:
            continue
        assert bit // 8 < 8 or 12 <= bit // 8 < 16, bit  # baseOffset, leader epoch


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_corrupt_compressed_records_are_corrupt(codec: int) -> None:
    plain = build(SAMPLE)
    data = build(SAMPLE, codec)
    garbled = data[:BATCH_HEADER_BYTES] + bytes(b ^ 0x5A for b in data[BATCH_HEADER_BYTES:])
    error = refused(rebatch(data, garbled[BATCH_HEADER_BYTES:]))
    assert error.code == ErrorCode.CORRUPT_MESSAGE
    # records that decompress, but to bytes that are not records, are corrupt too
    junk = rebatch(plain, zlib.compress(b"\x00" * 100, wbits=31), attributes=GZIP)
    assert refused(junk).code == ErrorCode.CORRUPT_MESSAGE


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([GZIP, SNAPPY, LZ4, ZSTD]), st.binary(max_size=200), st.binary(max_size=40))
def test_random_compressed_bytes_are_refused_with_a_kafka_error(
    codec: int, head: bytes, noise: bytes
) -> None:
    """Whatever a codec makes of junk (the codec's magic first, to get past it),
    only a KafkaError comes out."""
    magic = {GZIP: b"\x1f\x8b\x08", SNAPPY: b"\x82SNAPPY\x00", LZ4: b"\x04\x22\x4d\x18"}
    data = rebatch(ONE, magic.get(codec, b"\x28\xb5\x2f\xfd") + head + noise, attributes=codec)
    with pytest.raises(KafkaError):
        decode_produce(data, max_bytes=MAX_BYTES)


GIB = 1 << 30


@pytest.fixture(scope="module")
def bombs() -> dict[int, bytes]:
    """1 GiB of zeros as the records of a gzip, zstd and raw snappy batch."""
    chunk = bytes(1 << 20)
    # deflate resets at each full flush, so every 1 MiB of zeros compresses
    # to the same bytes: write them once, repeat them (fast), end a valid gzip
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(GIB // len(chunk)):
        crc = zlib.crc32(chunk, crc)
    gzipped = (
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
        + block * (GIB // len(chunk))
        + deflate.flush()
        + struct.pack("<II", crc, GIB & 0xFFFFFFFF)
    )
    assert zlib.decompressobj(31).decompress(gzipped[:4096], 1 << 20) == bytes(1 << 20)
    lz4 = lz4_frame.LZ4FrameCompressor()
    lz4ed = lz4.begin() + b"".join(lz4.compress(chunk) for _ in range(256)) + lz4.flush()
    zstd = zstandard.ZstdCompressor(level=1).compressobj(size=GIB)
    zstded = b"".join(zstd.compress(chunk) for _ in range(GIB // len(chunk))) + zstd.flush()
    # a raw snappy block that declares 1 GiB (the varint up front) and holds less
    lying = _uvarint(GIB) + snappy.compress(bytes(100))[1:]
    return {
        GZIP: rebatch(ONE, gzipped, attributes=GZIP),
        ZSTD: rebatch(ONE, zstded, attributes=ZSTD),
        LZ4: rebatch(ONE, lz4ed, attributes=LZ4),  # 256 MiB: lz4 compresses 255:1 at most
        SNAPPY: rebatch(ONE, lying, attributes=SNAPPY),
    }


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


@pytest.mark.parametrize("codec", [GZIP, ZSTD, SNAPPY, LZ4])
def test_a_compression_bomb_fails_fast_in_bounded_memory(
    bombs: dict[int, bytes], codec: int
) -> None:
    data = bombs[codec]
    max_bytes = 4 << 20
    assert len(data) < max_bytes
    tracemalloc.start()
    try:
        error = refused(data, max_bytes=max_bytes)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert peak < 3 * max_bytes, peak


@pytest.mark.parametrize(
    "headers", [[("h", b"1"), ("h", b"2"), ("n", None)], [], [("x", b"")] * 17]
)
def test_the_idempotent_stamp_keeps_every_header_of_the_first_record(
    headers: list[tuple[str, bytes | None]],
) -> None:
    """The first record of an idempotent batch gets the producer stamp added to
    its headers in place: repeated names and null values stay as Kafka sent them
    (and the stamp stays out of what a Kafka consumer reads)."""
    records = [(b"k", b"v", headers), (None, b"w", [])]
    produced = decode_produce(build(records, producer=(42, 0, 0)), max_bytes=MAX_BYTES)
    request = ProduceRequest.stamped(0, produced.blobs, 42 << 16, 0)
    assert producer_stamp(request.blobs[0]) == ProducerStamp(42 << 16, 0, 2)
    data = encode_fetch(log_batch(request.blobs, 0, [1, 1]))
    assert_kafka_view(data, records, 0)

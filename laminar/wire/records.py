"""Record bytes: one record as a blob, and batches of blobs in a frame payload.

A record blob is what the log stores as one record's value, opaque to the
server: the client encodes it once, the server appends it as is, a consumer
decodes it. Layout (big-endian)::

    u8 attrs                      bit 0: has key, bit 1: has headers,
                                  bit 2: null value, others 0
    [u32 key_len, key]            when bit 0
    [u32 headers_len, headers]    when bit 1: msgpack map {str: bin or nil}
    value                         the rest of the blob (nothing when bit 2)

A record without key and headers is one zero byte then the value, and
decoding it is one slice. An empty key (b"") is a key; empty headers are the
same as no headers and decode as None. A null value (bit 2: a Kafka
tombstone) decodes as None, unlike an empty one (b""); so does a nil header
value (Kafka headers may be null; laminar's own producers write bin only).
Kafka's door keeps repeated header names in the map in order (msgpack allows
it); a dict of them holds the last.

Batches put the blobs back to back after a table of lengths, so the blob
region of a produce request is exactly what the store file will hold, and the
blob region of a fetch response is exactly a range of the store file::

    produce payload:  u32 count | count x u32 blob_len | blobs
    fetch payload:    u32 count | count x (u64 index | u64 timestamp_ms | u32 blob_len) | blobs
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Literal, NamedTuple

import msgpack

from laminar._native import ffi as _ffi
from laminar._native import lib as _native
from laminar.wire.codec import Buffer
from laminar.wire.errors import CorruptRecord, InvalidMessage, WireUsageError

HAS_KEY: Final = 0x01
HAS_HEADERS: Final = 0x02
NULL_VALUE: Final = 0x04
_KNOWN_ATTRS: Final = HAS_KEY | HAS_HEADERS | NULL_VALUE

Headers = dict[str, bytes | None]
"""A record's headers as decoded: a value is None only where a Kafka client
wrote a null header."""
Decoded = tuple[bytes | None, bytes | None, Headers | None]
"""`(value, key, headers)` of a decoded record; the value is None for a null
value (a Kafka tombstone)."""

_U32 = struct.Struct(">I")
_new_tuple = tuple.__new__
_FETCH_ENTRY = struct.Struct(">QQI")
_PLAIN = b"\x00"
_SWAP = sys.byteorder == "little"
# The array typecode whose items are 4 bytes ("I" on every platform laminar runs on).
_U32_CODE: Final[Literal["I", "L"]] = "I" if array("I").itemsize == 4 else "L"


# --- one record -------------------------------------------------------------------


def encode_record(
    value: bytes | None,
    key: bytes | None = None,
    headers: Mapping[str, bytes | None] | None = None,
) -> bytes:
    """The blob for one record (see the module docstring for the layout);
    `value` None is a null value."""
    if value is None:
        attrs = NULL_VALUE
        value = b""
    elif key is None and not headers:
        return _PLAIN + value
    else:
        attrs = 0
    parts: list[bytes] = []
    if key is not None:
        attrs |= HAS_KEY
        parts += (_U32.pack(len(key)), key)
    if headers:
        check_header_types(headers, nullable=True)
        packed = msgpack.packb(dict(headers), use_bin_type=True)
        attrs |= HAS_HEADERS
        parts += (_U32.pack(len(packed)), packed)
    return b"".join((bytes((attrs,)), *parts, value))


def decode_record(blob: Buffer) -> Decoded:
    """`(value, key, headers)` from a blob; raises `CorruptRecord` on a bad layout."""
    if not blob:
        raise CorruptRecord("record blob is empty (it must start with the attrs byte)")
    attrs = blob[0]
    if attrs == 0:
        return bytes(blob[1:]), None, None
    if attrs & ~_KNOWN_ATTRS:
        raise CorruptRecord(f"record attrs byte 0x{attrs:02x} has unknown bits")
    pos = 1
    key: bytes | None = None
    headers: Headers | None = None
    if attrs & HAS_KEY:
        key, pos = _section(blob, pos, "key")
    if attrs & HAS_HEADERS:
        packed, pos = _section(blob, pos, "headers")
        headers = _decode_headers(packed)
    if attrs & NULL_VALUE:
        if pos != len(blob):
            raise CorruptRecord("a record with a null value has value bytes")
        return None, key, headers
    return bytes(blob[pos:]), key, headers


def check_record(blob: Buffer) -> None:
    """Raise `CorruptRecord` unless `blob` decodes; cheap for plain records
    and for stamp-only ones."""
    if blob and (blob[0] == 0 or is_stamp_only(blob)):
        return
    decode_record(blob)


def _section(blob: Buffer, pos: int, what: str) -> tuple[bytes, int]:
    if pos + 4 > len(blob):
        raise CorruptRecord(f"record blob ends inside its {what} length")
    (size,) = _U32.unpack_from(blob, pos)
    start = pos + 4
    end = start + size
    if end > len(blob):
        raise CorruptRecord(f"record {what} of {size} bytes runs past the blob's end")
    return bytes(blob[start:end]), end


def _decode_headers(packed: bytes) -> Headers:
    try:
        headers = msgpack.unpackb(packed)
    except Exception as exc:  # any failure to decode is the blob's fault
        raise CorruptRecord(f"record headers do not decode: {type(exc).__name__}") from None
    if type(headers) is not dict or not all(
        type(k) is str and (type(v) is bytes or v is None) for k, v in headers.items()
    ):
        raise CorruptRecord("record headers must be a msgpack map of str to bin or nil")
    return headers


# --- the idempotent producer's stamp ---------------------------------------------------

PRODUCER_HEADER: Final = "laminar.producer"
"""The header an idempotent producer puts on the first record of each batch: a
`ProducerStamp` (see `laminar.shards.idempotence`). The name is reserved."""

PRODUCER_WINDOW: Final = 8
"""How far an idempotent producer may run ahead on one partition, in batches:
from its oldest batch still unanswered to its newest sent, at most this many
(the clients' `laminar.client.producer.SequenceWindow`). The node remembers
exactly this many batches per producer (`laminar.shards.idempotence.BATCHES_MAX`),
so a batch the client sends again, however late, is always one the node still
knows: it gets its original index back, never DUPLICATE_SEQUENCE. One constant
for both sides, so neither can outgrow the other."""

_STAMP = struct.Struct(">QQI")
_STAMP_NAME: Final = PRODUCER_HEADER.encode()


class ProducerStamp(NamedTuple):
    """Who appended a batch, and which sequence numbers its records carry:
    `first_sequence .. first_sequence + record_count - 1`. Kept in the log, so a
    partition can rebuild its producer table after a restart."""

    producer_id: int
    first_sequence: int
    record_count: int

    def encode(self) -> bytes:
        """The header value: u64 producer_id | u64 first_sequence | u32 record_count."""
        try:
            return _STAMP.pack(self.producer_id, self.first_sequence, self.record_count)
        except struct.error:
            raise WireUsageError(f"producer stamp out of range: {self}") from None

    @classmethod
    def decode(cls, value: bytes) -> ProducerStamp:
        """The stamp in a header value; `CorruptRecord` if it is not one."""
        if len(value) != _STAMP.size:
            raise CorruptRecord(
                f"the {PRODUCER_HEADER} header has {len(value)} bytes, not {_STAMP.size}"
            )
        return cls(*_STAMP.unpack(value))


STAMP_ONLY_PREFIX: Final = (
    bytes((HAS_HEADERS,))
    + _U32.pack(2 + len(_STAMP_NAME) + 2 + _STAMP.size)
    + b"\x81"  # msgpack fixmap of one entry
    + bytes((0xA0 | len(_STAMP_NAME),))  # fixstr
    + _STAMP_NAME
    + bytes((0xC4, _STAMP.size))  # bin 8
)
"""How a blob whose only header is the producer stamp begins (what every
idempotent batch of bare values puts first): the stamp follows, then the value
at `STAMP_ONLY_VALUE_START`. Such blobs are told apart from others, and decoded,
without msgpack."""
STAMP_ONLY_VALUE_START: Final = len(STAMP_ONLY_PREFIX) + _STAMP.size


def is_stamp_only(blob: Buffer) -> bool:
    """Whether `blob` is a value whose only header is a producer stamp (then
    it decodes: its layout is fixed by `STAMP_ONLY_PREFIX`)."""
    return len(blob) >= STAMP_ONLY_VALUE_START and blob[: len(STAMP_ONLY_PREFIX)] == (
        STAMP_ONLY_PREFIX
    )


def add_header(blob: bytes, name: str, value: bytes) -> bytes:
    """`blob` with one more header, appended to its headers' msgpack map as it
    is: entries with repeated names (which Kafka records may carry) stay, in
    order. The blob must decode (`decode_record`); `CorruptRecord` otherwise."""
    attrs = blob[0]
    at = 1
    if attrs & HAS_KEY:
        at += 4 + _U32.unpack_from(blob, at)[0]
    entry = msgpack.packb(name) + msgpack.packb(value, use_bin_type=True)
    if not attrs & HAS_HEADERS:
        packed = b"\x81" + entry
        return b"".join(
            (bytes((attrs | HAS_HEADERS,)), blob[1:at], _U32.pack(len(packed)), packed, blob[at:])
        )
    (size,) = _U32.unpack_from(blob, at)
    start, end = at + 4, at + 4 + size
    kind = blob[start]
    if kind & 0xF0 == 0x80:
        count, body = kind & 0x0F, start + 1
    elif kind == 0xDE:
        count, body = struct.unpack_from(">H", blob, start + 1)[0], start + 3
    elif kind == 0xDF:
        count, body = _U32.unpack_from(blob, start + 1)[0], start + 5
    else:
        raise CorruptRecord("record headers are not a msgpack map")
    count += 1
    if count < 16:
        head = bytes((0x80 | count,))
    elif count < 1 << 16:
        head = struct.pack(">BH", 0xDE, count)
    else:
        head = struct.pack(">BI", 0xDF, count)
    packed = b"".join((head, blob[body:end], entry))
    return b"".join((blob[:at], _U32.pack(len(packed)), packed, blob[end:]))


def stamp_only_record(value: Buffer, stamp: ProducerStamp) -> bytes:
    """The blob of a bare `value` stamped with `stamp`: the same bytes as
    `encode_record(value, None, {PRODUCER_HEADER: stamp.encode()})`."""
    return b"".join((STAMP_ONLY_PREFIX, stamp.encode(), value))


def producer_stamp(blob: Buffer) -> ProducerStamp | None:
    """The stamp a record blob carries, or None; `CorruptRecord` on a bad blob.
    Cheap for records without headers (one byte is looked at) and for bare
    values with only a stamp (no msgpack)."""
    if not blob or not blob[0] & HAS_HEADERS:
        return None
    if is_stamp_only(blob):
        return ProducerStamp._make(_STAMP.unpack_from(blob, len(STAMP_ONLY_PREFIX)))
    _, _, headers = decode_record(blob)
    value = None if headers is None else headers.get(PRODUCER_HEADER)
    return None if value is None else ProducerStamp.decode(value)


def decode_user_record(blob: Buffer) -> Decoded:
    """`decode_record` as a consumer sees it: without the producer stamp, which
    is laminar's own bookkeeping (the name is reserved: no produce can carry it
    as data). Headers that held only the stamp decode as None."""
    if is_stamp_only(blob):
        return bytes(blob[STAMP_ONLY_VALUE_START:]), None, None
    value, key, headers = decode_record(blob)
    if headers is not None and PRODUCER_HEADER in headers:
        del headers[PRODUCER_HEADER]
        return value, key, headers or None
    return value, key, headers


# --- batches ------------------------------------------------------------------------


class FetchedRecord(NamedTuple):
    """One record of a fetch response: its log index, append time and blob.

    A NamedTuple because a consumer builds one per record; like the log's
    `Record`, its `index` field hides `tuple.index` on purpose."""

    index: int  # type: ignore[assignment]
    timestamp_ms: int
    blob: bytes

    def decode(self) -> Decoded:
        """`(value, key, headers)` of this record."""
        return decode_record(self.blob)


def encode_produce_batch(blobs: Sequence[Buffer]) -> list[Buffer]:
    """Produce payload buffers: [count + length table, *blobs] (blobs not copied)."""
    try:
        lengths = array(_U32_CODE, [len(blobs)])
        lengths.extend(len(b) for b in blobs)
    except OverflowError:
        raise WireUsageError("a produce batch blob is larger than 4 GiB") from None
    if _SWAP:
        lengths.byteswap()
    out: list[Buffer] = [lengths.tobytes()]
    out.extend(blobs)
    return out


def decode_produce_batch(
    payload: bytes, *, check: bool = True, stamp_first: bool = False
) -> tuple[bytes, ...]:
    """The blobs of a produce payload. With `check`, every blob must decode as a
    record (`CorruptRecord` otherwise), so nothing undecodable reaches the log,
    and no blob may carry the reserved `PRODUCER_HEADER` except the first when
    `stamp_first` (an idempotent produce): a stamp in the log is trusted when a
    partition rebuilds its producer table, so only the node's checked ones may
    be there (`InvalidMessage` otherwise)."""
    count = _count(payload)
    table_end = 4 + 4 * count
    if table_end > len(payload):
        raise InvalidMessage(f"produce batch of {count} records is longer than its payload")
    lengths = array(_U32_CODE)
    lengths.frombytes(payload[4:table_end])
    if _SWAP:
        lengths.byteswap()
    if table_end + sum(lengths) != len(payload):
        raise InvalidMessage(
            f"produce batch lengths add up to {sum(lengths)} bytes but "
            f"{len(payload) - table_end} follow the table"
        )
    blobs = []
    pos = table_end
    for size in lengths:
        end = pos + size
        blobs.append(payload[pos:end])
        pos = end
    if check:
        for blob in blobs:
            if not blob or blob[0]:
                check_record(blob)
                if blob[0] & HAS_HEADERS and _STAMP_NAME in blob:
                    _refuse_stamp(blob, stamp_first and blob is blobs[0])
    return tuple(blobs)


def check_header_types(headers: Mapping[str, bytes | None], *, nullable: bool = False) -> None:
    """Header names are str, values bytes (or None where `nullable`: a record
    from the Kafka door being re-encoded; laminar's produce API takes bytes)."""
    for name, hv in headers.items():
        if type(name) is not str or not (
            isinstance(hv, bytes | bytearray) or (nullable and hv is None)
        ):
            raise WireUsageError(
                f"record headers map str to bytes; got {name!r}: {type(hv).__name__}"
            )


def check_parallel(
    values: Sequence[object],
    keys: Sequence[bytes | None] | None,
    headers: Sequence[Mapping[str, bytes] | None] | None,
) -> None:
    """Keys and header maps, when given, one per value."""
    if keys is not None and len(keys) != len(values):
        raise WireUsageError(f"{len(keys)} keys for {len(values)} values")
    if headers is not None and len(headers) != len(values):
        raise WireUsageError(f"{len(headers)} header maps for {len(values)} values")


def check_records(
    values: Sequence[Buffer],
    keys: Sequence[bytes | None] | None = None,
    headers: Sequence[Mapping[str, bytes] | None] | None = None,
) -> None:
    """Refuse (`WireUsageError`) what a produce could not carry, before it is
    merged with other calls' records (`laminar.client.producer`): there, one
    call's mistake would fail the others' too."""
    if not values:
        raise WireUsageError("produce needs at least one value")
    check_parallel(values, keys, headers)
    for value in values:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise WireUsageError(f"record values are bytes, not {type(value).__name__}")
    for key in keys or ():
        if key is not None and not isinstance(key, bytes | bytearray):
            raise WireUsageError(f"record keys are bytes or None, not {type(key).__name__}")
    for names in headers or ():
        check_header_types(names or {})
        for name in names or ():
            if name == PRODUCER_HEADER:
                raise WireUsageError(
                    f"the record header {PRODUCER_HEADER!r} is reserved for the client's "
                    "idempotent produce"
                )


def _refuse_stamp(blob: bytes, allowed: bool) -> None:
    if not allowed and producer_stamp(blob) is not None:
        raise InvalidMessage(
            f"the record header {PRODUCER_HEADER!r} is reserved: only the first record "
            "of an idempotent produce (producer_id and sequence set) carries it"
        )


def encode_fetch_batch(records: Iterable[tuple[int, int, Buffer]]) -> list[Buffer]:
    """Fetch payload buffers from `(index, timestamp_ms, blob)` triples:
    [count + entry table, *blobs] (blobs not copied)."""
    pack = _FETCH_ENTRY.pack
    table = [b""]
    blobs: list[Buffer] = []
    for index, timestamp_ms, blob in records:
        table.append(pack(index, timestamp_ms, len(blob)))
        blobs.append(blob)
    table[0] = _U32.pack(len(blobs))
    out: list[Buffer] = [b"".join(table)]
    out.extend(blobs)
    return out


def encode_fetch_columns(
    first_index: int, timestamps_ms: Sequence[int], lengths: Sequence[int], blobs: Buffer
) -> list[Buffer]:
    """`encode_fetch_batch` for consecutive records given in columns, their blobs
    back to back in one buffer (a log's `RecordBatch`): the entry table is built
    by `pack_fetch_columns` and the blobs go out as they are, uncopied."""
    return [pack_fetch_columns(first_index, timestamps_ms, lengths), blobs]


# The fetch table moves as columns. An entry is 20 bytes: five big-endian u32
# words (index high, index low, timestamp high, timestamp low, length), so a
# whole column is one strided copy of 4-byte words between the table and an
# array (unpacking), or one C loop (packing, `laminar._native`), and a table of
# any size costs a handful of C calls and no Python int per record.
_Q: Final = "Q"


def pack_fetch_columns(
    first_index: int, timestamps_ms: Sequence[int], lengths: Sequence[int]
) -> bytearray:
    """A fetch batch's count and entry table for records `first_index ...` with
    these timestamps and blob lengths (arrays of the right type are used as
    they are; other sequences are copied into arrays first, in C)."""
    count = len(lengths)
    stamps = timestamps_ms if _is_array(timestamps_ms, _Q) else array(_Q, timestamps_ms)
    sizes = lengths if _is_array(lengths, _U32_CODE) else array(_U32_CODE, lengths)
    if len(stamps) != count:
        raise WireUsageError(f"{len(stamps)} timestamps for {count} records")
    table = bytearray(4 + _FETCH_ENTRY.size * count)
    _native.laminar_fetch_table(
        first_index,
        _ffi.from_buffer("uint64_t[]", stamps),
        _ffi.from_buffer("uint32_t[]", sizes),
        count,
        _ffi.from_buffer(table),
    )
    return table


def _is_array(column: Sequence[int], typecode: str) -> bool:
    return isinstance(column, array) and column.typecode == typecode


class LocatedRecords(NamedTuple):
    """Where the records of a fetch answer are (`locate_fetch_records`): each
    blob is `payload[starts[k]:ends[k]]`, its value `payload[value_starts[k]:
    ends[k]]`; `simple` when every blob is a bare value, perhaps stamped
    (nothing but the value to show). A null value's slice is empty (such a
    record is not simple: decoding it tells null from empty)."""

    indexes: array[int]
    timestamps_ms: array[int]
    starts: array[int]
    ends: array[int]
    value_starts: array[int]
    simple: bool


_LOCATE_ERRORS: Final = {
    -1: "the record lengths do not add up to the payload",
    -2: "a record blob is empty (it must start with its attrs byte)",
    -3: "a record's attrs byte has unknown bits",
    -4: "a record ends inside a key or headers length",
    -5: "a record's key or headers run past the record's end",
}


def locate_fetch_records(payload: Buffer) -> LocatedRecords:
    """The records of a fetch answer's payload, located and checked in one C
    loop (no Python per record): the table's columns, and where each blob and
    value starts and ends. `InvalidMessage` if the layout does not add up,
    `CorruptRecord` if a blob does not follow the record encoding."""
    count = _count(payload)
    if 4 + _FETCH_ENTRY.size * count > len(payload):
        raise InvalidMessage(f"{count} records do not fit a payload of {len(payload)} bytes")
    zero = array(_Q, [0])
    located = LocatedRecords(
        zero * count, zero * count, zero * count, zero * count, zero * count, False
    )
    at = _ffi.new("size_t *")
    with memoryview(payload) as view:
        status = _native.laminar_locate(
            _ffi.from_buffer(view),
            len(view),
            count,
            STAMP_ONLY_PREFIX,
            len(STAMP_ONLY_PREFIX),
            STAMP_ONLY_VALUE_START,
            *(_ffi.from_buffer("uint64_t[]", column) for column in located[:5]),
            at,
        )
    if status == -1:
        raise InvalidMessage(_LOCATE_ERRORS[-1])
    if status < 0:
        raise CorruptRecord(f"record {at[0]} of the batch: {_LOCATE_ERRORS[status]}")
    return located._replace(simple=status == 0)


def decode_fetch_batch(payload: bytes) -> tuple[FetchedRecord, ...]:
    """The records of a fetch payload, in the order sent (ascending index)."""
    count = _count(payload)
    table_end = 4 + _FETCH_ENTRY.size * count
    if table_end > len(payload):
        raise InvalidMessage(f"fetch batch of {count} records is longer than its payload")
    records = []
    pos = table_end
    for index, timestamp_ms, size in _FETCH_ENTRY.iter_unpack(payload[4:table_end]):
        end = pos + size
        # tuple.__new__ skips the NamedTuple's Python-level __new__: a third faster here.
        records.append(_new_tuple(FetchedRecord, (index, timestamp_ms, payload[pos:end])))
        pos = end
    if pos != len(payload):
        raise InvalidMessage(
            f"fetch batch lengths add up to {pos - table_end} bytes but "
            f"{len(payload) - table_end} follow the table"
        )
    return tuple(records)


def _count(payload: Buffer) -> int:
    if len(payload) < 4:
        raise InvalidMessage(f"record batch payload of {len(payload)} bytes has no count")
    count: int = _U32.unpack_from(payload)[0]
    return count

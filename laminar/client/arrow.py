"""Fetch answers to Arrow record batches, in bulk (`RecordBatch.to_arrow`, Spark).

Needs pyarrow and numpy (the `spark` extra); nothing else in the client does.

A fetch answer's payload (`laminar.wire.records`) is a table of (index,
timestamp_ms, blob length) entries followed by the record blobs back to back;
a blob is an attrs byte, an optional length-prefixed key, optional
length-prefixed msgpack headers, then the value. Spark's Arrow path wants
each column as one buffer, so instead of building a Python object per
record, this module computes every record's key and value boundaries with
numpy and gathers the bytes of all values (and of all keys) in one masked
copy each. Only headers (a msgpack map per record that has them) are decoded
one by one. This is what lets a Spark read pass a million rows a second.

Every length is checked against the blob it claims to lie in; a payload that
does not add up raises `CorruptFetchError` rather than yield wrong rows.
"""

from __future__ import annotations

from typing import Final

import msgpack
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from laminar._native import ffi as _ffi  # the C loops (laminar/native_build.py)
from laminar._native import lib as _native
from laminar.wire import PRODUCER_HEADER
from laminar.wire.records import STAMP_ONLY_PREFIX, STAMP_ONLY_VALUE_START
from laminar.wire.writes import WRITE_HEADER

_ENTRY: Final = np.dtype([("index", ">u8"), ("timestamp_ms", ">u8"), ("length", ">u4")])
_HAS_KEY: Final = 0x01
_HAS_HEADERS: Final = 0x02
_NULL_VALUE: Final = 0x04
_TIMESTAMP: Final = pa.timestamp("us", tz="UTC")
_SYSTEM_HEADERS: Final = frozenset({PRODUCER_HEADER, WRITE_HEADER})
"""Stamps laminar puts on records (idempotent producers, atomic writes): not data."""
_STAMP_MAP_AT: Final = 5
"""Where a stamp-only blob's headers map begins (after attrs and its length)."""
_STAMP_MAP: Final = np.frombuffer(STAMP_ONLY_PREFIX[_STAMP_MAP_AT:], np.uint8)

HEADERS_TYPE: Final = pa.map_(pa.string(), pa.binary())
ARROW_SCHEMA: Final = pa.schema(
    [
        ("partition", pa.int32()),
        ("index", pa.int64()),
        ("timestamp", _TIMESTAMP),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADERS_TYPE),
    ]
)
"""The columns of a converted fetch answer (also the Spark source's read schema)."""

Ints = npt.NDArray[np.int64]
Bytes = npt.NDArray[np.uint8]


class CorruptFetchError(ValueError):
    """A fetch answer's lengths or record layout do not add up."""


def fetch_to_arrow(payload: bytes, partition: int, end: int) -> pa.RecordBatch:
    """The records of a fetch answer's payload with index below `end`, as a
    RecordBatch of the read schema (`laminar.spark.schema`)."""
    if len(payload) < 4:
        raise CorruptFetchError(f"a fetch payload of {len(payload)} bytes has no count")
    count = int.from_bytes(payload[:4], "big")
    table_end = 4 + _ENTRY.itemsize * count
    if table_end > len(payload):
        raise CorruptFetchError(f"{count} records do not fit a payload of {len(payload)} bytes")
    entries = np.frombuffer(payload, _ENTRY, count, 4)
    all_lengths = entries["length"].astype(np.int64)
    if table_end + int(all_lengths.sum()) != len(payload):
        raise CorruptFetchError("the record lengths do not add up to the payload's size")
    indexes = entries["index"].astype(np.int64)
    n = int(np.searchsorted(indexes, end))
    lengths = all_lengths[:n]
    if n and int(lengths.min()) < 1:
        raise CorruptFetchError("a record blob is empty (it must start with its attrs byte)")
    starts = np.empty(n, np.int64)
    if n:
        starts[0] = table_end
        np.cumsum(lengths[:-1], out=starts[1:])
        starts[1:] += table_end
    ends = starts + lengths
    buf = np.frombuffer(payload, np.uint8)
    attrs = buf[starts]
    if not attrs.any():  # no keys, no headers: the common case
        value = _gather(buf, starts + 1, ends)
        key = pa.nulls(n, pa.binary())
        headers = pa.nulls(n, HEADERS_TYPE)
    else:
        key, value, headers = _decode_sections(payload, buf, attrs, starts, ends)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(np.full(n, partition, np.int32)),
            pa.array(indexes[:n]),
            pa.array(entries["timestamp_ms"][:n].astype(np.int64) * 1000, type=_TIMESTAMP),
            key,
            value,
            headers,
        ],
        schema=ARROW_SCHEMA,
    )


def _decode_sections(
    payload: bytes,
    buf: Bytes,
    attrs: npt.NDArray[np.uint8],
    starts: Ints,
    ends: Ints,
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Keys, values and headers of blobs that may have keys, headers and
    null values (Kafka tombstones: null in the value column)."""
    if (attrs & ~np.uint8(_HAS_KEY | _HAS_HEADERS | _NULL_VALUE)).any():
        raise CorruptFetchError("a record's attrs byte has unknown bits")
    has_key = (attrs & _HAS_KEY).astype(bool)
    has_headers = (attrs & _HAS_HEADERS).astype(bool)
    pos = starts + 1
    key_start, key_end = _section(buf, pos, ends, has_key, "key")
    pos = np.where(has_key, key_end, pos)
    headers_start, headers_end = _section(buf, pos, ends, has_headers, "headers")
    pos = np.where(has_headers, headers_end, pos)
    has_value = ~(attrs & _NULL_VALUE).astype(bool)
    if (~has_value & (pos != ends)).any():
        raise CorruptFetchError("a record with a null value has value bytes")
    key = _gather(buf, key_start, key_end, has_key)
    value = _gather(buf, pos, ends, has_value)
    headers_list: list[list[tuple[str, bytes | None]] | None] = [None] * len(starts)
    shown = has_headers & ~_stamp_only(buf, headers_start, headers_end)
    for i in np.flatnonzero(shown).tolist():
        headers_list[i] = _headers(payload[int(headers_start[i]) : int(headers_end[i])])
    return key, value, pa.array(headers_list, type=HEADERS_TYPE)


def _stamp_only(buf: Bytes, headers_start: Ints, headers_end: Ints) -> npt.NDArray[np.bool_]:
    """Which records' headers are the producer stamp alone (nothing to show),
    told in bulk: the map up to the stamp's 20 bytes is the same every time."""
    size = STAMP_ONLY_VALUE_START - _STAMP_MAP_AT
    candidate: npt.NDArray[np.bool_] = headers_end - headers_start == size
    if not candidate.any():
        return candidate
    at = np.where(candidate, headers_start, 0)[:, None] + np.arange(len(_STAMP_MAP))
    matches: npt.NDArray[np.bool_] = (buf[at] == _STAMP_MAP).all(axis=1)
    return candidate & matches


def _section(
    buf: Bytes, pos: Ints, ends: Ints, present: npt.NDArray[np.bool_], what: str
) -> tuple[Ints, Ints]:
    """`(start, end)` of a u32-length-prefixed section at `pos` where `present`
    (elsewhere an empty section at `pos`)."""
    if not present.any():
        return pos, pos
    if (present & (pos + 4 > ends)).any():
        raise CorruptFetchError(f"a record ends inside its {what} length")
    at = np.where(present, pos, 0)
    size = (
        (buf[at].astype(np.int64) << 24)
        | (buf[at + 1].astype(np.int64) << 16)
        | (buf[at + 2].astype(np.int64) << 8)
        | buf[at + 3].astype(np.int64)
    )
    start = np.where(present, pos + 4, pos)
    end = np.where(present, start + size, pos)
    if (end > ends).any():
        raise CorruptFetchError(f"a record's {what} runs past the record's end")
    return start, end


def _gather(
    buf: Bytes,
    starts: Ints,
    ends: Ints,
    valid: npt.NDArray[np.bool_] | None = None,
) -> pa.Array:
    """A BinaryArray of `buf[starts[i]:ends[i]]`: one C loop of copies
    (`laminar_gather`; a numpy mask over the region cost 11x more)."""
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    lengths = ends - starts
    if int(lengths.min()) < 0 or int(starts.min()) < 0 or int(ends.max()) > len(buf):
        raise CorruptFetchError("a record's section lies outside the fetch answer")
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise CorruptFetchError("a fetch answer holds over 2 GiB of one column")
    data = np.empty(int(offsets[-1]), np.uint8)
    starts = np.ascontiguousarray(starts, np.int64)
    ends = np.ascontiguousarray(ends, np.int64)
    _native.laminar_gather(
        _ffi.from_buffer(buf),
        _ffi.from_buffer("int64_t[]", starts),
        _ffi.from_buffer("int64_t[]", ends),
        n,
        _ffi.from_buffer(data),
    )
    validity = None
    null_count = 0
    if valid is not None and not valid.all():
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        null_count = int(n - valid.sum())
    return pa.Array.from_buffers(
        pa.binary(),
        n,
        [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
        null_count,
    )


def _headers(packed: bytes) -> list[tuple[str, bytes | None]] | None:
    """A record's headers without the system's producer stamp; None if empty
    (a header value is None where a Kafka client wrote a null one)."""
    try:
        headers = msgpack.unpackb(packed)
    except Exception as exc:  # any failure to decode is the record's fault
        raise CorruptFetchError(f"record headers do not decode: {type(exc).__name__}") from None
    if type(headers) is not dict:
        raise CorruptFetchError("record headers must be a msgpack map of str to bin")
    items = []
    for name, value in headers.items():
        if type(name) is not str or not (type(value) is bytes or value is None):
            raise CorruptFetchError("record headers must be a msgpack map of str to bin or nil")
        if name not in _SYSTEM_HEADERS:
            items.append((name, value))
    return items or None

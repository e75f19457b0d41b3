"""Fetch answers decoded into Arrow in bulk agree with the wire's own decoder."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow", reason="pyarrow is not installed (the spark extra)")

from hypothesis import given
from hypothesis import strategies as st

from laminar.client.arrow import ARROW_SCHEMA, CorruptFetchError, fetch_to_arrow
from laminar.wire import PRODUCER_HEADER, ProducerStamp, decode_record, encode_record
from laminar.wire.records import encode_fetch_batch

headers = st.none() | st.dictionaries(
    st.sampled_from(["a", "b", "ü"]), st.none() | st.binary(max_size=6)
)
records = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=40),  # None: a null value, null in the column
        st.none() | st.binary(max_size=8),
        headers,
        st.booleans(),
    ),
    max_size=40,
)


def _payload(blobs: list[bytes], first: int) -> bytes:
    entries = ((first + i, 1_700_000_000_000 + i, b) for i, b in enumerate(blobs))
    return b"".join(bytes(b) for b in encode_fetch_batch(entries))


@given(records, st.integers(0, 2**40), st.integers(0, 45))
def test_bulk_decoding_matches_the_wire(
    recs: list[tuple[bytes | None, bytes | None, dict[str, bytes | None] | None, bool]],
    first: int,
    cut: int,
) -> None:
    blobs = []
    for value, key, hdrs, stamped in recs:
        if stamped:
            hdrs = {**(hdrs or {}), PRODUCER_HEADER: ProducerStamp(1, 2, 3).encode()}
        blobs.append(encode_record(value, key, hdrs))
    batch = fetch_to_arrow(_payload(blobs, first), 4, first + cut)
    assert batch.schema == ARROW_SCHEMA
    rows = batch.to_pylist()
    assert len(rows) == min(cut, len(blobs))
    for i, row in enumerate(rows):
        value, key, hdrs = decode_record(blobs[i])
        shown = {k: v for k, v in (hdrs or {}).items() if k != PRODUCER_HEADER}
        assert (row["partition"], row["index"]) == (4, first + i)
        assert round(row["timestamp"].timestamp() * 1000) == 1_700_000_000_000 + i
        assert (row["value"], row["key"]) == (value, key)
        assert (dict(row["headers"]) if row["headers"] else None) == (shown or None)


@pytest.mark.parametrize(
    ("blob", "match"),
    [
        (b"", "empty"),
        (b"\x08abc", "unknown bits"),
        (b"\x01\x00\x00", "inside its key length"),
        (b"\x01\x00\x00\x00\x09ab", "key runs past"),
        (b"\x02\x00\x00\x00\x01\xc1", "do not decode"),
        (b"\x04v", "null value has value bytes"),
    ],
)
def test_corrupt_records_are_refused(blob: bytes, match: str) -> None:
    good = encode_record(b"fine", b"k")
    with pytest.raises(CorruptFetchError, match=match):
        fetch_to_arrow(_payload([good, blob], 0), 0, 10)


def test_lengths_that_do_not_add_up_are_refused() -> None:
    payload = _payload([b"\x00abc"], 0)
    with pytest.raises(CorruptFetchError, match="add up"):
        fetch_to_arrow(payload + b"x", 0, 10)
    with pytest.raises(CorruptFetchError, match="do not fit"):
        fetch_to_arrow(payload[:10], 0, 10)


def test_a_header_map_shaped_like_a_lone_stamp_is_shown() -> None:
    """Stamp-only headers are told apart in bulk by their bytes, not their size:
    a user's header map of the same 40 bytes is data."""
    lookalike = {"x" * 16: b"y" * 20}
    stamp = {PRODUCER_HEADER: ProducerStamp(1, 2, 3).encode()}
    blobs = [encode_record(b"v", None, lookalike), encode_record(b"w", None, stamp)]
    rows = fetch_to_arrow(_payload(blobs, 0), 0, 2).to_pylist()
    assert [dict(r["headers"]) if r["headers"] else None for r in rows] == [lookalike, None]


def test_the_gather_refuses_slices_outside_the_answer() -> None:
    """The copies run in C: a slice past the buffer, before it or reversed
    must be refused before any byte is copied, never read out of bounds."""
    import numpy as np

    from laminar.client.arrow import _gather

    buf = np.frombuffer(b"0123456789", np.uint8)
    ok = _gather(buf, np.array([0, 4], np.int64), np.array([2, 10], np.int64))
    assert ok.to_pylist() == [b"01", b"456789"]
    for starts, ends in (([0, 8], [2, 11]), ([-1], [2]), ([5], [3])):
        with pytest.raises(CorruptFetchError, match="outside"):
            _gather(buf, np.array(starts, np.int64), np.array(ends, np.int64))

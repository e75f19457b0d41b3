"""Staging files: frames round-trip, and a scan keeps exactly the valid prefix."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from laminar.wire.writes import StagedPart
from laminar.writes import frames as fr

KEY = fr.AttemptKey(7, 3, 0xABC)


def _file(batches: list[list[bytes]]) -> bytes:
    buffers = fr.attempt_header(42, KEY, 1500)
    for seq, blobs in enumerate(batches):
        buffers += fr.batch_frame(seq, blobs)
    return b"".join(buffers)


blob_lists = st.lists(
    st.lists(st.binary(max_size=40).map(lambda v: b"\x00" + v), min_size=1, max_size=5),
    max_size=6,
)


@given(blob_lists)
def test_an_attempt_file_reads_back(batches: list[list[bytes]]) -> None:
    data = _file(batches)
    frames, end = fr.scan(data)
    assert end == len(data)
    header = fr.read_attempt_header(frames[0])
    assert header == fr.AttemptHeader(42, KEY, 1500)
    for seq, (f, blobs) in enumerate(zip(frames[1:], batches, strict=True)):
        assert fr.read_batch_head(f) == (seq, len(blobs))
        assert fr.read_batch_blobs(data[f.offset : f.offset + f.length]) == (seq, tuple(blobs))


@given(blob_lists, st.data())
def test_a_torn_or_damaged_tail_is_cut_at_the_last_whole_frame(
    batches: list[list[bytes]], data: st.DataObject
) -> None:
    whole = _file(batches)
    frames, _ = fr.scan(whole)
    cut = data.draw(st.integers(0, len(whole)))
    damaged = bytearray(whole[:cut])
    if cut and data.draw(st.booleans()):  # flip a byte instead of (only) tearing
        pos = data.draw(st.integers(0, cut - 1))
        damaged[pos] ^= 0x5A
    kept, end = fr.scan(bytes(damaged))
    # Every kept frame is one of the original frames, in order, none after damage.
    assert kept == frames[: len(kept)]
    assert end == (kept[-1].offset + kept[-1].length if kept else 0)
    first_bad = next((f for f in frames if f.offset + f.length > cut), None)
    if first_bad is not None:
        assert all(f.offset < first_bad.offset for f in kept)


def test_commit_file_frames() -> None:
    parts = (StagedPart(42, 7, 3, 0xABC, 2, 10), StagedPart(42, 7, 4, 0xDEF, 1, 1))
    data = b"".join(
        fr.commit_header(42, 99)
        + fr.claim_frame(parts)
        + fr.intent_frame(fr.Intent(1000, (2, 1)))
        + fr.published_frame(1000, 11)
    )
    frames, end = fr.scan(data)
    assert end == len(data)
    assert fr.read_commit_header(frames[0]) == (42, 99)
    assert fr.read_claim(frames[1]) == parts
    assert fr.read_intent(frames[2]) == fr.Intent(1000, (2, 1))
    assert fr.read_published(frames[3]) == (1000, 11)

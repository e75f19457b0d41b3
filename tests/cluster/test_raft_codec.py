"""The Raft batch codec: round trips, and hostile payloads refused whole."""

from __future__ import annotations

import contextlib
import random

import msgpack
import pytest

from laminar.raft import Entry, Message
from laminar.raft.messages import MESSAGE_KINDS
from laminar.replication.codec import RaftCodecError, decode_batch, encode_batch

LIMIT = 1 << 20


def _messages(rng: random.Random) -> list[tuple[int, Message]]:
    out = []
    for kind in sorted(MESSAGE_KINDS):
        index = rng.randrange(0, 1000)
        entries = tuple(
            Entry(
                index + 1 + i,
                rng.randrange(1, 9),
                rng.randbytes(rng.randrange(0, 40)),
                rng.choice(("normal", "noop", "config")),
            )
            for i in range(rng.randrange(0, 4))
        )
        msg = Message(
            kind,
            "n1",
            "n2",
            rng.randrange(1, 99),
            index,
            rng.randrange(0, 99),
            entries,
            rng.randrange(0, 999),
            rng.random() < 0.5,
            rng.randrange(0, 9),
            rng.randrange(0, 9),
            rng.random() < 0.5,
            rng.randbytes(3),
            rng.random() < 0.5,
        )
        out.append((rng.randrange(0, 1 << 64), msg))
    return out


def test_every_kind_round_trips() -> None:
    rng = random.Random(3)
    for _ in range(50):
        batch = _messages(rng)
        assert decode_batch(encode_batch(batch), LIMIT) == batch


def test_entries_must_follow_the_message_index() -> None:
    bad = Message("append", "a", "b", 1, 5, 1, (Entry(7, 1, b""),))
    with pytest.raises(ValueError):
        encode_batch([(1, bad)])


@pytest.mark.parametrize(
    "rows",
    [
        {"a": 1},
        [[1, 0, "a", "b", 1, 0, 0, 0, 0, 0, 0, b""]],  # 12 fields
        [[1, 99, "a", "b", 1, 0, 0, 0, 0, 0, 0, b"", []]],  # unknown kind
        [[1, 0, "", "b", 1, 0, 0, 0, 0, 0, 0, b"", []]],  # empty src
        [[1, 0, "a", "b", -1, 0, 0, 0, 0, 0, 0, b"", []]],  # negative term
        [[-1, 0, "a", "b", 1, 0, 0, 0, 0, 0, 0, b"", []]],  # pid not a u64
        [[1, 0, "a", "b", 1, 0, 0, 0, 0, 0, 0, "str", []]],  # data not bytes
        [[1, 0, "a", "b", 1, 0, 0, 0, 0, 0, 0, b"", [[1, 0]]]],  # short entry
        [[1, 0, "a", "b", 1, 0, 0, 0, 0, 0, 0, b"", [[1, 42, b""]]]],  # entry kind
        [[1, 0, "a" * 100, "b", 1, 0, 0, 0, 0, 0, 0, b"", []]],  # long node id
    ],
)
def test_malformed_batches_are_refused(rows: object) -> None:
    with pytest.raises(RaftCodecError):
        decode_batch(msgpack.packb(rows, use_bin_type=True), LIMIT)


def test_garbage_and_oversized_payloads_are_refused() -> None:
    rng = random.Random(5)
    for _ in range(300):
        with contextlib.suppress(RaftCodecError):  # anything else escaping fails the test
            decode_batch(rng.randbytes(rng.randrange(0, 200)), LIMIT)
    with pytest.raises(RaftCodecError, match="exceeds"):
        decode_batch(b"\x90" * 100, 50)

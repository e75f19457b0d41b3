"""Reading a partition whole, and the identity checks every matrix check ends with."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable

from laminar.client import Client, OffsetOutOfRangeError, Record

_names = itertools.count()


def topic_name(check: str) -> str:
    """A topic no other check of the session uses."""
    return f"{check}-{next(_names)}"


def read_records(client: Client, topic: str, partition: int) -> list[Record]:
    """Every record of the partition now, read with `fetch_batch` and its
    `next_index` (indexes may have gaps)."""
    out: list[Record] = []
    lowest, end = client.offsets(topic, partition)
    index = lowest
    while index < end:
        try:
            batch = client.fetch_batch(topic, partition, index)
        except OffsetOutOfRangeError:
            lowest = client.offsets(topic, partition).lowest
            if index >= lowest:
                raise
            out, index = [], lowest  # retention passed the read: read what stays
            continue
        out += batch
        assert batch.next_index > index, f"{topic}/{partition}: no way forward from {index}"
        index = batch.next_index
    return out


def read_partition(client: Client, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """`read_records` as (index, value) pairs."""
    return [(r.index, r.value) for r in read_records(client, topic, partition)]


def check_once(
    read: list[tuple[int, bytes]],
    acked: dict[bytes, int | None],
    unknown: Iterable[bytes] = (),
) -> None:
    """Every acknowledged value is in `read` exactly once (at its acknowledged
    index, when known); nothing else is there but values whose produce had an
    unknown outcome, each at most once; indexes increase."""
    counts = Counter(value for _, value in read)
    twice = [value for value, n in counts.items() if n > 1]
    assert not twice, f"read more than once: {twice[:5]}"
    where = {value: index for index, value in read}
    missing = [value for value in acked if value not in where]
    assert not missing, f"acknowledged but not read: {missing[:5]}"
    moved = [(v, i, where[v]) for v, i in acked.items() if i is not None and where[v] != i]
    assert not moved, f"read at another index than acknowledged: {moved[:5]}"
    strangers = set(where) - set(acked) - set(unknown)
    assert not strangers, f"read but never produced: {sorted(strangers)[:5]}"
    indexes = [index for index, _ in read]
    assert indexes == sorted(set(indexes)), "indexes do not increase"

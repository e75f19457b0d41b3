"""The record type the log hands out."""

from __future__ import annotations

from typing import NamedTuple


class Record(NamedTuple):
    """One record of a log. `index` is its position; `timestamp_ms` is when the log
    appended it (never decreasing along the log); `term` is the Raft term given
    to `append`.

    A NamedTuple because read_range builds hundreds of thousands a second and a
    tuple is the cheapest object CPython makes; its `index` field hides
    `tuple.index`, which nobody needs on a record."""

    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose: speed
    term: int
    timestamp_ms: int
    value: bytes

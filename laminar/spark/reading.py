"""Reading: what the driver learns about a topic, and what a task fetches.

On the driver, `TopicState.fetch` asks the node once for the topic's
partitions and their index ranges (one metadata request and one pipelined
burst of offset requests) and turns the read options into `Range`s. A Spark
task gets a `RangeSplit` and runs `read_split`: its own client fetches the
node's metadata, computes the partition's owning shard with
`laminar.placement.shard_for` and talks to that shard directly, fetching the
range with one request always in flight ahead of the one being decoded, and
yielding one Arrow batch per answer (`RecordBatch.to_arrow`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from laminar.client import Client, LaminarError, Pending, RecordBatch, TopicDescription
from laminar.spark.errors import LaminarSparkError, explain
from laminar.spark.options import ReadOptions
from laminar.spark.plan import Range, check_named_partitions, resolve_index

FETCH_MAX_BYTES: Final = 4 << 20
"""Bytes per fetch answer (the node caps it at half its frame limit)."""
FETCH_MAX_RECORDS: Final = 65536
CONNECT_TIMEOUT_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class TopicState:
    """A topic's partitions and their `[lowest, highest)` index ranges, as the
    driver saw them."""

    topic: str
    partitions: tuple[int, ...]
    lowest: dict[int, int]
    highest: dict[int, int]
    shards: dict[int, int]
    """The shard that owns each partition."""

    @classmethod
    def fetch(cls, client: Client, options: ReadOptions) -> TopicState:
        """Ask the node; `LaminarSparkError` for an unknown topic or partition."""
        try:
            described: TopicDescription = client.describe_topic(options.topic)
        except LaminarError as exc:
            raise explain(exc, options.bootstrap, options.topic) from None
        count = described.topic.partitions
        chosen = options.partitions or tuple(range(count))
        missing = [p for p in chosen if p >= count]
        if missing:
            raise LaminarSparkError(
                f"partitions={list(chosen)}: topic {options.topic!r} has partitions "
                f"0..{count - 1}, not {missing}"
            )
        parts = {d.index: d for d in described.partitions}
        return cls(
            options.topic,
            chosen,
            {p: parts[p].lowest for p in chosen},
            {p: parts[p].highest for p in chosen},
            {p: parts[p].shard_id for p in chosen},
        )

    def starting(self, client: Client, options: ReadOptions, default: str) -> dict[int, int]:
        """Each partition's first index to read, from startingTimestamp or
        startingIndex (`default`: "earliest" for batch, "latest" for streams)."""
        if options.starting_timestamp_ms is not None:
            at = options.starting_timestamp_ms
            try:
                return {p: client.offset_for_timestamp(self.topic, p, at) for p in self.partitions}
            except LaminarError as exc:
                raise explain(exc, options.bootstrap, self.topic) from None
        check_named_partitions(options.starting, self.partitions, "startingIndex")
        return {
            p: resolve_index(
                options.starting,
                "latest" if default == "latest" else "earliest",
                p,
                self.lowest[p],
                self.highest[p],
                "startingIndex",
            )
            for p in self.partitions
        }

    def ending(self, options: ReadOptions) -> dict[int, int]:
        """Each partition's end (exclusive) for a batch read."""
        check_named_partitions(options.ending, self.partitions, "endingIndex")
        return {
            p: resolve_index(
                options.ending, "latest", p, self.lowest[p], self.highest[p], "endingIndex"
            )
            for p in self.partitions
        }


def connect(bootstrap: str, topic: str) -> Client:
    """A client for the driver; `LaminarSparkError` if the node cannot be reached."""
    try:
        return Client(bootstrap, connect_timeout_s=CONNECT_TIMEOUT_S)
    except LaminarError as exc:
        raise explain(exc, bootstrap, topic) from None


def ranges(
    topic: TopicState, start: dict[int, int], end: dict[int, int], what: str = "endingIndex"
) -> list[Range]:
    """The `Range` of every partition; an end before its start is an error."""
    out = []
    for p in topic.partitions:
        if end[p] < start[p]:
            raise LaminarSparkError(
                f"{what} {end[p]} of partition {p} is before its starting index {start[p]}"
            )
        out.append(Range(p, start[p], end[p]))
    return out


class RangeSplit(InputPartition):
    """One Spark task's share of a read: a range of one partition."""

    def __init__(self, bootstrap: str, topic: str, range_: Range) -> None:
        super().__init__((topic, range_.partition, range_.start, range_.end))
        self.bootstrap = bootstrap
        self.topic = topic
        self.range = range_

    def __repr__(self) -> str:
        r = self.range
        return f"RangeSplit({self.topic}/{r.partition} [{r.start}, {r.end}))"


def splits(bootstrap: str, topic: str, pieces: Sequence[Range]) -> list[RangeSplit]:
    return [RangeSplit(bootstrap, topic, r) for r in pieces]


def read_split(split: InputPartition) -> Iterator[pa.RecordBatch]:
    """Fetch a split's records from the owning shard, as Arrow batches. (A plan
    with no split still runs one task, with a bare `InputPartition(None)`.)"""
    if not isinstance(split, RangeSplit):
        if split.value is None:
            return
        raise TypeError(f"not a laminar split: {split!r}")
    r = split.range
    if r.end <= r.start:
        return
    with Client(split.bootstrap, connect_timeout_s=CONNECT_TIMEOUT_S) as client:
        index = r.start
        pending = _fetch(client, split.topic, r.partition, index, r.end)
        while True:
            batch = pending.result()
            if not len(batch):
                raise LaminarSparkError(
                    f"{split.topic}/{r.partition}: no records at index {index} although the "
                    f"read planned up to {r.end} (were they removed meanwhile?)"
                )
            nxt = min(index + len(batch), r.end)
            if nxt < r.end:  # ask for the next answer before converting this one
                pending = _fetch(client, split.topic, r.partition, nxt, r.end)
            index = nxt
            yield batch.to_arrow()
            if index >= r.end:
                return


def _fetch(
    client: Client, topic: str, partition: int, index: int, end: int
) -> Pending[RecordBatch]:
    """A fetch of at most the records before `end`, answered as one batch
    (converted to Arrow in bulk, never a Python object per record)."""
    max_records = min(FETCH_MAX_RECORDS, end - index)
    return client.fetch_batch_nowait(
        topic, partition, index, max_bytes=FETCH_MAX_BYTES, max_records=max_records
    )

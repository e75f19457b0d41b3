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

import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from laminar.client import (
    Client,
    LaminarError,
    OffsetOutOfRangeError,
    Pending,
    RecordBatch,
    TopicDescription,
)
from laminar.spark.errors import LaminarSparkError, explain
from laminar.spark.options import ReadOptions
from laminar.spark.plan import Range, check_named_partitions, resolve_index
from laminar.spark.schema import reshape
from laminar.spark.security import PLAINTEXT, ClientSecurity

logger = logging.getLogger("laminar.spark")

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
        """Each partition's first index to read, from startingTimestamp,
        startingOffsetsByTimestamp or startingIndex (`default`: "earliest" for
        batch, "latest" for streams)."""
        times = dict(options.timestamps_for(self.topic))
        if options.starting_timestamp_ms is not None:
            times = dict.fromkeys(self.partitions, options.starting_timestamp_ms)
        check_named_partitions(times, self.partitions, "startingOffsetsByTimestamp")
        check_named_partitions(options.starting, self.partitions, "startingIndex")
        out = {
            p: resolve_index(
                options.starting,
                "latest" if default == "latest" else "earliest",
                p,
                self.lowest[p],
                self.highest[p],
                "startingIndex",
            )
            for p in self.partitions
            if p not in times
        }
        try:
            out.update({p: client.offset_for_timestamp(self.topic, p, t) for p, t in times.items()})
        except LaminarError as exc:
            raise explain(exc, options.bootstrap, self.topic) from None
        return out

    def ending(self, client: Client, options: ReadOptions) -> dict[int, int]:
        """Each partition's end (exclusive) for a batch read: endingTimestamp, or
        endingIndex."""
        if options.ending_timestamp_ms is not None:
            at = options.ending_timestamp_ms
            try:
                return {p: client.offset_for_timestamp(self.topic, p, at) for p in self.partitions}
            except LaminarError as exc:
                raise explain(exc, options.bootstrap, self.topic) from None
        check_named_partitions(options.ending, self.partitions, "endingIndex")
        return {
            p: resolve_index(
                options.ending, "latest", p, self.lowest[p], self.highest[p], "endingIndex"
            )
            for p in self.partitions
        }


def open_client(bootstrap: str, security: ClientSecurity) -> Client:
    """A client of the first node in `bootstrap` ("host:port[,host:port...]")
    that answers, with `security`'s TLS and login; the last error if none does."""
    error: LaminarError | None = None
    for address in bootstrap.split(","):
        try:
            return Client(address, connect_timeout_s=CONNECT_TIMEOUT_S, **security.client_kwargs())
        except LaminarError as exc:
            error = exc
    assert error is not None
    raise error


def connect(bootstrap: str, topic: str, security: ClientSecurity) -> Client:
    """A client for the driver; `LaminarSparkError` if the node cannot be reached."""
    try:
        return open_client(bootstrap, security)
    except LaminarError as exc:
        raise explain(exc, bootstrap, topic) from None


def subscribed_topics(client: Client, options: ReadOptions) -> list[str]:
    """The topics a read covers: `topic`, the `subscribe` list, or those matching
    `subscribePattern` now (sorted); an unknown subscribed topic is an error."""
    if options.pattern is None:
        return list(options.topics or (options.topic,))
    try:
        names = sorted(t.name for t in client.list_topics())
    except LaminarError as exc:
        raise explain(exc, options.bootstrap, options.pattern) from None
    matched = [name for name in names if re.fullmatch(options.pattern, name)]
    if not matched:
        raise LaminarSparkError(
            f"subscribePattern={options.pattern!r} matches no topic at {options.bootstrap} "
            f"(topics: {', '.join(names[:20]) or 'none'})"
        )
    return matched


def ranges(
    topic: TopicState, start: dict[int, int], end: dict[int, int], what: str = "endingIndex"
) -> list[Range]:
    """The `Range` of every partition (tagged with the topic); an end before its
    start is an error."""
    out = []
    for p in topic.partitions:
        if end[p] < start[p]:
            raise LaminarSparkError(
                f"{what} {end[p]} of {topic.topic}/{p} is before its starting index {start[p]}"
            )
        out.append(Range(p, start[p], end[p], topic.topic))
    return out


@dataclass(frozen=True, slots=True)
class Shape:
    """How a read's rows look and what a task does about lost records."""

    topic_column: bool = False
    kafka: bool = False
    fail_on_data_loss: bool = True

    @classmethod
    def of(cls, options: ReadOptions) -> Shape:
        return cls(options.topic_column, options.kafka_schema, options.fail_on_data_loss)


class RangeSplit(InputPartition):
    """One Spark task's share of a read: a range of one partition."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        range_: Range,
        shape: Shape | None = None,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        super().__init__((topic, range_.partition, range_.start, range_.end))
        self.bootstrap = bootstrap
        self.security = security
        self.topic = topic
        self.range = range_
        self.shape = shape or Shape()

    def __repr__(self) -> str:
        r = self.range
        return f"RangeSplit({self.topic}/{r.partition} [{r.start}, {r.end}))"


def splits(options: ReadOptions, pieces: Sequence[Range]) -> list[RangeSplit]:
    """A split per piece (pieces of several topics carry their topic)."""
    shape = Shape.of(options)
    return [
        RangeSplit(options.bootstrap, r.topic or options.topic, r, shape, options.security)
        for r in pieces
    ]


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
    with open_client(split.bootstrap, split.security) as client:
        index = r.start
        pending = _fetch(client, split.topic, r.partition, index, r.end)
        while True:
            try:
                batch = pending.result()
            except OffsetOutOfRangeError:
                index = _after_lost(client, split, index)
                if index >= r.end:
                    return
                pending = _fetch(client, split.topic, r.partition, index, r.end)
                continue
            if batch.next_index <= index:
                raise LaminarSparkError(
                    f"{split.topic}/{r.partition}: no records at index {index} although the "
                    f"read planned up to {r.end} (were they removed meanwhile?)"
                )
            index = min(batch.next_index, r.end)  # indexes may have gaps: never count
            if index < r.end:  # ask for the next answer before converting this one
                pending = _fetch(client, split.topic, r.partition, index, r.end)
            if len(batch):
                table = batch.to_arrow(end=r.end)  # records past the split belong to the next
                yield reshape(table, split.topic, split.shape.kafka, split.shape.topic_column)
            if index >= r.end:
                return


def _after_lost(client: Client, split: RangeSplit, index: int) -> int:
    """Where to go on after retention removed records from `index` on while the
    task read them: an error, or (failOnDataLoss=false) the partition's first
    record, with a warning."""
    r = split.range
    lowest = client.offsets(split.topic, r.partition).lowest
    if split.shape.fail_on_data_loss or lowest <= index:
        raise LaminarSparkError(
            f"records {index}..{lowest - 1} of {split.topic}/{r.partition} were removed "
            "(retention) before this query read them; failOnDataLoss=false skips them"
        )
    logger.warning(
        "skipping records %d..%d of %s/%d: removed by retention before they were read",
        index,
        min(lowest, r.end) - 1,
        split.topic,
        r.partition,
    )
    return lowest


def _fetch(
    client: Client, topic: str, partition: int, index: int, end: int
) -> Pending[RecordBatch]:
    """A fetch of at most the records before `end`, answered as one batch
    (converted to Arrow in bulk, never a Python object per record)."""
    max_records = min(FETCH_MAX_RECORDS, end - index)
    return client.fetch_batch_nowait(
        topic, partition, index, max_bytes=FETCH_MAX_BYTES, max_records=max_records
    )

"""Planning, without I/O: index ranges, splits, streaming offsets, read limits.

A read is a set of `Range`s, one per partition, each `[start, end)` in log
indexes; a Spark task reads one `Range` or a piece of one (`split`). A
streaming offset is the next index to read of every partition, as a dict
with the partition numbers as string keys in sorted order: Spark compares
offsets as JSON text, so the same offset must always serialize the same way
(`json.dumps(offset) == json.dumps(offset, sort_keys=True)`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

from laminar.spark.errors import LaminarSparkError
from laminar.spark.options import IndexSpec, Position


@dataclass(frozen=True, slots=True)
class Range:
    """Records `start .. end - 1` of one partition (of `topic`, when a read has
    several)."""

    partition: int
    start: int
    end: int
    topic: str = ""

    @property
    def records(self) -> int:
        return self.end - self.start


def resolve_index(
    spec: IndexSpec | None,
    default: Position,
    partition: int,
    lowest: int,
    highest: int,
    option: str,
) -> int:
    """The index `spec` names for `partition`, whose records are `[lowest,
    highest)`; an explicit index must lie in `[lowest, highest]`."""
    if isinstance(spec, Mapping):
        value: Position | int = spec.get(partition, default)
    else:
        value = default if spec is None else spec
    if value == "earliest":
        return lowest
    if value == "latest":
        return highest
    assert isinstance(value, int)
    if not lowest <= value <= highest:
        raise LaminarSparkError(
            f"{option}={value} for partition {partition} is out of range: the partition holds "
            f"indexes [{lowest}, {highest}) (so {option} may be {lowest}..{highest})"
        )
    return value


def check_named_partitions(spec: IndexSpec | None, partitions: Iterable[int], option: str) -> None:
    """A per-partition spec may only name partitions that are being read."""
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - set(partitions))
        if unknown:
            raise LaminarSparkError(
                f"{option} names partitions {unknown} that are not read "
                f"(reading {sorted(partitions)})"
            )


def split(ranges: Iterable[Range], max_records: int | None) -> list[Range]:
    """Non-empty pieces of `ranges` of at most `max_records` records each, in
    order (all of a range in one piece when `max_records` is None)."""
    out = []
    for r in ranges:
        if r.end <= r.start:
            continue
        step = r.records if max_records is None else max_records
        out += [
            Range(r.partition, s, min(s + step, r.end), r.topic)
            for s in range(r.start, r.end, step)
        ]
    return out


def interleave(pieces: Iterable[Range], shard_of: Callable[[Range], int]) -> list[Range]:
    """`pieces` reordered so consecutive ones belong to different shards where
    possible (round robin over shards, each shard's pieces in order): Spark
    starts tasks in this order, so tasks running together keep every shard busy
    instead of queueing on one."""
    by_shard: dict[int, list[Range]] = {}
    for piece in pieces:
        by_shard.setdefault(shard_of(piece), []).append(piece)
    queues = [by_shard[s] for s in sorted(by_shard)]
    out: list[Range] = []
    for i in range(max((len(q) for q in queues), default=0)):
        out += [q[i] for q in queues if i < len(q)]
    return out


# --- streaming offsets --------------------------------------------------------------

LOST_KEY: Final = "lostRecords"
"""Records a `failOnDataLoss=false` stream skipped so far (retention removed them
before it read them): kept in the offset, so Spark shows it in every progress."""

K = TypeVar("K")


def to_offset(next_indexes: Mapping[int, int], lost: int = 0) -> dict[str, int]:
    """The streaming offset for `{partition: next index}`, keys sorted as text
    (with the `LOST_KEY` count when records were skipped)."""
    pairs = sorted((str(p), int(i)) for p, i in next_indexes.items())
    if lost:
        pairs = sorted([*pairs, (LOST_KEY, lost)])
    return dict(pairs)


def topics_to_offset(
    positions: Mapping[str, Mapping[int, int]], lost: int = 0
) -> dict[str, object]:
    """The offset of a read of several topics: `{topic: {partition: next index}}`."""
    out: dict[str, object] = {t: to_offset(positions[t]) for t in sorted(positions)}
    if lost:
        out[LOST_KEY] = lost
    return dict(sorted(out.items()))


def lost_of(offset: Mapping[str, object]) -> int:
    value = offset.get(LOST_KEY, 0)
    return value if type(value) is int and value >= 0 else 0


def topics_from_offset(offset: Mapping[str, object]) -> dict[str, dict[int, int]]:
    """`{topic: {partition: next index}}` from a several-topics offset."""
    out: dict[str, dict[int, int]] = {}
    for topic, partitions in offset.items():
        if topic == LOST_KEY:
            continue
        if not isinstance(partitions, Mapping):
            raise LaminarSparkError(
                f"a laminar offset of several topics maps topics to partitions; got {offset!r} "
                "(is this checkpoint from a read of one topic, or from another source?)"
            )
        out[str(topic)] = from_offset(partitions)
    return out


def from_offset(offset: Mapping[str, object]) -> dict[int, int]:
    """`{partition: next index}` from a streaming offset (as checkpointed)."""
    out: dict[int, int] = {}
    for key, value in offset.items():
        if key == LOST_KEY:
            continue
        if not str(key).isdigit() or type(value) is not int or value < 0:
            raise LaminarSparkError(
                f"a laminar streaming offset maps partition numbers to indexes; got {offset!r} "
                "(is this checkpoint from another source?)"
            )
        out[int(key)] = value
    return out


def limit_records(
    start: Mapping[K, int], latest: Mapping[K, int], max_records: int
) -> dict[K, int]:
    """End offsets at most `max_records` records past `start`, toward `latest`.

    Each partition gets a share proportional to its backlog (rounded down),
    and what rounding leaves goes one record at a time to partitions in order,
    so the result is deterministic and reads `min(max_records, backlog)`."""
    backlog = {p: max(0, latest[p] - start[p]) for p in start}
    total = sum(backlog.values())
    if total <= max_records:
        return {p: start[p] + backlog[p] for p in start}
    share = {p: max_records * b // total for p, b in backlog.items()}
    left = max_records - sum(share.values())
    for p in sorted(share):  # type: ignore[type-var]
        if left == 0:
            break
        if share[p] < backlog[p]:
            share[p] += 1
            left -= 1
    return {p: start[p] + share[p] for p in start}

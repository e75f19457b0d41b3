"""A history checker for a replicated log, in the style of Jepsen's Kafka workload.

Clients record what they did as `Produce` and `Read` operations; after the run
the test reads every replica's whole log (`final`) and `check` looks for every
anomaly a queue must not show. Values are unique per produce attempt, so every
check is by identity, never by counting:

- lost: a produce acknowledged `ok` whose value is absent from a replica's final log;
- duplicated: a value at more than one offset of a final log, or read at two offsets;
- wrong offset: an `ok` produce whose acknowledged offset does not hold its value;
- inconsistent offsets: two observations (reads, final logs of different
  replicas) disagree on the value at one (partition, offset);
- aborted read: a value whose produce failed definitely (`fail`) was read or is
  in a final log (a refusal must mean "not appended");
- phantom: a value read or stored that no client ever produced;
- uncommitted read: a read saw a value that is not in the final committed log;
- nonmonotonic read: one read returned offsets that do not increase by one.

Produces whose outcome is unknown (`info`: timeout, connection lost) may be
present once or absent; they are only checked for duplicates and offsets.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["ok", "fail", "info"]


@dataclass(frozen=True, slots=True)
class Produce:
    """One produce attempt of a single unique value and how it ended."""

    partition: int
    value: bytes
    outcome: Outcome
    offset: int | None = None
    """The acknowledged offset (`ok` only)."""


@dataclass(frozen=True, slots=True)
class Read:
    """One successful read: the (offset, value) pairs it returned, in order."""

    partition: int
    records: tuple[tuple[int, bytes], ...]


@dataclass(slots=True)
class Report:
    """Every anomaly found; empty lists mean the history is valid."""

    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    wrong_offset: list[str] = field(default_factory=list)
    inconsistent_offsets: list[str] = field(default_factory=list)
    aborted_read: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    uncommitted_read: list[str] = field(default_factory=list)
    nonmonotonic_read: list[str] = field(default_factory=list)
    acknowledged: int = 0
    unknown_present: int = 0
    unknown_absent: int = 0

    @property
    def valid(self) -> bool:
        return not any(self.anomalies().values())

    def anomalies(self) -> dict[str, list[str]]:
        return {
            "lost": self.lost,
            "duplicated": self.duplicated,
            "wrong_offset": self.wrong_offset,
            "inconsistent_offsets": self.inconsistent_offsets,
            "aborted_read": self.aborted_read,
            "phantom": self.phantom,
            "uncommitted_read": self.uncommitted_read,
            "nonmonotonic_read": self.nonmonotonic_read,
        }

    def summary(self, examples: int = 5) -> str:
        lines = [
            f"acknowledged={self.acknowledged} unknown_present={self.unknown_present} "
            f"unknown_absent={self.unknown_absent}"
        ]
        for name, found in self.anomalies().items():
            if found:
                lines.append(f"{name}: {len(found)}, e.g. {found[:examples]}")
        return "\n".join(lines)


FinalLogs = Mapping[str, Mapping[int, Sequence[tuple[int, bytes]]]]
"""replica name -> partition -> that replica's whole log as (offset, value) pairs."""


def check(history: Iterable[Produce | Read], final: FinalLogs) -> Report:
    """Check `history` against every replica's final log (see the module docstring)."""
    produces: dict[bytes, Produce] = {}
    reads: list[Read] = []
    report = Report()
    for op in history:
        if isinstance(op, Read):
            reads.append(op)
        elif op.value in produces:
            raise ValueError(f"value {op.value!r} was produced twice: values must be unique")
        else:
            produces[op.value] = op

    seen_at: dict[tuple[int, int], tuple[bytes, str]] = {}
    """(partition, offset) -> the first value observed there and by whom."""

    def observe(partition: int, offset: int, value: bytes, by: str) -> None:
        key = (partition, offset)
        first = seen_at.setdefault(key, (value, by))
        if first[0] != value:
            report.inconsistent_offsets.append(
                f"p{partition}@{offset}: {first[1]} saw {first[0]!r}, {by} saw {value!r}"
            )
        produced = produces.get(value)
        if produced is None:
            report.phantom.append(f"{by} has {value!r} at p{partition}@{offset}")
        elif produced.outcome == "fail":
            report.aborted_read.append(f"{by} has refused {value!r} at p{partition}@{offset}")

    committed: dict[int, dict[bytes, int]] = defaultdict(dict)
    """partition -> value -> offset, over every replica's final log."""
    partitions = {p.partition for p in produces.values()}
    partitions.update(partition for logs in final.values() for partition in logs)
    for replica, logs in final.items():
        for partition in sorted(partitions):
            records = logs.get(partition, ())
            where: dict[bytes, int] = {}
            for offset, value in records:
                observe(partition, offset, value, f"replica {replica}")
                if value in where:
                    report.duplicated.append(
                        f"replica {replica} has {value!r} at p{partition}@{where[value]} "
                        f"and @{offset}"
                    )
                where[value] = offset
                committed[partition].setdefault(value, offset)
            _check_acknowledged(report, produces, partition, where, f"replica {replica}")

    for n, read in enumerate(reads):
        by = f"read {n}"
        offsets = [offset for offset, _ in read.records]
        if offsets and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
            report.nonmonotonic_read.append(f"{by} on p{read.partition}: offsets {offsets[:10]}")
        read_where: dict[bytes, int] = {}
        for offset, value in read.records:
            observe(read.partition, offset, value, by)
            if value in read_where:
                report.duplicated.append(
                    f"{by} saw {value!r} at p{read.partition}@{read_where[value]} and @{offset}"
                )
            read_where[value] = offset
            if value not in committed[read.partition]:
                report.uncommitted_read.append(
                    f"{by} saw {value!r} at p{read.partition}@{offset}, absent from the final log"
                )

    for value, produce in produces.items():
        if produce.outcome == "ok":
            report.acknowledged += 1
        elif produce.outcome == "info":
            if value in committed[produce.partition]:
                report.unknown_present += 1
            else:
                report.unknown_absent += 1
    return report


def _check_acknowledged(
    report: Report,
    produces: Mapping[bytes, Produce],
    partition: int,
    where: Mapping[bytes, int],
    by: str,
) -> None:
    """Every `ok` produce of `partition` is in this log, at its acknowledged offset."""
    for value, produce in produces.items():
        if produce.partition != partition or produce.outcome != "ok":
            continue
        offset = where.get(value)
        if offset is None:
            report.lost.append(f"{by} lacks acknowledged {value!r} (p{partition}@{produce.offset})")
        elif produce.offset is not None and offset != produce.offset:
            report.wrong_offset.append(
                f"{by} has {value!r} at p{partition}@{offset}, acknowledged @{produce.offset}"
            )

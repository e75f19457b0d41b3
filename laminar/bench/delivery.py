"""Delivery by identity: did the consumers get every acknowledged record exactly once?

Counting cannot tell a lost record from a duplicated one. Every record the
load generators write carries an id unique in the run (`laminar.bench.records`);
producers report the id ranges the target acknowledged and those whose
outcome is unknown (an error or no answer: the record may or may not have
been written), consumers report every id they received. Then:

- *missing*: acknowledged, never received (a loss, or not received by the
  drain deadline);
- *duplicated*: received more than once;
- *unexpected*: received, yet never sent (or whose outcome was known to be
  "not written").

A backlog run checks the prefilled ids instead of acknowledged ones and, since
its consumers may stop at the measurement's end, only duplicates and
unexpected ids.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

IdRanges = list[tuple[int, int]]
"""`(first id, count)` pairs."""


@dataclass(frozen=True, slots=True)
class DeliveryCheck:
    missing: int
    duplicated: int
    unexpected: int
    examples: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicated or self.unexpected)

    def errors(self) -> dict[str, int]:
        """The problems as `RunResult.errors` entries (empty when delivery is exact)."""
        out = {}
        if self.missing:
            out["acknowledged records not delivered by the drain deadline"] = self.missing
        if self.duplicated:
            out["records delivered more than once"] = self.duplicated
        if self.unexpected:
            out["records delivered that were never written"] = self.unexpected
        return out


def ids_of(ranges: Iterable[tuple[int, int]]) -> set[int]:
    return {i for first, count in ranges for i in range(first, first + count)}


def check_delivery(
    seen: Sequence[Iterable[int]],
    expected: IdRanges,
    unsure: IdRanges,
    *,
    require_all: bool = True,
) -> DeliveryCheck:
    """Compare the ids consumers received (`seen`: each consumer's) with the ids
    expected exactly once and those that may appear at most once (`unsure`)."""
    counts: Counter[int] = Counter()
    for ids in seen:
        counts.update(ids)
    wanted = ids_of(expected)
    maybe = ids_of(unsure)
    missing = wanted - counts.keys() if require_all else set()
    duplicated = {i for i, n in counts.items() if n > 1}
    unexpected = counts.keys() - wanted - maybe
    examples = (
        *(f"missing id {i:#x}" for i in sorted(missing)[:3]),
        *(f"id {i:#x} received {counts[i]} times" for i in sorted(duplicated)[:3]),
        *(f"unexpected id {i:#x}" for i in sorted(unexpected)[:3]),
    )
    return DeliveryCheck(len(missing), len(duplicated), len(unexpected), examples)

"""Delivery checked by identity: every expected record exactly once, nothing else.

Counting cannot tell a lost record from a duplicated one (28 missing and 28
twice still count right), so every test that claims delivery names each
record by a unique id and checks the multiset of ids it finds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable


def delivery_problems(seen: Iterable[Hashable], expected: Iterable[Hashable]) -> str | None:
    """None if `seen` holds every id of `expected` exactly once and nothing else;
    else a description of what is missing, duplicated or unexpected."""
    counts = Counter(seen)
    wanted = set(expected)
    missing = sorted(wanted - counts.keys(), key=repr)
    duplicated = sorted((k for k, n in counts.items() if n > 1), key=repr)
    unexpected = sorted(counts.keys() - wanted, key=repr)
    if not (missing or duplicated or unexpected):
        return None
    return (
        f"{len(missing)} missing {missing[:5]}, {len(duplicated)} duplicated "
        f"{[(k, counts[k]) for k in duplicated[:5]]}, {len(unexpected)} unexpected "
        f"{unexpected[:5]} (of {len(wanted)} expected)"
    )


def assert_exactly_once(seen: Iterable[Hashable], expected: Iterable[Hashable]) -> None:
    problems = delivery_problems(seen, expected)
    assert problems is None, problems

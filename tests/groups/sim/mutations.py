"""Mutations of the groups cores that the checks must catch (run by
tests/groups/test_mutations.py, and by hand to find catching seeds afresh:
`python -m tests.groups.sim.mutations 200`).

Each mutation patches one safety rule out for the duration of a `with`
block and names the checker expected to report it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from unittest import mock

from laminar.groups import coordinator, member
from laminar.groups.errors import GroupError
from laminar.groups.messages import HeartbeatAnswer, HeartbeatRequest, Position, TopicPartition
from laminar.groups.records import MemberValue

from .history import Violation
from .simulation import run_seed


@dataclass(frozen=True)
class Mutation:
    name: str
    checker: str
    target: object
    attribute: str
    replacement: object
    plan: str = "mixed"
    """The fault plan (`simulation.PLANS`) under which the simulation catches it."""

    def applied(self) -> contextlib.AbstractContextManager[object]:
        """The mutant in place of the rule, for a `with` block."""
        return mock.patch.object(self.target, self.attribute, self.replacement)


def _no_fence(m: MemberValue | None, epoch: int, tp: TopicPartition) -> GroupError:
    return GroupError.NONE  # any member, any epoch, any partition


def _positions_may_go_back(index: int, current: Position | None, end: int) -> GroupError:
    return GroupError.POSITION_BEYOND_END if index > end else GroupError.NONE


def _released_when_revoked(m: MemberValue, r: HeartbeatRequest) -> frozenset[TopicPartition]:
    return frozenset()  # reassign without waiting for the release


def _released_by_any_heartbeat(m: MemberValue, r: HeartbeatRequest) -> frozenset[TopicPartition]:
    return m.revoking & r.owned  # a late heartbeat counts too


_on_answer = member.MemberCore.on_heartbeat_answer


def _lease_from_the_answer(
    self: member.MemberCore, request: HeartbeatRequest, answer: HeartbeatAnswer
) -> None:
    current = request is self._in_flight
    _on_answer(self, request, answer)
    if current and answer.error is GroupError.NONE:
        self._lease_until = self._clock.monotonic() + self.session_timeout_s


NO_FENCE = Mutation("commit without fencing", "fencing", coordinator, "_fence", _no_fence)
BACKWARDS = Mutation(
    "commit below the committed position",
    "monotonic positions",
    coordinator,
    "_position_check",
    _positions_may_go_back,
)
REASSIGN_EARLY = Mutation(
    "reassign a revoked partition before its release",
    "one lease per partition",
    coordinator,
    "_unreleased",
    _released_when_revoked,
)
LATE_RELEASE = Mutation(
    "count a release from a heartbeat older than the latest answer",
    "one lease per partition",
    coordinator,
    "_unreleased",
    _released_by_any_heartbeat,
)
LONG_LEASE = Mutation(
    "lease from the answer's arrival (longer than the session)",
    "one lease per partition",
    member.MemberCore,
    "on_heartbeat_answer",
    _lease_from_the_answer,
    plan="pauses",
)
SIMULATED = (NO_FENCE, BACKWARDS, REASSIGN_EARLY, LONG_LEASE)


def first_failure(mutation: Mutation, seeds: Iterable[int]) -> tuple[int, Violation] | None:
    """The first seed whose run reports a violation under the mutation."""
    with mutation.applied():
        for seed in seeds:
            try:
                run_seed(seed, plan=mutation.plan)
            except Violation as violation:
                return seed, violation
    return None


def main() -> int:
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    missed = 0
    for mutation in (*SIMULATED, LATE_RELEASE):
        caught = []
        with mutation.applied():
            for seed in range(seeds):
                try:
                    run_seed(seed, plan=mutation.plan)
                except Violation as violation:
                    caught.append((seed, violation.checker))
        right = [seed for seed, checker in caught if checker == mutation.checker]
        red = f"{len(caught)} of {seeds} seeds red"
        print(f"{mutation.name}: {red}, by {mutation.checker}: {right[:8]}")
        missed += not right
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

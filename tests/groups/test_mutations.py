"""Every safety rule's check can fail: each mutation of the cores below must
be reported by the simulation checker that guards the rule, and turn the
unit test of the rule red.

The seeds that catch each mutation today are recorded here so this stays
cheap; `python -m tests.groups.sim.mutations 200` searches afresh and prints
new seeds if a change of the cores or the simulator moves them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from . import test_coordinator, test_member
from .sim.history import Violation
from .sim.mutations import (
    BACKWARDS,
    LATE_RELEASE,
    LONG_LEASE,
    NO_FENCE,
    REASSIGN_EARLY,
    SIMULATED,
    Mutation,
    first_failure,
)

CATCHING_SEEDS = {
    NO_FENCE.name: (0, 1),
    BACKWARDS.name: (0, 1),
    REASSIGN_EARLY.name: (7, 8),
    LONG_LEASE.name: (17, 19),
}


@pytest.mark.parametrize("mutation", SIMULATED, ids=lambda m: m.name)
def test_the_simulation_catches_a_mutation_of_the_rule_it_guards(mutation: Mutation) -> None:
    found = first_failure(mutation, CATCHING_SEEDS[mutation.name])
    assert found is not None, (
        f"no recorded seed catches '{mutation.name}' any more: run "
        "`python -m tests.groups.sim.mutations 200` and record the seeds it prints"
    )
    _, violation = found
    assert isinstance(violation, Violation) and violation.checker == mutation.checker


UNIT_TESTS: list[tuple[Mutation, Callable[[], None]]] = [
    (NO_FENCE, test_coordinator.test_commits_are_fenced_unless_from_the_holder_at_its_epoch),
    (BACKWARDS, test_coordinator.test_positions_only_move_forward_and_never_past_the_end),
    (REASSIGN_EARLY, test_coordinator.test_a_join_revokes_first_then_gives_only_what_was_released),
    (
        LATE_RELEASE,
        test_coordinator.test_a_release_counts_only_from_a_member_that_saw_the_latest_answer,
    ),
    (LONG_LEASE, test_member.test_the_lease_runs_from_the_heartbeats_send_time_not_its_answer),
]


@pytest.mark.parametrize(("mutation", "test"), UNIT_TESTS, ids=lambda x: getattr(x, "name", ""))
def test_the_unit_test_of_a_rule_fails_without_it(
    mutation: Mutation, test: Callable[[], None]
) -> None:
    test()  # green as the code is
    with mutation.applied(), pytest.raises(AssertionError):
        test()

"""Every checker and the key scenario tests can fail: each mutation of the
core below must be reported by the checker (or test) that guards the rule.

The simulator seeds that catch each mutation today are recorded here so this
stays cheap; `python -m tests.raft.sim.mutations` searches afresh (make soak
runs it) and prints new seeds if a change of the core moves them."""

from __future__ import annotations

import pytest

from . import test_features, test_paper
from .sim.history import Violation
from .sim.mutations import FIGURE_8, MUTATIONS, PRE_VOTE_BUMPS_TERM, Mutation, first_failure

CATCHING_SEEDS = {
    "skip persisting the vote": (2,),
    "skip the AppendEntries prev-term check": (27,),
    "skip the voter's up-to-date check (5.4.1)": (2, 4, 1),
    "a restart takes its whole persisted log as committed": (4, 2),
    "commit the leader's commit index past the appended entries": (1,),
    "answer reads without a heartbeat quorum": (84, 113, 229, 284),
    "acknowledge an append before persisting it": (3, 179),
    "grant a vote before persisting it": (14, 24),
    "never resend a lost append": (0, 1),
}


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.checker)
def test_the_checker_catches_a_mutation_of_the_rule_it_guards(mutation: Mutation) -> None:
    seeds = CATCHING_SEEDS[mutation.name]
    found = None
    for seed in seeds:
        found = first_failure(mutation, range(seed, seed + 1))
        if found is not None:
            break
    assert found is not None, (
        f"no recorded seed {seeds} catches '{mutation.name}' any more: run "
        "`python -m tests.raft.sim.mutations` and record the seeds it prints"
    )
    _, violation = found
    assert isinstance(violation, Violation) and violation.checker == mutation.checker


def test_dropping_the_figure_8_rule_fails_the_figure_8_test() -> None:
    with FIGURE_8.applied(), pytest.raises(AssertionError):
        test_paper.test_5_4_2_figure_8_an_old_term_entry_on_a_majority_is_not_committed()


def test_a_term_bumping_pre_vote_fails_the_rejoin_test() -> None:
    with PRE_VOTE_BUMPS_TERM.applied(), pytest.raises(AssertionError):
        test_features.test_pre_vote_a_partitioned_node_rejoins_without_inflating_terms_or_disrupting(
            True
        )

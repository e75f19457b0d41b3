"""Mutations of the core that the simulator must catch (run by
tests/raft/test_mutations.py and by hand: `python -m tests.raft.sim.mutations`).

Each mutation patches one rule out of laminar.raft for the duration of a
`with` block, and names the checker expected to catch it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from laminar.raft import Entry, HardState, Message, ReadState, core, log, readindex, ready
from laminar.raft.messages import APPEND_RESP, VOTE_RESP

from .checkers import Checker
from .checkers.durability import Durability
from .checkers.election_safety import ElectionSafety
from .checkers.leader_completeness import LeaderCompleteness
from .checkers.liveness import Liveness
from .checkers.log_matching import LogMatching
from .checkers.reads import LinearizableReads
from .checkers.state_machine_safety import StateMachineSafety
from .history import Violation
from .params import Params
from .simulation import Simulation


@dataclass(frozen=True)
class Mutation:
    name: str
    checker: str  # the checker expected to report it
    checker_type: type[Checker]  # runs alone, so no other checker reports first
    target: object
    attribute: str
    replacement: object  # usually a function
    plan: dict[str, object] = field(default_factory=dict)  # fault plan overrides

    def params(self, seed: int) -> Params:
        drawn = Params.draw(random.Random(seed))
        return dataclasses.replace(drawn, **self.plan)  # type: ignore[arg-type]

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        original = getattr(self.target, self.attribute)
        setattr(self.target, self.attribute, self.replacement)
        try:
            yield
        finally:
            setattr(self.target, self.attribute, original)


def _commit_without_term_check(self: core.RaftCore) -> bool:
    index = self._tracker.committed_index()
    if index > self.log.committed:  # Figure 8's term check dropped
        self.log.commit_to(index)
        return True
    return False


def _hard_state_without_vote(self: core.RaftCore) -> HardState:
    return HardState(self.term, None, self.log.committed)  # the vote is never persisted


def _always_up_to_date(self: log.RaftLog, index: int, term: int) -> bool:
    return True  # voters skip paper 5.4.1's up-to-date check


def _append_without_prev_check(
    self: log.RaftLog, prev_index: int, prev_term: int, entries: Sequence[Entry], leader_commit: int
) -> int | None:
    if prev_index > self.last_index():
        return None
    return self.append_matched(prev_index, entries, leader_commit)


def _commit_unclamped(
    self: log.RaftLog, prev_index: int, entries: Sequence[Entry], leader_commit: int
) -> int:
    last_new = prev_index + len(entries)
    if entries:
        conflict = self._find_conflict(entries)
        if conflict:
            self.truncate_and_append(entries[conflict - prev_index - 1 :])
    self.commit_to(leader_commit)  # Figure 2: min(leaderCommit, index of last new entry)
    return last_new


def _restart_trusts_whole_log(self: log.RaftLog, storage: object, applied: int | None) -> None:
    _original_log_init(self, storage, applied)  # type: ignore[arg-type]
    self.committed = self.last_index()  # everything persisted is taken as committed


_original_log_init = log.RaftLog.__init__


def _confirm_without_quorum(
    self: readindex.ReadIndexQueue, voters: tuple[str, ...], leader: str
) -> list[ReadState]:
    out = [ReadState(r.request_id, r.index) for r in self.pending]
    self.pending.clear()  # a read is answered without hearing from a majority
    return out


def _step_leader_without_retry(self: core.RaftCore, m: Message) -> None:
    progress = self._tracker.progress.get(m.src)
    if progress is None:
        return
    progress.recent_active = True
    if m.kind == APPEND_RESP:
        if m.reject:
            self._append_rejected(m, progress)
        else:
            self._append_acknowledged(m, progress)
    # heartbeat answers no longer unpause a probe or resend a lost append


MUTATIONS = (
    Mutation(
        "skip persisting the vote",
        "election safety",
        ElectionSafety,
        core.RaftCore,
        "_hard_state",
        _hard_state_without_vote,
        {"pre_vote": False, "crash_after_vote": 1.0, "nodes": 3},
    ),
    Mutation(
        "skip the AppendEntries prev-term check",
        "log matching",
        LogMatching,
        log.RaftLog,
        "maybe_append",
        _append_without_prev_check,
    ),
    Mutation(
        "skip the voter's up-to-date check (5.4.1)",
        "leader completeness",
        LeaderCompleteness,
        log.RaftLog,
        "is_up_to_date",
        _always_up_to_date,
    ),
    Mutation(
        "a restart takes its whole persisted log as committed",
        "state machine safety",
        StateMachineSafety,
        log.RaftLog,
        "__init__",
        _restart_trusts_whole_log,
    ),
    Mutation(
        "commit the leader's commit index past the appended entries",
        "no committed entry lost",
        Durability,
        log.RaftLog,
        "append_matched",
        _commit_unclamped,
    ),
    Mutation(
        "answer reads without a heartbeat quorum",
        "linearizable reads",
        LinearizableReads,
        readindex.ReadIndexQueue,
        "confirmed",
        _confirm_without_quorum,
        {"check_quorum": False, "partition_rate": 0.03, "read_rate": 0.3, "propose_rate": 0.5},
    ),
    Mutation(
        "acknowledge an append before persisting it",
        "no committed entry lost",
        Durability,
        ready,
        "SENDABLE_BEFORE_PERSIST",
        ready.SENDABLE_BEFORE_PERSIST | {APPEND_RESP},
        {"crash_in_ready": 0.2},
    ),
    Mutation(
        "grant a vote before persisting it",
        "election safety",
        ElectionSafety,
        ready,
        "SENDABLE_BEFORE_PERSIST",
        ready.SENDABLE_BEFORE_PERSIST | {VOTE_RESP},
        {"pre_vote": False, "crash_in_ready": 0.3, "nodes": 3},
    ),
    Mutation(
        "never resend a lost append",
        "liveness",
        Liveness,
        core.RaftCore,
        "_step_leader",
        _step_leader_without_retry,
    ),
)

# Caught by scenario tests rather than by random schedules (too rare there).
FIGURE_8 = Mutation(
    "drop the Figure 8 term check (5.4.2)",
    "state machine safety",
    StateMachineSafety,
    core.RaftCore,
    "_maybe_commit",
    _commit_without_term_check,
)


def _pre_vote_bumps_term(self: core.RaftCore, kind: str, *, transfer: bool) -> None:
    if kind == "pre_vote":
        self.term += 1  # pre-vote changes the term (it must not)
    _original_campaign(self, kind, transfer=transfer)


_original_campaign = core.RaftCore._campaign

PRE_VOTE_BUMPS_TERM = Mutation(
    "let pre-vote bump the term",
    "scenario: pre-vote rejoin",
    Liveness,
    core.RaftCore,
    "_campaign",
    _pre_vote_bumps_term,
)


def first_failure(mutation: Mutation, seeds: range) -> tuple[int, Violation] | None:
    with mutation.applied():
        for seed in seeds:
            try:
                Simulation(seed, mutation.params(seed), (mutation.checker_type,)).run()
            except Violation as violation:
                return seed, violation
    return None


def main() -> int:
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    missed = 0
    for mutation in MUTATIONS:
        started = time.perf_counter()
        found = first_failure(mutation, range(limit))
        took = time.perf_counter() - started
        if found is None:
            missed += 1
            print(f"NOT CAUGHT in {limit} seeds ({took:.1f}s): {mutation.name}", flush=True)
        else:
            seed, violation = found
            print(
                f"caught at seed {seed} ({took:.1f}s): {mutation.name}\n    {violation}", flush=True
            )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

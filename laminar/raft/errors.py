"""Errors of the Raft core: local misuse (the caller's fault) vs refusals."""

from __future__ import annotations


class RaftError(Exception):
    """Base of every error the Raft core raises."""


class NotLeader(RaftError):
    """A leader-only call was made on a node that is not the leader.

    `leader_hint` names the node this one believes leads (None if unknown).
    """

    def __init__(self, leader_hint: str | None) -> None:
        super().__init__(f"not the leader; leader hint: {leader_hint}")
        self.leader_hint = leader_hint


class ProposalDropped(RaftError):
    """The leader refused a proposal for now (a leadership transfer is under
    way, or too many bytes are uncommitted). Retry later or elsewhere."""


class ConfigChangeRefused(RaftError):
    """A membership change is not allowed now or is not a single step."""


class EntriesUnavailable(RaftError):
    """Storage cannot serve these entries synchronously right now (they must
    be loaded first) or no longer holds them (compacted)."""

    def __init__(self, index: int) -> None:
        super().__init__(f"entry {index} is not available from storage")
        self.index = index


class ReadyOutstanding(RaftError):
    """`ready()` was called again before `advance()` of the previous Ready."""

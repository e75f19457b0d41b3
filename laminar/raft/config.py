"""RaftConfig (one node's settings for one group) and Membership (the replica set)."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Membership:
    """The replica set of a group: voters count for elections and commits,
    learners only receive the log. Ids are sorted so equal sets compare equal."""

    voters: tuple[str, ...]
    learners: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "voters", tuple(sorted(set(self.voters))))
        object.__setattr__(self, "learners", tuple(sorted(set(self.learners))))
        if not self.voters:
            raise ValueError("a group needs at least one voter")
        both = set(self.voters) & set(self.learners)
        if both:
            raise ValueError(f"{sorted(both)} cannot be both voter and learner")
        for node in (*self.voters, *self.learners):
            if not isinstance(node, str) or not node:
                raise ValueError(f"node ids are non-empty strings, not {node!r}")

    @property
    def members(self) -> tuple[str, ...]:
        return self.voters + self.learners

    def encode(self) -> bytes:
        return json.dumps({"voters": self.voters, "learners": self.learners}).encode()

    @classmethod
    def decode(cls, data: bytes) -> Membership:
        try:
            fields = json.loads(data)
            return cls(tuple(fields["voters"]), tuple(fields["learners"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"not an encoded membership: {data[:80]!r}") from exc

    def single_step_to(self, other: Membership) -> str | None:
        """Why `other` is not one allowed step from this (None if it is).

        One step: add one learner, promote one learner, or remove one member.
        With one step at a time, every majority of the old voters meets every
        majority of the new ones, so no joint consensus is needed.
        """
        old, new = set(self.members), set(other.members)
        added, removed = new - old, old - new
        promoted = set(self.learners) & set(other.voters)
        demoted = set(self.voters) & set(other.learners)
        if demoted:
            return f"demoting {sorted(demoted)} to learner is not supported; remove instead"
        if set(other.voters) - set(self.voters) - promoted:
            return "new nodes join as learners first, then get promoted"
        changes = len(added) + len(removed) + len(promoted)
        if changes == 0:
            return "the membership would not change"
        if changes > 1:
            return "one change at a time: add, promote or remove a single node"
        return None


@dataclass(frozen=True)
class RaftConfig:
    """One node's settings for one Raft group.

    `voters` / `learners` are the membership in effect at `applied` (or at the
    log's first index when `applied` is None); membership changes in the log
    after that point take effect again as they are re-applied. `applied` is
    what the application already applied before a restart: committed entries
    up to it are not delivered again.
    """

    node_id: str
    voters: tuple[str, ...]
    learners: tuple[str, ...] = ()
    election_ticks: int = 10
    heartbeat_ticks: int = 1
    pre_vote: bool = True
    check_quorum: bool = True
    applied: int | None = None
    max_append_bytes: int = 1 << 20  # payload bytes per append message (at least one entry)
    max_inflight: int = 256  # append messages in flight per follower in replicate state
    max_committed_bytes: int = 64 << 20  # payload bytes of `Ready.committed` per Ready
    max_uncommitted_bytes: int = 256 << 20  # a leader refuses proposals beyond this
    term_jump_max: int = 100
    """With pre-vote: how far past this replica's term a message's term may be
    and still be believed at once; the allowance grows by two terms per voter
    each election timeout in which it heard no current leader (elections
    cannot go faster), so a replica back from a partition or restart catches
    up, later (`RaftCore`'s module docstring)."""

    def __post_init__(self) -> None:
        if not isinstance(self.node_id, str) or not self.node_id:
            raise ValueError("node_id must be a non-empty string")
        Membership(self.voters, self.learners)  # validates
        if self.heartbeat_ticks < 1:
            raise ValueError("heartbeat_ticks must be >= 1")
        if self.election_ticks <= self.heartbeat_ticks:
            raise ValueError("election_ticks must be greater than heartbeat_ticks")
        if self.applied is not None and self.applied < 0:
            raise ValueError("applied must be >= 0")
        for name in ("max_append_bytes", "max_inflight", "max_committed_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.max_uncommitted_bytes < 1:
            raise ValueError("max_uncommitted_bytes must be >= 1")
        if self.term_jump_max < 1:
            raise ValueError("term_jump_max must be >= 1")

    @property
    def membership(self) -> Membership:
        return Membership(self.voters, self.learners)

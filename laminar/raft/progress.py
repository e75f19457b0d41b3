"""What a leader knows about each follower, and quorum arithmetic.

A follower's `Progress` is in one of two states (etcd's tracker):
- probe: the leader does not know where the follower's log matches; it sends
  one append at a time and waits for the answer (or the next heartbeat
  answer) before sending another, backing `next` off on each rejection.
- replicate: the follower matched; the leader streams appends optimistically,
  advancing `next` as it sends, with at most `max_inflight` unanswered.
A rejection in replicate drops back to probe.
"""

from __future__ import annotations

from collections import deque

PROBE = "probe"
REPLICATE = "replicate"


class Progress:
    """Invariant: match < next."""

    __slots__ = (
        "force_send",
        "inflight",
        "learner",
        "match",
        "match_at_heartbeat",
        "next",
        "paused",
        "recent_active",
        "sent_commit",
        "stalled_ticks",
        "state",
    )

    def __init__(self, next_index: int, learner: bool) -> None:
        self.match = 0
        self.next = next_index
        self.state = PROBE
        self.paused = False  # probe: an append is out, wait for its answer
        self.inflight: deque[int] = deque()  # replicate: last index of each unanswered append
        self.recent_active = False  # heard from within the current check-quorum window
        self.learner = learner
        self.sent_commit = 0  # the commit index last sent to it
        self.force_send = False  # send an append even if it carries nothing new
        self.match_at_heartbeat = 0  # match at the previous heartbeat broadcast
        self.stalled_ticks = 0  # ticks the match has not moved while appends were out

    def become_probe(self) -> None:
        self.state = PROBE
        self.next = self.match + 1
        self.paused = False
        self.inflight.clear()

    def become_replicate(self) -> None:
        self.state = REPLICATE
        self.next = self.match + 1
        self.paused = False
        self.inflight.clear()

    def sent_entries(self, count: int, last_index: int) -> None:
        if self.state == REPLICATE:
            if count:
                self.next = last_index + 1
                self.inflight.append(last_index)
        elif count:
            self.paused = True

    def maybe_update(self, index: int) -> bool:
        """An acknowledgement up to `index`; False if it tells nothing new."""
        if index <= self.match:
            return False
        self.match = index
        self.next = max(self.next, index + 1)
        self.paused = False
        return True

    def free_acknowledged(self, index: int) -> None:
        inflight = self.inflight
        while inflight and inflight[0] <= index:
            inflight.popleft()

    def maybe_decrease_to(self, rejected: int, probe_hint: int) -> bool:
        """A rejection of the append after `rejected`; False if it is stale."""
        if self.state == REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, probe_hint + 1), self.match + 1)
        self.paused = False
        return True

    def is_paused(self, max_inflight: int) -> bool:
        if self.state == PROBE:
            return self.paused
        return len(self.inflight) >= max_inflight

    def stalled(self, ticks: int, limit_ticks: int) -> bool:
        """Called once per heartbeat broadcast, `ticks` after the previous one:
        has the match not moved for `limit_ticks` with appends out? Then one
        was probably lost; resending sooner would race the ones still in flight."""
        if self.match != self.match_at_heartbeat or not self.inflight:
            self.match_at_heartbeat = self.match
            self.stalled_ticks = 0
            return False
        self.stalled_ticks += ticks
        return self.stalled_ticks >= limit_ticks

    def can_bump_commit(self, commit: int) -> bool:
        """Would an (empty) append let it advance its commit index?"""
        return commit > self.sent_commit and self.sent_commit < self.next - 1


class ProgressTracker:
    """Progress of every member, the votes of an election, and quorums."""

    def __init__(self, voters: tuple[str, ...], learners: tuple[str, ...]) -> None:
        self.voters = voters
        self.learners = learners
        self.progress: dict[str, Progress] = {}
        self.votes: dict[str, bool] = {}
        self.reset(1)

    def reset(self, next_index: int) -> None:
        self.progress = {node: Progress(next_index, False) for node in self.voters}
        for node in self.learners:
            self.progress[node] = Progress(next_index, True)

    def set_members(
        self, voters: tuple[str, ...], learners: tuple[str, ...], next_index: int
    ) -> None:
        """Switch to a new membership, keeping what is known of staying members."""
        self.voters, self.learners = voters, learners
        old = self.progress
        self.progress = {}
        for node in voters + learners:
            progress = old.get(node) or Progress(next_index, False)
            progress.learner = node in learners
            self.progress[node] = progress
        self.votes = {node: v for node, v in self.votes.items() if node in voters}

    def quorum_size(self) -> int:
        return len(self.voters) // 2 + 1

    def committed_index(self) -> int:
        """The highest index a majority of voters has matched."""
        progress = self.progress
        matches = sorted([progress[node].match for node in self.voters], reverse=True)
        return matches[self.quorum_size() - 1]

    def record_vote(self, node: str, granted: bool) -> None:
        if node in self.voters:
            self.votes.setdefault(node, granted)

    def tally(self) -> str:
        """ "won", "lost" or "pending" for the votes recorded so far."""
        granted = sum(1 for v in self.votes.values() if v)
        rejected = len(self.votes) - granted
        quorum = self.quorum_size()
        if granted >= quorum:
            return "won"
        if rejected > len(self.voters) - quorum:
            return "lost"
        return "pending"

    def quorum_active(self, leader: str) -> bool:
        """Has a majority of voters (the leader included) been heard from lately?"""
        active = sum(
            1 for node in self.voters if node == leader or self.progress[node].recent_active
        )
        return active >= self.quorum_size()

    def mark_all_inactive(self, leader: str) -> None:
        for node, progress in self.progress.items():
            progress.recent_active = node == leader

"""RaftCore: one node of one Raft group, as a deterministic state machine.

Theory of operation (etcd raft's RawNode contract):
- Inputs: `tick()` (logical time), `step(message)`, `propose(data)`,
  `read_index()`, membership and transfer calls. Randomness comes only from
  the injected `random.Random`. Nothing here touches a clock, socket or file.
- Outputs: `ready()` returns a `Ready` with what to persist, send and apply;
  the application does it in that order and calls `advance(ready)`. Outgoing
  appends are built lazily when `ready()` is called, so every proposal made
  since the last Ready rides in one batch per follower.
- Role is a pair of handlers swapped on role change (`_step_role`,
  `_tick_role`); every message enters through `step`, which first applies the
  term rules common to all roles (Figure 2, "Rules for all servers", plus
  pre-vote and check-quorum leases) and then dispatches.
- The leader counts its own log only once it is persisted (`advance`), and
  commits only entries of its own term by counting replicas (paper 5.4.2,
  Figure 8). A new leader appends a no-op so earlier entries can commit.
- The leader's replication (flow control, appends, installs, commitment,
  heartbeats, read confirmation) is the mixin in `replication.py`.
- Membership changes are one step at a time and take effect when the
  application has applied them (`advance`); a leader proposes the next only
  after the previous one and its own no-op are applied.
- A removed follower must learn that its removal committed (its shell then
  deletes its files, hard state included, and only then), yet the leader
  stops replicating to non-members. So the leader keeps each removed node as
  a *departing* one: tracked like a learner (it gets the log up to its
  removal, counts for nothing); once it holds its removal, it gets nothing
  more but heartbeats telling it so (`removed`, with the removal's index),
  until it answered `DEPARTING_TOLD` of them, or for at most
  `DEPARTING_HEARTBEATS_MAX` rounds (a dead node never hears). A departing
  node added back starts over as a newcomer: its replica may be gone. Only
  a leader's word makes the removal final on the removed node
  (`removal_confirmed`): what its own log applied may be old news (a
  node removed, added back and promoted, that has not heard of the
  re-addition yet, must keep its vote). A new leader does
  not know the departing nodes; a removed node that was never told asks: it
  campaigns if its stale membership still names it a voter, and otherwise
  (it applied its removal) sends a pre-vote each election timeout to the
  voters it knows. A leader that gets either from a non-member takes it as
  departing from the membership in effect, and tells it.
- Implausible messages are refused, never acted on, and reported in
  `Ready.anomalies` (peers authenticate, but a peer holding the cluster
  secret, or a buggy one, must not erase a group with one message). With
  pre-vote, a leader's message (also a transfer's campaign, or an answer to
  a request this role did not send) whose term is more than `term_jump_max`
  past this replica's, plus two per voter per election timeout since it last
  saw its term current (a message of its leader; as leader, any of its
  term): with pre-vote a term rises only in an election a majority agreed
  to, which runs elsewhere only while this replica hears no current leader,
  and no faster than about one per voter per election timeout (two: clocks
  differ), so a replica back from a partition or a restart catches up, while
  a live or quiesced group allows only `term_jump_max`. Campaigns and the
  answers to this role's own requests may carry any term (`_may_raise_term`):
  that is how a group follows a term that legitimately moved far (a replica
  rebuilt by `laminar repair` starts 2**32 terms up), they cannot rewrite a
  log, and a campaign is ignored while a live leader is heard. Without
  pre-vote a partitioned node inflates its own term and the group must
  follow, so the rule is off. Also refused: a leader's message in a term
  whose leader this replica knows to be another node (Election Safety); an
  install whose anchor term is past the message's term or before the term of
  this replica's last committed entry (a leader's log holds that entry).
  Refusing a message never endangers safety (it is as if it was lost), only
  delays liveness. An install that discards committed entries (legitimate
  when the leader's retention removed them) is reported too.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Final

from .budget import ByteBudget
from .config import Membership, RaftConfig
from .errors import (
    ConfigChangeRefused,
    EntriesUnavailable,
    NotLeader,
    ProposalDropped,
    RaftError,
    ReadyOutstanding,
)
from .leader import LeaderReplication
from .log import RaftLog
from .messages import (
    ANCHOR,
    APPEND,
    APPEND_RESP,
    CONFIG,
    HEARTBEAT,
    HEARTBEAT_RESP,
    INSTALL,
    MESSAGE_KINDS,
    NOOP,
    PRE_VOTE,
    PRE_VOTE_RESP,
    QUIESCE,
    TIMEOUT_NOW,
    VOTE,
    VOTE_RESP,
    Anomaly,
    Entry,
    HardState,
    Message,
    ReadState,
)
from .progress import REPLICATE, ProgressTracker
from .readindex import ReadIndexQueue
from .ready import FollowerProgress, Ready, Status
from .storage import RaftStorage

FOLLOWER = "follower"
PRE_CANDIDATE = "pre_candidate"
CANDIDATE = "candidate"
LEADER = "leader"

# Appends a follower keeps that arrived ahead of a gap (a reordering network).
EARLY_APPENDS_MAX = 64

# Messages only a leader sends: receiving one at a higher term names the leader.
_FROM_LEADER = frozenset({APPEND, HEARTBEAT, INSTALL, QUIESCE})
# Answers, by the roles that send the requests they answer.
_ANSWERED_BY: dict[str, tuple[str, ...]] = {
    APPEND_RESP: (LEADER,),
    HEARTBEAT_RESP: (LEADER,),
    VOTE_RESP: (CANDIDATE,),
    PRE_VOTE_RESP: (PRE_CANDIDATE,),
}
DEPARTING_TOLD: Final = 3
DEPARTING_HEARTBEATS_MAX: Final = 100


class RaftCore(LeaderReplication):
    """One node of one Raft group. See the module docstring and `Ready`."""

    def __init__(self, config: RaftConfig, storage: RaftStorage, rng: random.Random) -> None:
        self.config = config
        self.id = config.node_id
        self._rng = rng
        self.log = RaftLog(storage, config.applied)
        state = storage.initial_state()
        self.term = state.term
        self.vote = state.vote
        self._persisted = state
        self.membership = config.membership
        # (index, membership) of changes applied, so the membership in effect
        # at any retained index is known (an install carries it).
        self._memberships: list[tuple[int, Membership]] = [(self.log.applied, self.membership)]
        self._tracker = ProgressTracker(self.membership.voters, self.membership.learners)
        # Leader: removed nodes still told their removal, by node: [removal
        # index, answers to heartbeats that told it, heartbeat rounds].
        self._departing: dict[str, list[int]] = {}
        self._removal_confirmed = 0
        """The removal index a leader said is committed (0: none said)."""
        self.learner_budget: ByteBudget | None = None
        """Shared by a shard's groups to rate-limit moves; the shell sets and refills it."""
        self._reads = ReadIndexQueue()
        self._msgs: list[Message] = []
        self._read_states: list[ReadState] = []
        self._dropped_reads: list[int] = []
        self._outstanding: Ready | None = None
        self._bcast = False  # the leader has appends to build at the next ready()
        self._apply_blocked = False  # storage could not serve committed entries yet
        self._transferee: str | None = None
        self._pending_conf_index = 0
        self._uncommitted_bytes = 0
        self._quiesced = False
        # Appends that arrived ahead of a gap (reordered), by their prev index.
        self._early: dict[int, Message] = {}
        self.role = FOLLOWER
        self.leader: str | None = None
        self.leader_commit: int | None = None
        """The highest commit index a leader has told this replica since it
        started (a leader's own, once an entry of its term is committed); None
        until one did. A replica that has applied up to it holds everything the
        group committed before it started: the readiness of a restarted member."""
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._randomized_timeout = config.election_ticks
        self._term_ticks = 0
        """Ticks (not quiesced) since this replica last saw that its term is
        current: a message of its leader, or as leader one of its term.
        Elections may have run elsewhere only meanwhile: how far a term may jump."""
        self._anomalies: list[Anomaly] = []
        self._step_role: Callable[[Message], None] = self._step_follower
        self._tick_role: Callable[[], None] = self._tick_election
        self._become_follower(self.term, None)

    # -- inputs -----------------------------------------------------------------

    def tick(self) -> None:
        """One logical clock tick. A quiesced core ignores ticks."""
        self._apply_blocked = False
        if not self._quiesced:
            self._term_ticks += 1
            self._tick_role()

    def step(self, m: Message) -> None:
        """Take in a message from a peer. Stale, duplicated or reordered is fine."""
        if m.dst != self.id:
            raise ValueError(f"message for {m.dst!r} stepped into {self.id!r}")
        if m.kind not in MESSAGE_KINDS:
            raise ValueError(f"unknown message kind {m.kind!r}")
        if self._quiesced and m.kind != QUIESCE:
            self.wake()
        if m.term > self.term or m.kind == INSTALL or m.src != self.leader:  # else plausible
            why = self._implausible(m)
            if why is not None:
                self._anomalies.append(Anomaly(m, why))
                return
        if m.kind in (VOTE, PRE_VOTE) and self.role == LEADER:
            self._tell_if_removed(m.src)
        if m.term > self.term:
            if m.kind in (VOTE, PRE_VOTE) and not m.transfer and self._in_lease():
                return  # a live leader was heard within the election timeout
            if not (m.kind == PRE_VOTE or (m.kind == PRE_VOTE_RESP and not m.reject)):
                elapsed = self._election_elapsed
                self._become_follower(m.term, m.src if m.kind in _FROM_LEADER else None)
                if m.kind == VOTE and self.role == FOLLOWER:
                    # Figure 2: only the leader or a granted vote restarts the
                    # election timer. Restarting it for every newer candidate
                    # lets stale candidates with fast clocks starve the one
                    # node that could win (seen in the simulator).
                    self._election_elapsed = elapsed
        elif m.term < self.term:
            if m.kind in _FROM_LEADER and (self.config.check_quorum or self.config.pre_vote):
                # Tell a stale leader about the newer term so it steps down (with
                # pre-vote it may otherwise never hear of it).
                self._reply(m, APPEND_RESP)
            elif m.kind == PRE_VOTE:
                self._reply(m, PRE_VOTE_RESP, reject=True)
            return
        if m.term == self.term and (m.kind in _FROM_LEADER or self.role == LEADER):
            self._term_ticks = 0
        if m.kind in (VOTE, PRE_VOTE):
            self._handle_vote(m)
        else:
            self._step_role(m)

    def _may_raise_term(self, m: Message) -> bool:
        """Whether `m` may carry any newer term: a campaign (not a transfer's,
        which is one past its leader's term) or the answer to a request this
        role sends. That is how a group follows a term it legitimately moved
        far (a repaired replica, `laminar repair`, starts 2**32 terms up; its
        answer makes the leader step down, and the others learn the term from
        the campaign or from the answers to their own pre-votes); it cannot
        rewrite a log, and a vote is ignored while a live leader is heard."""
        if m.kind in (VOTE, PRE_VOTE):
            return not m.transfer
        return self.role in _ANSWERED_BY.get(m.kind, ())

    def _implausible(self, m: Message) -> str | None:
        """Why no correct member sends `m` now (see the module docstring), or None."""
        if m.term > self.term and self.config.pre_vote and not self._may_raise_term(m):
            allowed = self.config.term_jump_max + 2 * len(self.membership.voters) * (
                self._term_ticks // self.config.election_ticks
            )
            if m.term - self.term > allowed:
                return (
                    f"term {m.term} is {m.term - self.term} past this replica's term "
                    f"{self.term}; at most {allowed} is plausible now"
                )
        elif (
            m.term == self.term
            and m.kind in _FROM_LEADER
            and self.leader is not None
            and m.src != self.leader
        ):
            return f"node {self.leader} leads term {m.term}, not {m.src}"
        if m.kind == INSTALL and m.term >= self.term and m.index >= self.log.committed:
            committed_term = self.log.term(self.log.committed) or 0
            if not committed_term <= m.log_term <= m.term:
                return (
                    f"the anchor's term {m.log_term} is not between this replica's committed "
                    f"term {committed_term} and the message's term {m.term}"
                )
        return None

    def propose(self, data: bytes) -> int:
        """Append `data` as a new entry; returns its index. Leader only."""
        return self.propose_many((data,))

    def propose_many(self, payloads: Sequence[bytes]) -> int:
        """Append several entries at once; returns the index of the first."""
        self._check_can_propose()
        size = sum(map(len, payloads))
        if self._uncommitted_bytes and self._uncommitted_bytes + size > (
            self.config.max_uncommitted_bytes
        ):
            raise ProposalDropped(
                f"{self._uncommitted_bytes} bytes are uncommitted; the limit is "
                f"{self.config.max_uncommitted_bytes}"
            )
        first = self.log.last_index() + 1
        term = self.term
        self.log.append([Entry(i, term, bytes(d)) for i, d in enumerate(payloads, first)])
        self._uncommitted_bytes += size
        self._bcast = True
        return first

    def read_index(self) -> int:
        """Start a linearizable read; returns its request id. The answer comes
        as a `ReadState` in a later Ready (or the id in `dropped_reads`)."""
        if self.role != LEADER:
            raise NotLeader(self.leader)
        if self._quiesced:
            self.wake()
        request_id = self._reads.new_request_id()
        if not self._committed_in_term():
            self._reads.waiting.append(request_id)
        else:
            self._reads.add(request_id, self.log.committed)
        return request_id

    def transfer_leadership(self, to: str) -> None:
        """Hand leadership to voter `to` once its log is up to date (drain a node).

        Proposals are refused while the transfer runs; it is abandoned after an
        election timeout."""
        if self.role != LEADER:
            raise NotLeader(self.leader)
        if to == self.id:
            return
        if to not in self._tracker.voters:
            raise ConfigChangeRefused(f"{to} is not a voter of this group")
        if self._quiesced:
            self.wake()
        self._transferee = to
        self._election_elapsed = 0
        progress = self._tracker.progress[to]
        if progress.match == self.log.last_index():
            self._msgs.append(Message(TIMEOUT_NOW, self.id, to, self.term))
        else:
            progress.force_send = True
            self._bcast = True

    def propose_membership(self, voters: Sequence[str], learners: Sequence[str] = ()) -> int:
        """Propose the next membership (one step from the current one); returns
        the index of the change. It takes effect when applied."""
        self._check_can_propose()
        new = Membership(tuple(voters), tuple(learners))
        why = self.membership.single_step_to(new)
        if why is not None:
            raise ConfigChangeRefused(why)
        if self._pending_conf_index > self.log.applied:
            raise ConfigChangeRefused(
                f"the change or no-op at {self._pending_conf_index} is not applied yet "
                f"(applied {self.log.applied})"
            )
        index = self.log.last_index() + 1
        self.log.append([Entry(index, self.term, new.encode(), CONFIG)])
        self._pending_conf_index = index
        self._bcast = True
        return index

    def add_learner(self, node: str) -> int:
        m = self.membership
        return self.propose_membership(m.voters, (*m.learners, node))

    def promote_learner(self, node: str) -> int:
        m = self.membership
        return self.propose_membership((*m.voters, node), tuple(n for n in m.learners if n != node))

    def remove_node(self, node: str) -> int:
        m = self.membership
        return self.propose_membership(
            tuple(n for n in m.voters if n != node), tuple(n for n in m.learners if n != node)
        )

    def report_unreachable(self, node: str) -> None:
        """The shell could not deliver to `node` (a connection broke): resend
        to it from its last known match instead of waiting for a stall."""
        progress = self._tracker.progress.get(node)
        if self.role == LEADER and progress is not None and progress.state == REPLICATE:
            progress.become_probe()
            progress.force_send = True
            self._bcast = True

    def retry_storage(self) -> None:
        """Storage can now serve what it could not (e.g. after
        `SegmentedLogStorage.load()`): retry deliveries and appends."""
        self._apply_blocked = False
        if self.role == LEADER:
            self._bcast = True

    def campaign(self) -> None:
        """Start an election now (as an election timeout would)."""
        self._hup(transfer=False)

    # -- quiescence ---------------------------------------------------------------

    def quiesce(self) -> bool:
        """Leader: if the group is idle (every member has the whole log and the
        commit index), tell the followers and stop ticking; True if it did.

        A quiesced core ignores ticks until any message, proposal or `wake()`.
        The shell must `wake()` the followers of a group whose leader's node it
        believes down (they would otherwise never time out)."""
        if self.role != LEADER:
            return False
        if self._quiesced:
            return True
        last = self.log.last_index()
        idle = (
            self.log.committed == last
            and self._transferee is None
            and not self._reads.pending
            and not self._reads.waiting
            and not self.log.has_unstable()
            and not self._departing  # heartbeats must still tell them
            and all(p.match == last for p in self._tracker.progress.values())
        )
        if not idle:
            return False
        self._quiesced = True
        last_term = self.log.last_term()
        for node in self._tracker.progress:
            if node != self.id:
                self._msgs.append(
                    Message(QUIESCE, self.id, node, self.term, last, last_term, commit=last)
                )
        return True

    @property
    def removal_confirmed(self) -> bool:
        """A leader told this node that its removal is committed, and the
        membership it applied (that removal or a later change) leaves it out:
        its replica may go, hard state and all."""
        removal = self._removal_confirmed
        return (
            removal > 0
            and self.id not in self.membership.members
            and self._memberships[-1][0] >= removal
        )

    @property
    def quiesced(self) -> bool:
        """True while the core ignores ticks (see `quiesce`)."""
        return self._quiesced

    def wake(self) -> None:
        """Leave quiescence: ticks count again (from a fresh election timeout)."""
        if not self._quiesced:
            return
        self._quiesced = False
        self._election_elapsed = 0
        if self.role == LEADER:
            for progress in self._tracker.progress.values():
                progress.recent_active = True
            self._heartbeat_elapsed = self.config.heartbeat_ticks

    # -- outputs ------------------------------------------------------------------

    def has_ready(self) -> bool:
        if self._outstanding is not None:
            return False
        return bool(
            self._msgs
            or self._read_states
            or self._dropped_reads
            or self._anomalies
            or (self.role == LEADER and (self._bcast or self._reads.round_wanted()))
            or self.log.has_unstable()
            or self._hard_state() != self._persisted
            or (self.log.has_committed() and not self._apply_blocked)
        )

    def ready(self) -> Ready:
        """The work to do now; call `advance(ready)` when it is done."""
        if self._outstanding is not None:
            raise ReadyOutstanding("advance() the previous Ready before asking for another")
        if self.role == LEADER:
            if self._reads.round_wanted():
                self._reads.round += 1
                self._broadcast_heartbeat()
                self._release_reads()
            if self._bcast:
                self._flush_appends()
        self._bcast = False
        log = self.log
        entries = log.take_unstable()
        state = self._hard_state()
        persisted = self._persisted
        committed: list[Entry] = []
        if log.has_committed() and not self._apply_blocked:
            try:
                committed = log.take_committed(self.config.max_committed_bytes)
            except EntriesUnavailable:
                self._apply_blocked = True  # until retry_storage() or the next tick
        rd = Ready(
            entries=tuple(entries),
            hard_state=state if state != persisted else None,
            messages=tuple(self._msgs),
            committed=tuple(committed),
            read_states=tuple(self._read_states),
            dropped_reads=tuple(self._dropped_reads),
            anomalies=tuple(self._anomalies),
            must_sync=bool(entries) or state.term != persisted.term or state.vote != persisted.vote,
        )
        self._msgs = []
        self._read_states = []
        self._dropped_reads = []
        self._anomalies = []
        self._outstanding = rd
        return rd

    def advance(self, rd: Ready) -> None:
        """`rd` was persisted, sent and applied."""
        if rd is not self._outstanding:
            raise RaftError("advance() takes the Ready that ready() returned last")
        self._outstanding = None
        if rd.hard_state is not None:
            self._persisted = rd.hard_state
        if rd.entries:
            self.log.stable_to(rd.entries)
            own = self._tracker.progress.get(self.id)
            if (
                self.role == LEADER
                and own is not None
                and own.maybe_update(self.log.stable_last_index())
                and self._maybe_commit()
            ):
                self._commit_advanced()
        if rd.committed:
            self.log.applied = max(self.log.applied, rd.committed[-1].index)
            for entry in rd.committed:
                if entry.kind == CONFIG:
                    self._apply_membership(entry.index, Membership.decode(entry.data))
            if self.role == LEADER:
                self._uncommitted_bytes = max(
                    0, self._uncommitted_bytes - sum(len(e.data) for e in rd.committed)
                )

    def status(self) -> Status:
        progress = {}
        if self.role == LEADER:
            progress = {
                node: FollowerProgress(p.match, p.next, p.state, p.learner, p.recent_active)
                for node, p in self._tracker.progress.items()
            }
        return Status(
            node_id=self.id,
            role=self.role,
            term=self.term,
            leader=self.leader,
            commit=self.log.committed,
            applied=self.log.applied,
            vote=self.vote,
            first_index=self.log.first_index(),
            last_index=self.log.last_index(),
            voters=self.membership.voters,
            learners=self.membership.learners,
            quiesced=self._quiesced,
            transferee=self._transferee,
            config_pending=self.role == LEADER and self._pending_conf_index > self.log.applied,
            progress=progress,
        )

    # -- roles --------------------------------------------------------------------

    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = None
        self.leader = None
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._draw_timeout()
        self._transferee = None
        self._early.clear()
        self._tracker.votes = {}
        self._departing = {}
        self._tracker.learners = self.membership.learners
        self._tracker.reset(self.log.last_index() + 1)
        self._dropped_reads.extend(self._reads.reset())
        self._pending_conf_index = 0
        self._uncommitted_bytes = 0
        self._bcast = False

    def _become_follower(self, term: int, leader: str | None) -> None:
        self._reset(term)
        self.role = FOLLOWER
        self.leader = leader
        self._step_role = self._step_follower
        self._tick_role = self._tick_election

    def _become_pre_candidate(self) -> None:
        # Pre-vote (dissertation 9.6): ask first whether we could win, without
        # touching our term, so a node that rejoins from a partition does not
        # force the group through a useless election.
        self._tracker.votes = {}
        self.role = PRE_CANDIDATE
        self.leader = None
        self._step_role = self._step_candidate
        self._tick_role = self._tick_election

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = CANDIDATE
        self._step_role = self._step_candidate
        self._tick_role = self._tick_election

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.role = LEADER
        self.leader = self.id
        self._step_role = self._step_leader
        self._tick_role = self._tick_leader
        own = self._tracker.progress.get(self.id)
        if own is not None:
            own.match = self.log.stable_last_index()
            own.become_replicate()
            own.recent_active = True
        noop = Entry(self.log.last_index() + 1, self.term, b"", NOOP)
        self.log.append([noop])
        self._pending_conf_index = noop.index
        self._bcast = True

    def _promotable(self) -> bool:
        return self.id in self._tracker.voters

    def _in_lease(self) -> bool:
        return (
            self.config.check_quorum
            and self.leader is not None
            and self._election_elapsed < self.config.election_ticks
        )

    # -- ticks --------------------------------------------------------------------

    def _draw_timeout(self) -> None:
        self._randomized_timeout = self.config.election_ticks + self._rng.randrange(
            self.config.election_ticks
        )

    def _tick_election(self) -> None:
        self._election_elapsed += 1
        if self._election_elapsed < self._randomized_timeout:
            return
        if self._promotable():
            # Its leader was not heard for a whole timeout: it holds no lease
            # to protect, also when it may not campaign (it lacks committed
            # entries) and so keeps its role. And a new draw per timeout: two
            # replicas on one period stay in one phase, and a candidate whose
            # pre-votes always landed in another's lease never won.
            self._election_elapsed = 0
            self.leader = None
            self._draw_timeout()
            self._hup(transfer=False)
        elif self.id not in self.membership.members and not self._removal_confirmed:
            self._election_elapsed = 0
            self._ask_if_removed()

    def _ask_if_removed(self) -> None:
        """A node that applied its own removal but was not told it is final:
        a pre-vote (which changes nothing anywhere) makes the leader among
        the voters it knows track it as departing, and so tell it."""
        last, last_term = self.log.last_index(), self.log.last_term()
        for node in self.membership.voters:
            self._msgs.append(Message(PRE_VOTE, self.id, node, self.term + 1, last, last_term))

    def _tick_leader(self) -> None:
        self._heartbeat_elapsed += 1
        self._election_elapsed += 1
        if self._election_elapsed >= self.config.election_ticks:
            self._election_elapsed = 0
            if self.config.check_quorum:
                if not self._tracker.quorum_active(self.id):
                    self._become_follower(self.term, None)
                    return
                self._tracker.mark_all_inactive(self.id)
            self._transferee = None
        if self._heartbeat_elapsed >= self.config.heartbeat_ticks:
            self._heartbeat_elapsed = 0
            self._broadcast_heartbeat()
        if self.learner_budget is not None:
            last = self.log.last_index()
            if any(p.learner and p.next <= last for p in self._tracker.progress.values()):
                self._bcast = True  # a learner's copy waited for this tick's budget

    # -- elections ------------------------------------------------------------------

    def _hup(self, *, transfer: bool) -> None:
        if self.role == LEADER or not self._promotable():
            return
        if self.leader_commit is not None and self.log.last_index() < self.leader_commit:
            # It lacks entries the group committed, so it cannot be a rightful
            # leader; and while catching up it may be on an old membership
            # (a replica added back, replaying the days it was the only voter)
            # that would let it win alone and overwrite them.
            return
        if self.config.pre_vote and not transfer:
            self._campaign(PRE_VOTE, transfer=False)
        else:
            self._campaign(VOTE, transfer=transfer)

    def _campaign(self, kind: str, *, transfer: bool) -> None:
        if kind == PRE_VOTE:
            self._become_pre_candidate()
            vote_term = self.term + 1
        else:
            self._become_candidate()
            vote_term = self.term
        self._tracker.record_vote(self.id, True)
        if self._tracker.tally() == "won":  # a group of one
            if kind == PRE_VOTE:
                self._campaign(VOTE, transfer=False)
            else:
                self._become_leader()
            return
        last, last_term = self.log.last_index(), self.log.last_term()
        for node in self._tracker.voters:
            if node != self.id:
                self._msgs.append(
                    Message(kind, self.id, node, vote_term, last, last_term, transfer=transfer)
                )

    def _handle_vote(self, m: Message) -> None:
        pre = m.kind == PRE_VOTE
        can_vote = (
            self.vote == m.src
            or (self.vote is None and self.leader is None)
            or (pre and m.term > self.term)
        )
        response = PRE_VOTE_RESP if pre else VOTE_RESP
        if can_vote and self.log.is_up_to_date(m.index, m.log_term):
            # A granted pre-vote answers at the proposed term, so the
            # pre-candidate can count it without our term changing.
            self._msgs.append(Message(response, self.id, m.src, m.term))
            if not pre:
                self._election_elapsed = 0
                self.vote = m.src
        else:
            self._reply(m, response, reject=True)

    def _step_candidate(self, m: Message) -> None:
        kind = m.kind
        if kind in _FROM_LEADER:
            self._become_follower(m.term, m.src)
            self._step_follower(m)
        elif kind == (PRE_VOTE_RESP if self.role == PRE_CANDIDATE else VOTE_RESP):
            self._tracker.record_vote(m.src, not m.reject)
            result = self._tracker.tally()
            if result == "won":
                if self.role == PRE_CANDIDATE:
                    self._campaign(VOTE, transfer=False)
                else:
                    self._become_leader()
            elif result == "lost":
                self._become_follower(self.term, None)

    # -- follower -------------------------------------------------------------------

    def _step_follower(self, m: Message) -> None:
        kind = m.kind
        if kind in _FROM_LEADER:
            self._election_elapsed = 0
            if m.src != self.leader:
                self._early.clear()
            self.leader = m.src
            self._learn_leader_commit(m.index if kind == HEARTBEAT else m.commit)
            if kind == APPEND:
                self._handle_append(m)
            elif kind == HEARTBEAT:
                self.log.commit_to(min(m.commit, self.log.last_index()))
                if m.removed:
                    self._removal_confirmed = max(self._removal_confirmed, m.hint)
                self._reply(m, HEARTBEAT_RESP, context=m.context)
            elif kind == INSTALL:
                self._handle_install(m)
            else:
                self._handle_quiesce(m)
        elif kind == TIMEOUT_NOW and m.src == self.leader:
            self._hup(transfer=True)

    def _learn_leader_commit(self, commit: int) -> None:
        if self.leader_commit is None or commit > self.leader_commit:
            self.leader_commit = commit

    def _handle_append(self, m: Message) -> None:
        log = self.log
        if m.index < log.committed:
            self._reply(m, APPEND_RESP, index=log.committed)
            return
        last_new = log.maybe_append(m.index, m.log_term, m.entries, m.commit)
        if last_new is not None:
            self._reply(m, APPEND_RESP, index=last_new)
            early = self._early.pop(log.last_index(), None)
            if early is not None:
                self._handle_append(early)
            return
        if m.index > log.last_index() and m.entries and len(self._early) < EARLY_APPENDS_MAX:
            # Ahead of a gap: keep it for when the gap fills. The rejection
            # still goes out, so a probing leader backs off as usual.
            self._early[m.index] = m
        # Fast backtracking: name the last index whose term could match, so
        # the leader skips a whole term per round trip instead of one entry.
        hint, hint_term = log.find_conflict_by_term(min(m.index, log.last_index()), m.log_term)
        self._reply(m, APPEND_RESP, index=m.index, reject=True, hint=hint, log_term=hint_term)

    def _handle_install(self, m: Message) -> None:
        """The leader no longer holds the entries we need: it sent its retained
        log from its first index, after the anchor (m.index, m.log_term), which
        it has committed. The state is the log: no snapshot to restore."""
        log = self.log
        anchor = m.index
        if anchor < log.committed:
            self._reply(m, APPEND_RESP, index=log.committed)
            return
        if m.commit < anchor:
            return  # malformed: an anchor is always committed
        if anchor == log.committed or log.matches(anchor, m.log_term):
            last_new = log.append_matched(anchor, m.entries, m.commit)
        else:
            try:
                membership = Membership.decode(m.data)
            except ValueError:
                return  # malformed
            if log.committed >= log.first_index():
                self._anomalies.append(
                    Anomaly(
                        m,
                        f"the install from {m.src} (anchor {anchor}) discards committed "
                        f"entries {log.first_index()}..{log.committed}",
                        refused=False,
                    )
                )
            log.install(Entry(anchor, m.log_term, m.data, ANCHOR), m.entries)
            last_new = anchor + len(m.entries)
            log.commit_to(min(m.commit, last_new))
            self._memberships = []
            self._apply_membership(anchor, membership)
        self._reply(m, APPEND_RESP, index=last_new)

    def _handle_quiesce(self, m: Message) -> None:
        log = self.log
        if log.last_index() == m.index and log.matches(m.index, m.log_term):
            log.commit_to(m.commit)
            if log.committed == m.commit:
                self._quiesced = True

    # -- membership ----------------------------------------------------------------------

    def _check_can_propose(self) -> None:
        if self.role != LEADER:
            raise NotLeader(self.leader)
        if self._transferee is not None:
            raise ProposalDropped(f"leadership is being transferred to {self._transferee}")
        if self._quiesced:
            self.wake()

    def _apply_membership(self, index: int, new: Membership) -> None:
        history = self._memberships
        history.append((index, new))
        first = self.log.first_index()
        while len(history) > 1 and history[1][0] < first:
            del history[0]
        if self.role == LEADER:
            departing = self._departing
            for node in set(self.membership.members) - set(new.members) - {self.id}:
                departing[node] = [index, 0, 0]
            for node in new.members:
                if departing.pop(node, None) is not None:
                    # Added back while still being told of its removal: its
                    # shell may have deleted its replica since, so what this
                    # leader knew of its log is void; it starts as a newcomer.
                    self._tracker.progress.pop(node, None)
        self.membership = new
        known = set(self._tracker.progress)
        self._track_members()
        for node, progress in self._tracker.progress.items():
            if node not in known:
                progress.force_send = True
        if self.role != LEADER:
            return
        if self.id not in new.voters:
            self._become_follower(self.term, None)  # a removed leader steps down
            return
        if self._transferee is not None and self._transferee not in new.voters:
            self._transferee = None
        if self._maybe_commit():
            self._commit_advanced()
        self._bcast = True

    def _tell_if_removed(self, node: str) -> None:
        """A vote request from `node`, which is no member: it was removed and
        never told (a leader since failed over). Track it as departing from
        the membership in effect (applied, so committed)."""
        if node in self.membership.members or node in self._departing or node == self.id:
            return
        self._departing[node] = [self._memberships[-1][0], 0, 0]
        self._track_members()
        self._tracker.progress[node].force_send = True
        self._bcast = True

    def _track_members(self) -> None:
        """Progress for the members and, on a leader, the departing nodes."""
        m = self.membership
        learners = m.learners + tuple(sorted(self._departing))
        self._tracker.set_members(m.voters, learners, self.log.last_index() + 1)

    def _tell_departing(self) -> None:
        """After a heartbeat round: stop tracking the departing nodes that
        answered enough heartbeats telling them their removal (counted as
        the answers arrive), or that this many rounds never reached."""
        done = []
        for node, told in self._departing.items():
            told[2] += 1
            if told[1] >= DEPARTING_TOLD or told[2] >= DEPARTING_HEARTBEATS_MAX:
                done.append(node)
        if done:
            for node in done:
                del self._departing[node]
            self._track_members()

    # -- helpers ----------------------------------------------------------------------------

    def _hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed)

    def _reply(
        self,
        m: Message,
        kind: str,
        *,
        index: int = 0,
        reject: bool = False,
        hint: int = 0,
        log_term: int = 0,
        context: int = 0,
    ) -> None:
        self._msgs.append(
            Message(
                kind,
                self.id,
                m.src,
                self.term,
                index,
                log_term,
                commit=0,
                reject=reject,
                hint=hint,
                context=context,
            )
        )


__all__ = ["CANDIDATE", "FOLLOWER", "LEADER", "PRE_CANDIDATE", "RaftCore"]

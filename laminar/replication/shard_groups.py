"""A shard's part in a cluster: its Raft groups, their links, and which replica is whose.

Placement (DESIGN.md): partition `pid` lives on the top `replication_factor`
nodes of the cluster view by weighted rendezvous, and on each of those nodes
on shard `shard_for(pid, cores)`. This object, one per shard of a clustered
node, holds the shard's Raft members of those partitions:

- groups are opened eagerly (`ensure_open`, called when a topic is created and
  at start for every topic), not on the first request: a follower must be up to
  vote and to take appends;
- the metadata partition (pid 0) is a Raft group too, on every node of a
  static cluster (a view has at most `METADATA_VOTERS_MAX` nodes); in a
  gossip cluster on `--metadata-voters` voters, every other member observing
  it as a learner (so every node has the topic list), and a node never
  deletes its metadata replica (a voter that drops out observes again);
- a move adds a replica on a node that may never have held the partition: the
  first authenticated leader message (append, install, heartbeat) for a
  partition this shard does not hold (no files here: a restarted replica is
  opened by the shard, not adopted) opens it as a learner, but only for a
  partition the metadata knows (`adopt_known`) and only while fewer than
  `ADOPTED_MAX` groups opened that way are still waiting for their log to
  name this node a member (a peer cannot make a shard open unbounded groups);
- a replica its group removed deletes its files (its term and vote with
  them), but only once the removal is final: a leader told it that its
  removal is committed and its own log applied it
  (`RaftCore.removal_confirmed`). What its log applied alone is not enough:
  a learner catching up replays old changes, and a node removed, added back
  and promoted that has not heard of it yet must keep its vote. The leader
  goes on telling it a while: such a message (`removed`) never opens a
  replica again (nor does anything else from that leader, which sends a
  node holding its removal nothing but that);
- a request for a partition this node holds no replica of gets NOT_LEADER
  naming the partition's first replica, so a client that routed with stale
  metadata learns where to go;
- a replica that cannot run is *offline*, reported once (log, `/health`,
  `/metrics`, `laminar status`) and never guessed at: one whose Raft state
  cannot be read (a damaged `raft-state.json`: `laminar repair` rebuilds it
  from its peers, see the README) is retried no sooner than
  `OFFLINE_RETRY_S` later; one whose group's Ready loop died (its storage
  failed) is reopened from disk after `REOPEN_AFTER_S`, doubling while it
  keeps failing. Meanwhile requests get NOT_LEADER naming the leader its
  peers' messages named (or another replica), never INTERNAL;
- peer connections (`laminar.replication.transport`) carry Raft traffic and
  the write protocol's requests between nodes (`laminar.replication.calls`:
  `calls` sends them, and a session serves the ops `serve_peers` allows);
  this shard authenticates the ones handed to it by its connections.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.log import LogConfig
from laminar.log.partitions import OFFLINE_RETRY_S, OfflinePartition, PartitionManager
from laminar.placement import replica_nodes
from laminar.raft import Entry, Message, RaftCore, RaftError
from laminar.raft.budget import ByteBudget
from laminar.raft.messages import APPEND, HEARTBEAT, INSTALL
from laminar.replication.auth import PeerAuth
from laminar.replication.calls import PeerCalls
from laminar.replication.group import RaftGroup
from laminar.replication.host import ELECTION_TICKS, TICK_S, RaftHost
from laminar.replication.metadata import METADATA_PID
from laminar.replication.nodes import Node, NodeView
from laminar.replication.opening import replica_config
from laminar.replication.placer import Placer, ReplicationFactorOf
from laminar.replication.raft_storage import SegmentedLogStorage
from laminar.replication.refusals import PeerRefusals
from laminar.replication.replica import RaftReplica
from laminar.replication.transport import PeerLinks, PeerSession, ServeRequest
from laminar.stream import Stream
from laminar.swim import MembershipView
from laminar.swim.agent import node_address
from laminar.wire import ErrorCode, Frame, NodeInfo
from laminar.wire.errors import RequestError

logger = logging.getLogger("laminar.replication")

HANDOVER_TIMEOUT_S: Final = 3.0
"""How long a draining shard waits for its leaderships to move (an election
timeout is 1-2 s; a transfer the core abandons is left to an election)."""
METADATA_VOTERS_MAX: Final = 7
"""Every node of a static cluster votes on metadata (gossip clusters: --metadata-voters)."""

REOPEN_AFTER_S: Final = 1.0
"""How soon a group whose Ready loop failed is reopened (doubling per failure)."""
REPAIR_HINT: Final = (
    "; stop this node and run `laminar repair {directory}` to rebuild the replica "
    "from its peers (README: Repairing a replica)"
)

ADOPTED_MAX: Final = 64
"""Groups opened on a leader's message whose log does not name this node yet."""
LEADER_KINDS: Final = frozenset({APPEND, INSTALL, HEARTBEAT})
"""What only a group's leader sends: the messages that may open a learner."""

Apply = Callable[[Sequence[Entry]], None]
KnownPartition = Callable[[int], LogConfig | None]
"""A replicated partition of this shard the metadata knows -> its log settings;
None for anything else."""


class ShardGroups:
    """This shard's Raft groups and peer links (see the module docstring)."""

    def __init__(
        self,
        view: NodeView,
        auth: PeerAuth,
        shard_id: int,
        cores: int,
        partitions: PartitionManager,
        max_frame_bytes: int,
        own_shard_ports: tuple[int, ...],
        move_bytes_per_s: int = 0,
        clock: Clock = SYSTEM_CLOCK,
        reopen_after_s: float = REOPEN_AFTER_S,
    ) -> None:
        if len(view.members) > METADATA_VOTERS_MAX:
            raise ValueError(
                f"a static cluster has at most {METADATA_VOTERS_MAX} nodes until membership "
                "gossip lands; use fewer --peers"
            )
        self.view = view
        self.auth = auth
        self.node_id = auth.node_id
        self.shard_id = shard_id
        self.cores = cores
        self.partitions = partitions
        self.max_frame_bytes = max_frame_bytes
        self._own_shard_ports = own_shard_ports
        self.refusals = PeerRefusals()
        """What peers sent that no correct node sends: counted, logged at a bounded rate."""
        self.clock = clock
        self.reopen_after_s = reopen_after_s
        """The first wait before a failed group is reopened (doubling after each failure)."""
        """Offline retries and peer silence are timed on it (links and host share it)."""
        self.links = PeerLinks(auth, lambda: self.view, max_frame_bytes, clock)
        self.calls = PeerCalls(auth, lambda: self.view, max_frame_bytes, clock)
        self._serve_peers: tuple[ServeRequest, frozenset[int]] | None = None
        self._reopened_by_message: set[int] = set()
        budget = ByteBudget(max(1, round(move_bytes_per_s * TICK_S))) if move_bytes_per_s else None
        self.host = RaftHost(
            self.links,
            on_unknown=self._adopt,
            move_budget=budget,
            on_failed=self._group_failed,
            clock=clock,
        )
        self.replicas: dict[int, RaftReplica] = {}
        self.offline: dict[int, OfflinePartition] = {}
        """Replicas this shard cannot run now, and why (see the module docstring)."""
        self._heard_leader: dict[int, tuple[int, str]] = {}
        """Offline replicas: (term, node) of the newest leader message each got."""
        self._opened_with: dict[int, _OpenArgs] = {}
        self._failures: dict[int, int] = {}
        self._reopening: dict[int, asyncio.Task[None]] = {}
        self._orphans: dict[int, RaftReplica] = {}
        """Replicas whose group failed: the reopened group is bound to them again."""
        self._opening: dict[int, asyncio.Task[RaftReplica]] = {}
        self._sessions: set[asyncio.Task[None]] = set()
        self._rng = random.Random()
        self._known: KnownPartition | None = None
        self._adopted: set[int] = set()
        """Groups opened on a leader's message, until their log names this node."""
        self.adoptions_refused = 0
        self.retired = 0
        self._retirer: asyncio.Task[None] | None = None
        self.placer: Placer | None = None
        self._placing: asyncio.Task[None] | None = None
        self._metadata_adoption: tuple[LogConfig, Apply] | None = None
        self.joining = False
        """Started with --join: the metadata group is the seed's, opened on its messages."""

    def start(self) -> None:
        self.host.start()
        self._retirer = asyncio.get_running_loop().create_task(self._retire_forever())

    async def _retire_forever(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                await self.retire_removed()
            except Exception:
                logger.exception("retiring removed replicas failed")

    async def retire_removed(self) -> list[int]:
        """Delete the replicas whose removal is final (see the module
        docstring); their pids."""
        retired = []
        for pid, replica in list(self.replicas.items()):
            if pid == METADATA_PID and self.placer is not None:
                continue  # every member observes it: a voter that drops out is added back
            if not replica.group.core.removal_confirmed:
                continue
            await self.close_group(pid)
            await self.partitions.remove_partition(pid)
            self.retired += 1
            retired.append(pid)
            logger.info("partition %d: removed from its group; its files are deleted", pid)
        return retired

    # -- placement ---------------------------------------------------------------

    def placement(self) -> dict[str, float]:
        """The nodes placement may put replicas on now, with their weights: the
        --peers view; in a gossip cluster the controller's placed members
        (live ones and those stopped within the dead grace, none that is
        decommissioned), so a topic created while a node restarts is placed
        as if it had not (else its partitions would move there once it is back)."""
        if self.placer is not None and (placed := self.placer.placed()) is not None:
            return placed
        return self.view.weights()

    def members_known(self) -> frozenset[str]:
        """Every node membership knows, down ones too (this one at least)."""
        known = self.placer.members_known() if self.placer is not None else frozenset()
        return known | set(self.view.node_ids)

    def replica_nodes(self, pid: int, replication_factor: int) -> list[str]:
        return replica_nodes(pid, self.placement(), replication_factor)

    def holds(self, pid: int, replication_factor: int) -> bool:
        """True if this node holds a replica of `pid` (on whichever shard): a
        member of its group as this node's log applied it, once the group is
        open here (moves make that differ from placement); else placement's."""
        replica = self.replicas.get(pid)
        if replica is not None:
            return self.node_id in replica.group.core.membership.members
        return self.node_id in self.replica_nodes(pid, replication_factor)

    def replicated(self, replication_factor: int) -> bool:
        """Whether a topic's partitions are Raft groups here: with more than one
        replica, and always in a gossip cluster (members come and go, so even
        a single replica must be able to move, which a group can)."""
        return replication_factor > 1 or self.placer is not None

    def serves(self, pid: int, replication_factor: int) -> bool:
        """True if a request for `pid` may be served here: this node holds a
        replica, and (in a gossip cluster) its group is open or opening. A
        group is never opened for a request there: placement names a move's
        target before the group added it, and a replica opened on that guess
        would count itself a voter."""
        if not self.holds(pid, replication_factor):
            return False
        return (
            self.placer is None
            or pid in self.replicas
            or pid in self._opening
            or pid in self.offline
        )

    def not_here(self, pid: int, replication_factor: int) -> RequestError:
        """The refusal for a partition this node holds no replica of: a node
        that left the group names its voters and the leader it last knew;
        any other names placement's replicas."""
        replica = self.replicas.get(pid)
        if replica is not None:
            core = replica.group.core
            nodes = list(core.membership.voters)
            leader = core.leader if core.leader in nodes else nodes[0]
        else:
            nodes = self.replica_nodes(pid, replication_factor)
            # The replica after this node's in placement's order: nodes that all
            # say so send a client round every replica, never back and forth.
            after = nodes.index(self.node_id) + 1 if self.node_id in nodes else 0
            leader = nodes[after % len(nodes)]
            if self._reopen_held(pid, leader):
                return RequestError(
                    ErrorCode.NOT_READY,
                    f"node {self.node_id} is reopening its replica of partition {pid}; retry",
                )
        return RequestError(
            ErrorCode.NOT_LEADER,
            f"node {self.node_id} holds no replica of partition {pid}; nodes {nodes} do",
            leader=leader,
        )

    # -- groups ------------------------------------------------------------------

    # -- membership gossip (nodes started with a cluster secret, no --peers) ------

    def follow_membership(
        self,
        replication_factor_of: ReplicationFactorOf,
        dead_grace_ms: int,
        decommissioned: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        """Take the cluster view from SWIM from now on (`on_membership`), and
        move the groups this shard leads to their placement targets
        (`decommissioned`: the nodes the metadata says leave for good)."""
        self.placer = Placer(
            self._cores,
            replication_factor_of,
            dead_grace_ms,
            observed=frozenset({METADATA_PID}),
            decommissioned=decommissioned,
            clock=self.clock,
        )
        self._placing = asyncio.get_running_loop().create_task(self.placer.run())

    def on_membership(self, view: MembershipView) -> None:
        """A new SWIM view: the live members (alive or suspect) become the
        cluster view (links, placement, metadata), at their node addresses."""
        members = []
        for member in view.live():
            try:
                host, port = node_address(member.address)
            except ValueError:
                logger.warning(
                    "member %s advertises %r: not a node address", member.node_id, member.address
                )
                continue
            members.append(Node(member.node_id, host, port, member.weight))
        if view.version > self.view.version and any(m.node_id == self.node_id for m in members):
            self.view = NodeView(view.version, tuple(members))
        if self.placer is not None:
            self.placer.observe(view)

    def move_stats(self) -> dict[str, Any]:
        """Moves this shard drives (it leads the group): for /status and /metrics."""
        moving = []
        for pid, group in self.host.groups.items():
            core = group.core
            observing = self.placer.state.observing.get(pid, ()) if self.placer else ()
            learners = [n for n in core.membership.learners if n not in observing]
            if not group.is_leader or not learners:
                continue
            status = core.status()
            for learner in learners:
                progress = status.progress.get(learner)
                behind = status.last_index - (progress.match if progress else 0)
                moving.append({"pid": pid, "learner": learner, "records_to_go": max(0, behind)})
        budget = self.host.move_budget
        placer = self.placer
        return {
            "moving": moving,
            "bytes_sent": budget.sent_bytes if budget is not None else 0,
            "sends_deferred": budget.refused if budget is not None else 0,
            "steps_started": placer.state.steps_started if placer is not None else 0,
            "steps_refused": placer.state.steps_refused if placer is not None else 0,
            "decommissioning": placer.state.decommissioning if placer is not None else {},
            "retired": self.retired,
        }

    def group_members(self, pid: int) -> dict[str, Any] | None:
        """A group's membership as this replica applied it (None: not held here)."""
        replica = self.replicas.get(pid)
        if replica is None:
            return None
        core = replica.group.core
        return {
            "voters": list(core.membership.voters),
            "learners": list(core.membership.learners),
            "leader": core.leader,
            "quiesced": core.quiesced,
        }

    def _cores(self) -> list[tuple[int, RaftCore]]:
        return [(pid, group.core) for pid, group in self.host.groups.items()]

    def adopt_metadata(self, log_config: LogConfig, apply: Apply) -> None:
        """Open the metadata group on the first message of one of its members
        (a node that joins: the seed's group takes it in, as a learner first;
        after a restart its files say what it is)."""
        self._metadata_adoption = (log_config, apply)

    def adopt_known(self, known: KnownPartition) -> None:
        """Open groups on a leader's first message, for partitions `known` names."""
        self._known = known

    def _adopt(self, pid: int, message: Message) -> None:
        """A leader's message for a group this shard does not hold: a move made
        this node a learner. Opened with the sender as the only voter and this
        node a learner, so it never campaigns before its log (or the install's
        anchor) gives it the group's real membership."""
        if pid in self._opening:
            return
        if pid in self.offline:
            self._note_leader(pid, message)
            return
        if message.removed and not os.path.isdir(self.partitions.directory(pid)):
            # The leader telling this node that its removal is final: it was
            # tracked as departing and retired its replica (the leader tells
            # it a few more times). No invitation: a learner opened on it
            # would wait for a log nobody sends it, for good.
            return
        apply: Apply | None = None
        if pid == METADATA_PID and self._metadata_adoption is not None:
            # Any message: a restarted voter's vote may be what the group needs.
            log_config, apply = self._metadata_adoption
        elif message.kind not in LEADER_KINDS and not self._held_before(pid):
            return
        elif os.path.isdir(self.partitions.directory(pid)) and not self._held_before(pid):
            # A replica this node holds (its files are here: a restart) is opened
            # by the shard as the metadata replays it, with the membership its
            # log recorded or the group's first one; adopted as a learner of
            # the sender it would never vote again (its log may record nothing).
            # (Groups reopened by any message are the exception: nothing else
            # opens them.)
            return
        elif self._known is None or (known := self._known(pid)) is None:
            self.adoptions_refused += 1
            return
        else:
            log_config = known
        self._open_as_learner(pid, message.src, log_config, apply)

    def _open_as_learner(
        self, pid: int, voter: str, log_config: LogConfig, apply: Apply | None = None
    ) -> None:
        """Open `pid`'s group with `voter` as its only voter and this node a
        learner, until its log (or an install's anchor) says otherwise."""
        self._adopted = {p for p in self._adopted if not self._confirmed(p)}
        if len(self._adopted) >= ADOPTED_MAX:
            self.adoptions_refused += 1
            return
        self._adopted.add(pid)
        self.partitions.unretire(pid)
        logger.info("partition %d: opening a replica for leader %s", pid, voter)
        task = asyncio.get_running_loop().create_task(
            self.ensure_open(
                pid,
                (voter,),
                log_config,
                apply,
                replay=apply is not None,
                learners=(self.node_id,),
            )
        )
        task.add_done_callback(functools.partial(_report_adoption, pid))

    def reopen_on_any_message(self, pid: int) -> None:
        """Open `pid`'s group, if its files are here, on any message of a member
        rather than at start (a joined node's write decisions group: which
        nodes it started on is in its log, not in the metadata)."""
        self._reopened_by_message.add(pid)

    def _reopen_held(self, pid: int, voter: str) -> bool:
        """A request reached a group `reopen_on_any_message` named, whose files
        are here, before any message of a member did (its leader may be
        quiesced, and sends nothing until a follower's election timeout): open
        it now, as a message would. Whether it is opening."""
        if pid in self._opening:
            return True
        if not self._held_before(pid) or self._known is None:
            return False
        log_config = self._known(pid)
        if log_config is None:
            return False
        self._open_as_learner(pid, voter, log_config)
        return pid in self._adopted

    def _held_before(self, pid: int) -> bool:
        """A group `reopen_on_any_message` named whose files are here: any
        message opens it, since a restarted voter's vote may be what the group
        needs to elect a leader; its log says what this node is in it."""
        return (
            pid in self._reopened_by_message
            and os.path.isdir(self.partitions.directory(pid))
            and not self.partitions.retired(pid)
        )

    def _confirmed(self, pid: int) -> bool:
        """The adopted group is gone, or a membership its log applied (or an
        install's anchor) names this node."""
        replica = self.replicas.get(pid)
        if replica is None:
            return pid not in self._opening
        recorded = replica.group.storage.applied_membership()
        return recorded is not None and self.node_id in recorded.members

    async def ensure_open(
        self,
        pid: int,
        voters: Sequence[str],
        log_config: LogConfig,
        apply: Apply | None = None,
        replay: bool = False,
        learners: Sequence[str] = (),
    ) -> RaftReplica:
        """This shard's member of `pid`'s group, opened (and recovered) once.

        `replay`: deliver every committed entry again after a restart (the
        metadata state machine is rebuilt that way); partitions need not."""
        replica = self.replicas.get(pid)
        if replica is not None:
            return replica
        offline = self.offline.get(pid)
        if offline is not None and (
            pid in self._reopening or self.clock.monotonic() < offline.retry_at
        ):
            raise self._refusal(offline, voters)
        args = _OpenArgs(tuple(voters), log_config, apply, replay, tuple(learners))
        return await self._open_once(pid, args)

    async def _open_once(self, pid: int, args: _OpenArgs) -> RaftReplica:
        """Open `pid`'s replica, or wait for the opening already under way."""
        task = self._opening.get(pid)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._open(pid, args))
            self._opening[pid] = task
        return await asyncio.shield(task)

    async def _open(self, pid: int, args: _OpenArgs) -> RaftReplica:
        self._opened_with[pid] = args
        try:
            log = await self.partitions.get(pid, args.log_config)
            try:
                storage = await SegmentedLogStorage.over(log, stamped=True)
                config = replica_config(
                    self.node_id,
                    storage,
                    args.voters,
                    args.learners,
                    replay=args.replay,
                    election_ticks=ELECTION_TICKS,
                )
                core = RaftCore(config, storage, random.Random(self._rng.getrandbits(64)))
            except RaftError as exc:  # its Raft state cannot be read: never guess
                reason = f"{exc}{REPAIR_HINT.format(directory=log.directory)}"
                offline = self._went_offline(pid, reason, OFFLINE_RETRY_S)
                raise self._refusal(offline, args.voters) from None
            group = RaftGroup(
                pid, core, storage, self.host.send, args.apply, self.refusals.raft, self.clock
            )
            self.host.add(group)
            replica = self._orphans.pop(pid, None)
            if replica is None:
                replica = RaftReplica(group, self._not_silent)
            else:
                replica.rebind(group)
            self.replicas[pid] = replica
            if self.offline.pop(pid, None) is not None:
                logger.warning("partition %d: this node's replica is back online", pid)
            self._heard_leader.pop(pid, None)
            return replica
        finally:
            del self._opening[pid]

    # -- offline replicas ----------------------------------------------------------

    def _went_offline(self, pid: int, reason: str, retry_s: float) -> OfflinePartition:
        """Record that this shard cannot run `pid`'s replica (logged once per reason)."""
        old = self.offline.get(pid)
        same = old is not None and old.reason == reason
        since = old.since if old is not None and same else self.clock.wall_ms() / 1000
        offline = OfflinePartition(pid, reason, since, self.clock.monotonic() + retry_s)
        self.offline[pid] = offline
        if not same:
            logger.error("partition %d: this node's replica is offline: %s", pid, reason)
        return offline

    def _refusal(self, offline: OfflinePartition, voters: Sequence[str]) -> RequestError:
        """The answer for a request to an offline replica: NOT_LEADER naming the
        leader its peers' messages named, else another replica; NOT_READY when
        there is no other replica to try."""
        heard = self._heard_leader.get(offline.pid)
        leader = heard[1] if heard else next((n for n in voters if n != self.node_id), None)
        where = (
            f"node {self.node_id}'s replica of partition {offline.pid} is offline "
            f"({offline.reason})"
        )
        if leader is None:
            return RequestError(ErrorCode.NOT_READY, f"{where}; retry later")
        named = f"node {leader} leads it" if heard else f"try node {leader}"
        return RequestError(ErrorCode.NOT_LEADER, f"{where}; {named}", leader=leader)

    def _note_leader(self, pid: int, message: Message) -> None:
        """A leader's message reached an offline replica: who leads, as of which term."""
        if message.kind in LEADER_KINDS:
            heard = self._heard_leader.get(pid)
            if heard is None or message.term >= heard[0]:
                self._heard_leader[pid] = (message.term, message.src)

    def _group_failed(self, pid: int, exc: BaseException) -> None:
        """A group's Ready loop died (`RaftHost`): offline until it is reopened."""
        replica = self.replicas.pop(pid, None)
        if replica is not None:
            self._orphans[pid] = replica
        failures = self._failures[pid] = self._failures.get(pid, 0) + 1
        delay = min(OFFLINE_RETRY_S, self.reopen_after_s * 2 ** (failures - 1))
        self._went_offline(pid, f"its Raft group stopped: {exc!r}; reopening it from disk", delay)
        task = asyncio.get_running_loop().create_task(self._reopen(pid, delay))
        self._reopening[pid] = task

    async def _reopen(self, pid: int, delay_s: float) -> None:
        """Close the failed group and its log (recovery then reads what the
        disk really holds), wait, and open the replica again, until it opens
        (waiting twice as long after each failure, up to `OFFLINE_RETRY_S`)
        or its Raft state turns out damaged (that waits for a repair)."""
        try:
            await self.host.remove(pid)
            await self.partitions.close_partition(pid)
            while True:
                await asyncio.sleep(delay_s)
                try:
                    await self._open_once(pid, self._opened_with[pid])
                    return
                except RequestError:
                    return  # offline, and recorded so (a damaged state file)
                except Exception as exc:
                    delay_s = min(OFFLINE_RETRY_S, 2 * delay_s)
                    self._went_offline(pid, f"reopening its Raft group failed: {exc}", delay_s)
        finally:
            self._reopening.pop(pid, None)

    def retention_keeps_from(self, pid: int) -> int:
        """The first log index retention must keep of `pid` on this shard: the
        last committed record (Raft's anchor when older ones are gone) and all
        after it; everything when its group is not open here."""
        replica = self.replicas.get(pid)
        return 0 if replica is None else max(0, replica.highest_index - 1)

    def silent(self, node_id: str) -> bool:
        """Heard from before, but not within an election timeout (keepalives
        arrive every tick, also while every group is quiesced): gone quiet."""
        heard = self.links.last_heard(node_id)
        return heard is not None and self.clock.monotonic() - heard > TICK_S * ELECTION_TICKS

    def heard_from(self, node_id: str) -> bool:
        """Whether `node_id` ever sent this shard anything (a shard that shares
        no group with a node, and is not the one its keepalives go to, never hears it)."""
        return self.links.last_heard(node_id) is not None

    def _not_silent(self, node_id: str) -> bool:
        """What a replica may count as reachable: not gone quiet (a node never
        heard yet, as right after a topic is created, is not cut off for that)."""
        return not self.silent(node_id)

    async def close_group(self, pid: int) -> None:
        """Stop `pid`'s group (the partition manager closes and removes its files)."""
        reopening = self._reopening.pop(pid, None)
        if reopening is not None:
            reopening.cancel()
            await asyncio.gather(reopening, return_exceptions=True)
        task = self._opening.get(pid)
        if task is not None:
            await asyncio.wait([task])
        self.replicas.pop(pid, None)
        for table in (self.offline, self._heard_leader, self._orphans, self._failures):
            table.pop(pid, None)
        self._opened_with.pop(pid, None)
        await self.host.remove(pid)

    # -- peers -------------------------------------------------------------------

    def serve_peers(self, serve: ServeRequest, ops: frozenset[int]) -> None:
        """Let authenticated peers ask `ops` (served by `serve`), besides Raft."""
        self._serve_peers = (serve, ops)

    def accept_peer(
        self, stream: Stream, hello: Frame, on_handshake_done: Callable[[], None]
    ) -> None:
        """Serve a connection whose first frame was PEER_HELLO (handed over by
        `laminar.shards.connection`); `on_handshake_done` once the handshake
        ended, either way (the shard counts it against its caps until then)."""
        serve, ops = self._serve_peers or (None, frozenset[int]())
        session = PeerSession(
            stream,
            self.auth,
            self.host.receive,
            self.links.heard,
            self.max_frame_bytes,
            serve,
            ops,
            self.refusals,
            on_handshake_done,
        )
        task = asyncio.get_running_loop().create_task(session.serve(hello))
        self._sessions.add(task)
        task.add_done_callback(self._sessions.discard)

    def nodes(self) -> tuple[NodeInfo, ...]:
        """Every node of the view, with the shard ports this shard has learned."""
        return tuple(
            NodeInfo(
                m.node_id,
                m.host,
                m.port,
                self._own_shard_ports
                if m.node_id == self.node_id
                else self.links.shard_ports(m.node_id),
                m.weight,
            )
            for m in self.view.members
        )

    def leaders(self) -> tuple[tuple[int, str], ...]:
        """(partition id, leader node id) of each group this shard hosts a
        replica of and knows the leader of (topic partitions and the write
        decisions group, not the metadata group): the metadata answer's
        routing hints."""
        return tuple(
            (pid, leader)
            for pid, replica in sorted(self.replicas.items())
            if pid != METADATA_PID and (leader := replica.group.leader) is not None
        )

    async def hand_over_leaderships(self) -> None:
        """Before a drain stops this shard: its leaderships move to followers
        that are up to date, so clients wait for no election."""
        moved, tried = await self.host.hand_over_leaderships(HANDOVER_TIMEOUT_S)
        if tried:
            logger.info(
                "shard %d: handed over %d of %d leaderships before stopping",
                self.shard_id,
                moved,
                tried,
            )

    async def close(self) -> None:
        for task in (self._retirer, self._placing, *self._reopening.values()):
            if task is not None:
                task.cancel()
        for task in list(self._sessions):
            task.cancel()
        await self.host.close()
        self.links.close()
        self.calls.close()
        self.replicas.clear()


@dataclass(frozen=True)
class _OpenArgs:
    """What a replica was opened with (a failed group is reopened the same way)."""

    voters: tuple[str, ...]
    log_config: LogConfig
    apply: Apply | None
    replay: bool
    learners: tuple[str, ...]


def _report_adoption(pid: int, task: asyncio.Task[RaftReplica]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("partition %d: could not open a replica: %s", pid, task.exception())

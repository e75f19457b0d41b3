"""Raft groups on real segmented logs, three hosts in one loop over a fake network.

The network delivers each message on the next loop iteration and can cut a
node off; everything else is the real shell (`RaftGroup`, `RaftHost`) over the
real `SegmentedLogStorage` with fsync. Checks are by identity: every record
acknowledged is on every replica, once, at the same index with the same
timestamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from laminar.log import Fault, LogConfig, LogRecord, SimulatedDisk
from laminar.log.simdisk import KeepOrLose
from laminar.raft import LEADER, ConfigChangeRefused, Membership, Message, NotLeader, RaftCore
from laminar.raft.messages import APPEND
from laminar.replication.group import ProposalLost, RaftGroup
from laminar.replication.host import RaftHost
from laminar.replication.opening import replica_config
from laminar.replication.raft_storage import CONTROL_TERM_BIT, SegmentedLogStorage
from laminar.replication.replica import RaftReplica
from laminar.shards.producers import IdempotentProducers
from laminar.wire import ErrorCode, ProduceRequest
from laminar.wire.errors import RequestError
from tests.support import wait_until_async

PID = 7
NODES = ("n1", "n2", "n3")
TICK_S = 0.01


class FakeNetwork:
    """Delivers messages between hosts on the next iteration; cut nodes hear nothing."""

    def __init__(self) -> None:
        self.hosts: dict[str, RaftHost] = {}
        self.cut: set[str] = set()
        self.heard: dict[str, float] = {}
        self.drop_appends = False
        """Lose every append (heartbeats still pass: nobody holds an election)."""
        self.lose: Callable[[str, str, Message], bool] = lambda src, dst, message: False
        """Lose the messages this says (src, dst, message) to lose."""
        self.links: set[frozenset[str]] | None = None
        """When set, only these pairs of nodes hear each other."""
        self.ticks: Counter[str] = Counter()
        """Each host's ticks so far (its ticker ran: what proves time has passed)."""

    def transport(self, me: str) -> _Link:
        return _Link(self, me)


class _Link:
    def __init__(self, net: FakeNetwork, me: str) -> None:
        self.net, self.me = net, me

    def send(self, node_id: str, pid: int, message: Message) -> None:
        net = self.net
        if self.me in net.cut or node_id in net.cut or node_id not in net.hosts:
            return
        if net.links is not None and frozenset((self.me, node_id)) not in net.links:
            return
        if (net.drop_appends and message.kind == APPEND) or net.lose(self.me, node_id, message):
            return
        host = net.hosts[node_id]

        def deliver() -> None:
            host.receive(pid, message)

        asyncio.get_running_loop().call_soon(deliver)

    def last_heard(self, node_id: str) -> float | None:
        return self.net.heard.get(node_id)

    def tick(self) -> None:
        """Keepalives: a node that is not cut is heard every tick."""
        self.net.ticks[self.me] += 1
        if self.me not in self.net.cut:
            self.net.heard[self.me] = time.monotonic()


LOG_CONFIG = LogConfig(segment_bytes=1 << 20, preallocate_bytes=0)


async def _open(
    tmp: Path,
    node: str,
    net: FakeNetwork,
    voters: tuple[str, ...] = NODES,
    backend: SimulatedDisk | None = None,
) -> RaftHost:
    storage = await SegmentedLogStorage.open(tmp / node, LOG_CONFIG, backend=backend, stamped=True)
    config = replica_config(node, storage, voters)  # the placement's guess
    core = RaftCore(config, storage, random.Random(hash(node) & 0xFFFF))
    host = RaftHost(net.transport(node), tick_s=TICK_S)
    host.add(RaftGroup(PID, core, storage, host.send))
    host.start()
    net.hosts[node] = host
    return host


async def _restart(tmp: Path, node: str, net: FakeNetwork) -> RaftHost:
    """Stop `node` (its files stay) and open it again."""
    host = net.hosts.pop(node)
    storage = host.groups[PID].storage
    await host.close()
    await storage.close()
    return await _open(tmp, node, net)


async def _until(
    check: Callable[[], Any], timeout_s: float = 30.0, what: str = "the condition"
) -> Any:
    """`wait_until_async` with the simulation's defaults (most checks here name themselves)."""
    return await wait_until_async(check, what, timeout_s)


async def _ticks(net: FakeNetwork, node: str, count: int) -> None:
    """Wait until `node`'s host has ticked `count` more times: the heartbeats,
    timeouts and retirer passes in which whatever could happen would have (a
    "nothing happened" check waits on this, not on a clock: a slow machine
    stretches the wait instead of making the check vacuous)."""
    end = net.ticks[node] + count
    await _until(lambda: net.ticks[node] >= end, what=f"{count} ticks of {node}")


def _leader(net: FakeNetwork) -> RaftGroup | None:
    for node, host in net.hosts.items():
        group = host.groups.get(PID)
        if node not in net.cut and group is not None and group.writable:
            return group
    return None


async def _produce(net: FakeNetwork, blob: bytes) -> tuple[int, int]:
    """Produce through whoever leads; (log index, timestamp) once committed.
    After an unknown outcome (the proposal lost, or its leader gone) it first
    looks whether the entry committed after all: a retry never writes a
    blob twice (the tests compare logs value by value)."""
    while True:
        group = await _until(lambda: _leader(net))
        try:
            index, ts, done = group.propose([blob])
        except NotLeader:
            await asyncio.sleep(TICK_S)
            continue
        while not done.done() and _leader(net) is group:
            await asyncio.wait([done], timeout=10 * TICK_S)
        if done.done() and done.exception() is None:
            return index, ts
        done.add_done_callback(lambda f: f.cancelled() or f.exception())  # read below
        committed = await _settled_records(net)
        copies = [(index, ts) for index, ts, value in committed if value == blob]
        if copies:
            return copies[0]


async def _settled_records(net: FakeNetwork) -> list[tuple[int, int, bytes]]:
    """The committed records of a leader that has committed an entry of its
    own term (its election's no-op): an entry it does not hold committed then
    never commits."""
    while True:
        group = await _until(lambda: _leader(net))
        records = await _committed(group)
        if records and records[-1].term & ~CONTROL_TERM_BIT == group.core.term:
            return [(r.index, r.timestamp_ms, r.value) for r in records if not r.term >> 63]
        await asyncio.sleep(TICK_S)


async def _committed(group: RaftGroup) -> list[LogRecord]:
    log = group.storage.log
    records = await log.read_range(log.lowest_index, max_bytes=1 << 30, max_records=100_000)
    return [r for r in records if r.index < group.committed_end]


async def _records(host: RaftHost) -> list[tuple[int, int, bytes]]:
    records = await _committed(host.groups[PID])
    return [(r.index, r.timestamp_ms, r.value) for r in records if not r.term >> 63]


def _run(
    tmp_path: Path,
    scenario: Callable[[FakeNetwork], Awaitable[None]],
    nodes: tuple[str, ...] = NODES,
    opened: tuple[str, ...] | None = None,
) -> None:
    """Run `scenario` over a group of `nodes`, of which those in `opened`
    (default: all) are opened here as plain hosts."""

    async def main() -> None:
        net = FakeNetwork()
        try:
            for node in nodes if opened is None else opened:
                await _open(tmp_path, node, net, nodes)
            await scenario(net)
        finally:
            for host in net.hosts.values():
                storages = [group.storage for group in host.groups.values()]
                await host.close()
                for storage in storages:
                    await storage.close()

    asyncio.run(main())


def test_acknowledged_records_are_on_every_replica_with_the_leaders_timestamps(
    tmp_path: Path,
) -> None:
    async def scenario(net: FakeNetwork) -> None:
        acked = {}
        for n in range(30):
            blob = b"r%d" % n
            acked[blob] = await _produce(net, blob)
        # Let the followers learn the last commit index.
        for host in net.hosts.values():
            await _until(
                lambda h=host: h.groups[PID].committed_end >= max(i for i, _ in acked.values()) + 1
            )
        for node, host in net.hosts.items():
            stored = {value: (index, ts) for index, ts, value in await _records(host)}
            assert stored == acked, node

    _run(tmp_path, scenario)


def test_a_cut_leader_loses_its_uncommitted_proposal_and_the_rest_carry_on(
    tmp_path: Path,
) -> None:
    async def scenario(net: FakeNetwork) -> None:
        await _produce(net, b"first")
        old = await _until(lambda: _leader(net))
        old_node = old.core.id
        net.cut.add(old_node)
        _, _, lost = old.propose([b"never-committed"])
        acked = [await _produce(net, b"after-%d" % n) for n in range(5)]
        new = await _until(lambda: _leader(net))
        assert new.core.id != old_node
        net.cut.clear()  # heal: the old leader learns the new term, truncates
        with pytest.raises(ProposalLost):
            await asyncio.wait_for(lost, 20)
        end = acked[-1][0] + 1
        for host in net.hosts.values():
            await _until(lambda h=host: h.groups[PID].committed_end >= end)
        logs = [await _records(h) for h in net.hosts.values()]
        assert logs[0] == logs[1] == logs[2]
        values = [value for _, _, value in logs[0]]
        assert b"never-committed" not in values
        assert values.count(b"first") == 1 and all(
            values.count(b"after-%d" % n) == 1 for n in range(5)
        )
        assert net.hosts[old_node].groups[PID].core.role != LEADER

    _run(tmp_path, scenario)


def test_a_proposal_gone_from_the_leaders_log_may_still_commit_so_its_outcome_is_unknown(
    tmp_path: Path,
) -> None:
    """Raft's Figure 8 with five replicas. Leader A's batch reaches B only; C,
    D, E elect W, whose no-op reaches nobody but A, where it replaces the
    batch: A's proposal is gone from its log. Then B, D, E elect B, which
    still holds the batch, and commit it. So A must answer OUTCOME_UNKNOWN,
    not a refusal (NOT_LEADER, "not appended"), which a client would take as
    leave to send the batch again or drop it."""
    five = ("n1", "n2", "n3", "n4", "n5")

    def pairs(*nodes: str) -> set[frozenset[str]]:
        return {frozenset((x, y)) for x in nodes for y in nodes if x != y}

    def leader_among(net: FakeNetwork, nodes: set[str]) -> str | None:
        return next((n for n in nodes if net.hosts[n].groups[PID].core.role == LEADER), None)

    async def scenario(net: FakeNetwork) -> None:
        await _produce(net, b"first")
        old = await _until(lambda: _leader(net))
        a = old.core.id
        b = next(n for n in five if n != a)
        net.links = pairs(a, b)
        batch = ProduceRequest.from_values(PID, [b"figure-8"]).blobs
        answer = asyncio.ensure_future(RaftReplica(old).append_stamped(batch))
        await asyncio.sleep(0)
        index = old.core.log.last_index()
        await _until(lambda: net.hosts[b].groups[PID].core.log.last_index() >= index)
        rest = set(five) - {a, b}
        net.links, net.drop_appends = pairs(*rest), True  # W's no-op goes nowhere
        w = await _until(lambda: leader_among(net, rest))
        net.links, net.drop_appends = pairs(w, a), False  # ...but to A
        with pytest.raises(RequestError) as lost:
            await asyncio.wait_for(answer, 20)
        assert lost.value.code is ErrorCode.OUTCOME_UNKNOWN
        net.links = pairs(b, *(rest - {w}))
        assert await _until(lambda: leader_among(net, {b} | rest - {w})) == b
        for node in {b} | rest - {w}:
            await _until(lambda n=node: net.hosts[n].groups[PID].committed_end > index)
            values = [value for _, _, value in await _records(net.hosts[node])]
            assert values.count(batch[0]) == 1, node

    _run(tmp_path, scenario, five)


def test_idle_groups_quiesce_and_wake_when_the_leaders_node_goes_silent(
    tmp_path: Path,
) -> None:
    async def scenario(net: FakeNetwork) -> None:
        await _produce(net, b"x")
        await _until(lambda: all(h.groups[PID].core.quiesced for h in net.hosts.values()))
        old = await _until(lambda: _leader(net))
        net.cut.add(old.core.id)
        new = await _until(lambda: _leader(net) if _leader(net) is not old else None)
        assert new.core.term > old.core.term

    _run(tmp_path, scenario)


def test_a_hand_over_moves_leadership_to_an_up_to_date_follower(tmp_path: Path) -> None:
    """Draining: the leader hands over (no election timeout has to pass); while
    it runs, a write is refused naming the transferee, and nothing acked is lost."""

    async def scenario(net: FakeNetwork) -> None:
        acked = [await _produce(net, b"before-%d" % n) for n in range(5)]
        old = await _until(lambda: _leader(net))
        old_host = net.hosts[old.core.id]
        assert old.hand_over()
        transferee = old.core.status().transferee
        assert transferee is not None and transferee != old.core.id
        with pytest.raises(RequestError) as refused:
            await RaftReplica(old).append_stamped([b"during"])
        assert refused.value.code is ErrorCode.NOT_LEADER
        assert refused.value.leader == transferee
        moved, tried = await old_host.hand_over_leaderships(timeout_s=20)
        assert moved == tried  # 1 of 1, or 0 of 0 if it had moved already
        new = await _until(lambda: _leader(net))
        assert new.core.id == transferee
        acked.append(await _produce(net, b"after"))
        for host in net.hosts.values():
            await _until(lambda h=host: h.groups[PID].committed_end >= acked[-1][0] + 1)
        values = [value for _, _, value in await _records(net.hosts[transferee])]
        assert b"during" not in values
        assert [values.count(b"before-%d" % n) for n in range(5)] == [1] * 5

    _run(tmp_path, scenario)


def test_an_idempotent_batch_whose_commit_timed_out_is_not_appended_twice(tmp_path: Path) -> None:
    """A batch proposed while the followers are cut times out (outcome unknown)
    but stays in the leader's log; once they are back it commits. The producer
    sends it again: the partition must answer with the first copy's index,
    not append it a second time."""

    async def scenario(net: FakeNetwork) -> None:
        await _produce(net, b"first")
        leader = await _until(lambda: _leader(net))
        replica = RaftReplica(leader, append_timeout_s=0.3)
        producers = IdempotentProducers()
        batch = ProduceRequest.from_values(PID, [b"once"], producer_id=9, sequence=0)
        net.drop_appends = True
        with pytest.raises(RequestError) as unknown:
            await producers.append(replica, batch)
        assert unknown.value.code is ErrorCode.OUTCOME_UNKNOWN
        net.drop_appends = False
        first, _, appended_now = await producers.append(replica, batch)  # the retry
        assert appended_now == 0
        for host in net.hosts.values():
            await _until(lambda h=host: h.groups[PID].committed_end > first)
        values = [value for _, _, value in await _records(net.hosts[leader.core.id])]
        assert values.count(batch.blobs[0]) == 1

    _run(tmp_path, scenario)


def test_pipelined_idempotent_batches_commit_in_order_on_every_replica(tmp_path: Path) -> None:
    async def scenario(net: FakeNetwork) -> None:
        await _produce(net, b"first")
        leader = await _until(lambda: _leader(net))
        replica, producers = RaftReplica(leader), IdempotentProducers()
        batches = [
            ProduceRequest.from_values(PID, [b"p%d" % i], producer_id=5, sequence=i)
            for i in range(20)
        ]
        answers = await asyncio.gather(*(producers.append(replica, b) for b in batches))
        firsts = [first for first, _, _ in answers]
        assert firsts == sorted(firsts) and len(set(firsts)) == 20
        for host in net.hosts.values():
            await _until(lambda h=host: h.groups[PID].committed_end > firsts[-1])
            values = [value for _, _, value in await _records(host)]
            assert [v for v in values if v != b"first"] == [b.blobs[0] for b in batches]

    _run(tmp_path, scenario)


def test_a_restarted_replica_resumes_with_the_membership_its_log_applied(tmp_path: Path) -> None:
    """A move (n4 added, promoted; n3 removed), then every node restarts with
    the placement's stale guess (n1, n2, n3): each comes back with the
    membership its log applied, and the group still commits without n3."""
    moved = Membership(("n1", "n2", "n4"))

    async def scenario(net: FakeNetwork) -> None:
        acked = [await _produce(net, b"before-%d" % n) for n in range(3)]
        await _open(tmp_path, "n4", net)
        await _change(net, lambda c: c.add_learner("n4"), Membership(NODES, ("n4",)))
        await _change(net, lambda c: c.promote_learner("n4"), Membership((*NODES, "n4")))
        await _change(net, lambda c: c.remove_node("n3"), moved)
        for node in ("n1", "n2", "n4"):
            await _until(lambda n=node: net.hosts[n].groups[PID].core.membership == moved)
        net.cut.add("n3")  # removed: it must not matter to the group any more
        for node in ("n1", "n2", "n4"):
            host = await _restart(tmp_path, node, net)
            assert host.groups[PID].core.membership == moved, node
        acked.append(await _produce(net, b"after"))
        for node in ("n1", "n2", "n4"):
            await _until(lambda n=node: net.hosts[n].groups[PID].committed_end > acked[-1][0])
            values = [value for _, _, value in await _records(net.hosts[node])]
            assert values == [b"before-0", b"before-1", b"before-2", b"after"], node

    _run(tmp_path, scenario)


async def _change(net: FakeNetwork, step: Callable[[RaftCore], object], done: Membership) -> None:
    """Apply one membership step through whoever leads, until it is in effect
    there. A leader elected meanwhile may have it in effect already (the step
    committed before the old one stepped down): then it is done, not refused."""
    deadline = time.monotonic() + 30.0
    while True:
        leader = await _until(lambda: _leader(net))
        if leader.core.membership == done:
            return
        assert time.monotonic() < deadline, f"membership step to {done} not in effect in 30 s"
        try:
            step(leader.core)
        except (NotLeader, ConfigChangeRefused):
            await asyncio.sleep(TICK_S)
            continue
        await _until(lambda g=leader: g.core.membership == done or not g.is_leader)
        if leader.core.membership == done:
            return


def _match(leader: RaftGroup, node: str) -> int:
    """How much of `node`'s log the leader knows durable (-1 if it no longer leads)."""
    progress = leader.core.status().progress.get(node)
    return -1 if progress is None else progress.match


@pytest.mark.parametrize("held", ["leader", "follower"])
def test_an_entry_is_acknowledged_only_once_durable_on_a_majority(
    tmp_path: Path, held: str
) -> None:
    """The leader sends its appends while its own fsync runs (Raft thesis
    10.2.1) but counts its own entry only once that fsync is done; a follower
    answers only after its own. Hold one member's log fsync (the leader's or the
    answering follower's) with the third member cut off: the entry goes out
    and is written elsewhere, but is not acknowledged. Then the power fails on
    every node: every acknowledged record is on a majority of the disks."""
    disks = {node: SimulatedDisk() for node in NODES}
    for node in NODES:
        (tmp_path / node).mkdir()  # the Raft state file is written with plain syscalls

    async def main() -> None:
        net = FakeNetwork()
        for node in NODES:
            await _open(tmp_path, node, net, backend=disks[node])
        first, _ = await _produce(net, b"first")
        for host in net.hosts.values():
            await _until(lambda h=host: h.groups[PID].committed_end > first)
        leader = await _until(lambda: _leader(net))
        answering, silent = (node for node in NODES if node != leader.core.id)
        net.cut.add(silent)
        gate = asyncio.Event()  # the held fsync does not finish before the power cut
        disks[leader.core.id if held == "leader" else answering].inject(
            Fault("sync", 0, gate=gate, times=None)
        )
        index, _, done = leader.propose([b"held"])
        raft_index = index + 1
        if held == "leader":
            # The append went out ahead of the leader's fsync and came back acknowledged.
            await _until(lambda: _match(leader, answering) >= raft_index)
        else:
            follower = net.hosts[answering].groups[PID]
            await _until(
                lambda: (
                    _match(leader, leader.core.id) >= raft_index
                    and follower.core.log.last_index() >= raft_index
                )
            )
        await _ticks(net, leader.core.id, 10)  # time enough to commit, were it allowed
        acknowledged = {b"first"} | ({b"held"} if done.done() and not done.exception() else set())
        assert acknowledged == {b"first"}, "acknowledged before a majority had it on disk"

        for disk in disks.values():
            disk.power_cut(KeepOrLose(0))  # every unsynced change is lost
            disk.faults.clear()
        gate.set()  # the held fsync now fails: its process died with the power
        for host in net.hosts.values():
            storages = [group.storage for group in host.groups.values()]
            await host.close()
            for storage in storages:
                with contextlib.suppress(ValueError):  # its handles died with the power
                    await storage.close()
        holders = {blob: 0 for blob in acknowledged}
        for node in NODES:
            storage = await SegmentedLogStorage.open(
                tmp_path / node, LOG_CONFIG, backend=disks[node], stamped=True
            )
            for record in await storage.log.read_range(0, max_bytes=1 << 30, max_records=1000):
                if record.value in holders:
                    holders[record.value] += 1
            await storage.close()
        assert all(count >= 2 for count in holders.values()), holders

    asyncio.run(main())


def test_a_leader_that_steps_down_settles_its_pending_proposals_at_once(tmp_path: Path) -> None:
    """A cut-off leader takes a proposal, then steps down (check-quorum) while
    still cut: the proposal is answered lost (outcome unknown) then, not left
    for the caller's timeout, although its entry is still in the node's log."""

    async def scenario(net: FakeNetwork) -> None:
        await _produce(net, b"first")
        old = await _until(lambda: _leader(net))
        net.cut.add(old.core.id)
        _, _, pending = old.propose([b"pending"])
        index = old.core.log.last_index()
        await _until(lambda: not old.is_leader)
        await _until(lambda: pending.done(), timeout_s=20 * TICK_S)
        with pytest.raises(ProposalLost, match="stopped leading"):
            pending.result()
        assert old.core.log.last_index() >= index  # not truncated: the step-down settled it

    _run(tmp_path, scenario)


def test_a_cut_off_leaders_pending_proposal_survives_an_install(tmp_path: Path) -> None:
    """The install-after-pending-proposal case: a leader, cut off and frozen
    (its clock stops, so check-quorum cannot depose it), takes a proposal; the
    others elect, commit more and retention removes everything it missed.
    Healed, it learns the new term and installs the new leader's log: its
    proposal is settled as lost, its Raft group keeps running (it used to die
    reading the term of an entry below the new first index), and it ends with
    exactly the leader's records."""

    async def scenario(net: FakeNetwork) -> None:
        await _produce(net, b"first")
        old = await _until(lambda: _leader(net))
        old_node = old.core.id
        old_host = net.hosts[old_node]
        assert old_host._ticker is not None
        old_host._ticker.cancel()  # frozen, as a SIGSTOPped process is
        net.cut.add(old_node)
        _, _, pending = old.propose([b"pending"])
        pending_index = old.core.log.last_index()
        acked = [await _produce(net, b"after-%d" % n) for n in range(5)]
        rest = [host.groups[PID] for node, host in net.hosts.items() if node != old_node]
        end = acked[-1][0] + 1
        for group in rest:  # retention: seal, then remove all but the last committed
            await _until(lambda g=group: g.committed_end >= end)
            await group.storage.log.roll_over()
        acked.append(await _produce(net, b"last"))
        for group in rest:
            await _until(lambda g=group: g.committed_end > acked[-1][0])
            await group.storage.log.remove_expired(0, None, keep_from=group.committed_end - 1)
            assert group.storage.first_index() > pending_index + 1
        net.cut.clear()
        old_host.start()
        end = acked[-1][0] + 1
        await _until(lambda: old.committed_end >= end)  # the install's anchor is committed
        acked.append(await _produce(net, b"healed"))
        with pytest.raises(ProposalLost):
            await asyncio.wait_for(pending, 20)
        await _until(lambda: old.committed_end > acked[-1][0])
        assert old_host._tasks[PID].done() is False, "the group's loop died"
        floor = old.storage.log.lowest_index
        assert floor > pending_index  # it did install
        await _until(lambda: rest[0].committed_end > acked[-1][0])  # it may be the one behind
        leader_log = await _records(net.hosts[rest[0].core.id])
        assert await _records(old_host) == [r for r in leader_log if r[0] >= floor]
        assert [v for _, _, v in leader_log][-2:] == [b"last", b"healed"]

    _run(tmp_path, scenario)


def test_a_leader_whose_group_dies_answers_its_pending_batch_outcome_unknown(
    tmp_path: Path,
) -> None:
    """The leader's fsync fails: its Raft group stops (the partition goes
    offline there) and the batch it was writing, which the followers may
    still commit, is answered OUTCOME_UNKNOWN, not as a server bug."""
    disks = {node: SimulatedDisk() for node in NODES}

    async def main() -> None:
        net = FakeNetwork()
        for node in NODES:
            (tmp_path / node).mkdir()  # the Raft state file is written with plain syscalls
            await _open(tmp_path, node, net, backend=disks[node])
        try:
            await _produce(net, b"first")
            leader = await _until(lambda: _leader(net))
            disks[leader.core.id].inject(Fault("sync"))
            with pytest.raises(RequestError) as unknown:
                await RaftReplica(leader).append_stamped([b"lost-fsync"])
            assert unknown.value.code is ErrorCode.OUTCOME_UNKNOWN
            assert net.hosts[leader.core.id]._tasks[PID].done()  # the group did stop
        finally:
            for host in net.hosts.values():
                await host.close()

    asyncio.run(main())


def test_a_group_that_knows_no_leader_is_logged_until_it_does(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A replica whose peers are not there can never elect: the log names the
    partition and what the replica sees, again while it lasts, and stops once
    a leader is known."""

    def lines() -> list[str]:
        said = (r.getMessage() for r in caplog.records)
        return [m for m in said if m.startswith(f"partition {PID}: no leader known")]

    async def scenario(net: FakeNetwork) -> None:
        net.hosts["n1"].leaderless_warn_s = 0.2
        await _until(lambda: len(lines()) >= 2, what="two leaderless lines")
        assert "voters n1,n2,n3" in lines()[0], lines()[0]
        for node in ("n2", "n3"):
            await _open(tmp_path, node, net)
        await _until(lambda: _leader(net))
        await _until(lambda: net.hosts["n1"].groups[PID].core.leader is not None)
        seen = len(lines())
        await _ticks(net, "n1", 60)  # three warning intervals at TICK_S
        assert len(lines()) == seen, lines()[seen:]

    with caplog.at_level(logging.WARNING, logger="laminar.replication"):
        _run(tmp_path, scenario, opened=("n1",))

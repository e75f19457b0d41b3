"""SegmentedLogStorage: Raft state on a real segmented log and state file."""

from __future__ import annotations

import asyncio
import os
import random
from collections import deque
from pathlib import Path

import pytest

from laminar.log import LogConfig, SimulatedDisk
from laminar.raft import (
    ANCHOR,
    CONFIG,
    LEADER,
    NOOP,
    EntriesUnavailable,
    Entry,
    HardState,
    Membership,
    Message,
    RaftConfig,
    RaftCore,
    RaftError,
)
from laminar.raft.messages import VOTE, VOTE_RESP
from laminar.replication.raft_storage import STATE_FILE, SegmentedLogStorage
from tests.log.test_powercut import World, cut_everywhere

CONFIG_SMALL = LogConfig(segment_bytes=4096)


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def entries(first: int, terms: list[int], kind: str = "normal") -> list[Entry]:
    return [Entry(i, t, f"e{i}t{t}".encode(), kind) for i, t in enumerate(terms, first)]


async def read_all(storage: SegmentedLogStorage) -> list[Entry]:
    out: list[Entry] = []
    index = storage.first_index()
    while index <= storage.last_index():
        try:
            chunk = storage.entries(index, storage.last_index() + 1, 1 << 30)
        except EntriesUnavailable:
            await storage.load()
            continue
        out += chunk
        index = chunk[-1].index + 1
    return out


def test_entries_terms_kinds_and_hard_state_survive_a_reopen(tmp_path: Path) -> None:
    membership = Membership(("n1", "n2", "n3")).encode()
    written = [
        Entry(1, 1, b"", NOOP),
        *entries(2, [1, 1, 2]),
        Entry(5, 2, membership, CONFIG),
        *entries(6, [3] * 50),
    ]

    async def scenario() -> None:
        storage = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL)
        await storage.append(written)
        await storage.note_applied(written[:40])
        await storage.set_hard_state(HardState(3, "n2", 40))
        assert storage.entries(1, 56, 1 << 20) == written  # from the cache
        await storage.close()
        again = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL, load_bytes=100)
        assert again.initial_state() == HardState(3, "n2", 40)
        assert again.applied_membership() == Membership(("n1", "n2", "n3"))
        assert (again.first_index(), again.last_index()) == (1, 55)
        assert [again.term(i) for i in (0, 1, 4, 5, 55)] == [0, 1, 2, 2, 3]
        with pytest.raises(EntriesUnavailable):
            again.entries(1, 56, 1 << 20)  # not cached after a restart
        assert again.wanted == 1
        assert await read_all(again) == written  # loaded in steps of ~100 bytes
        await again.close()

    run(scenario())


def test_a_conflicting_suffix_is_replaced(tmp_path: Path) -> None:
    async def scenario() -> None:
        storage = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL)
        await storage.append(entries(1, [1, 1, 1, 1, 1]))
        await storage.append(entries(3, [2, 2]))
        assert [(e.index, e.term) for e in await read_all(storage)] == [
            (1, 1),
            (2, 1),
            (3, 2),
            (4, 2),
        ]
        with pytest.raises(RaftError, match="contiguous"):
            await storage.append(entries(9, [2]))
        await storage.close()

    run(scenario())


def test_an_install_restarts_the_log_after_the_anchor_and_survives_a_crash(
    tmp_path: Path,
) -> None:
    membership = Membership(("n1", "n2"), ("n3",)).encode()

    async def scenario() -> None:
        storage = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL)
        await storage.append(entries(1, [1, 1, 1]))
        anchor = Entry(40, 4, membership, ANCHOR)
        await storage.append([anchor, *entries(41, [4, 5])])
        assert (storage.first_index(), storage.last_index(), storage.term(40)) == (41, 42, 4)
        assert storage.log.lowest_index == 40  # raft 41 is record 40: offsets agree
        await storage.close()
        again = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL)
        assert (again.first_index(), again.last_index(), again.term(40)) == (41, 42, 4)
        assert again.anchor_membership() == membership
        # A crash between recording the anchor and resetting the log:
        await again.append(entries(43, [5]))
        again._state = again._state.__class__(anchor_index=90, anchor_term=6)
        await again._write_state()
        await again.close()
        third = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL)
        assert (third.first_index(), third.last_index(), third.term(90)) == (91, 90, 6)
        await third.close()

    run(scenario())


def test_retention_makes_the_first_record_the_anchor(tmp_path: Path) -> None:
    async def scenario() -> None:
        config = LogConfig(segment_bytes=256, retention_bytes=256)
        storage = await SegmentedLogStorage.open(tmp_path, config)
        for first in range(1, 181, 6):
            await storage.append(entries(first, [1 if first < 91 else 2] * 6))
        await storage.log.apply_retention()
        low = storage.log.lowest_index
        assert low > 0
        assert storage.first_index() == low + 2  # record `low` is raft index low + 1
        assert storage.term(low + 1) == (1 if low + 1 <= 90 else 2)
        await storage.close()

    run(scenario())


def test_damaged_state_and_relaxed_flush_are_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        with pytest.raises(ValueError, match="always"):
            await SegmentedLogStorage.open(tmp_path, LogConfig(flush="never"))
        storage = await SegmentedLogStorage.open(tmp_path)
        await storage.set_hard_state(HardState(7, "n1", 0))
        await storage.close()
        path = os.path.join(tmp_path, STATE_FILE)
        with open(path, "rb") as file:
            raw = bytearray(file.read())
        raw[5] ^= 0x20
        with open(path, "wb") as file:
            file.write(raw)
        with pytest.raises(RaftError, match="damaged"):
            await SegmentedLogStorage.open(tmp_path)

    run(scenario())


class AsyncCluster:
    """Three cores over SegmentedLogStorage, driven as a shell would."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ids = ("n1", "n2", "n3")
        self.storages: dict[str, SegmentedLogStorage] = {}
        self.cores: dict[str, RaftCore] = {}
        self.applied: dict[str, list[Entry]] = {n: [] for n in self.ids}
        self.queue: deque[Message] = deque()

    async def start(self, node: str) -> None:
        storage = await SegmentedLogStorage.open(self.root / node, CONFIG_SMALL, load_bytes=512)
        self.storages[node] = storage
        self.cores[node] = RaftCore(
            RaftConfig(node_id=node, voters=self.ids), storage, random.Random(node.encode()[-1])
        )
        self.applied[node] = []

    async def stop(self, node: str) -> None:
        del self.cores[node]
        await self.storages.pop(node).close()

    async def drain(self) -> None:
        for _ in range(10_000):
            moved = False
            for node, core in list(self.cores.items()):
                storage = self.storages[node]
                while core.has_ready():
                    rd = core.ready()
                    await storage.append(rd.entries)
                    if rd.hard_state is not None:
                        await storage.set_hard_state(rd.hard_state)
                    self.queue.extend(rd.messages)
                    self.applied[node].extend(rd.committed)
                    core.advance(rd)
                    moved = True
                if storage.wanted is not None:
                    await storage.load()
                    core.retry_storage()
                    moved = True
            while self.queue:
                message = self.queue.popleft()
                if message.dst in self.cores:
                    self.cores[message.dst].step(message)
                moved = True
            if not moved:
                return
        raise AssertionError("never quiet")


def test_a_cluster_replicates_restarts_and_redelivers_over_segmented_logs(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        cluster = AsyncCluster(tmp_path)
        for node in cluster.ids:
            await cluster.start(node)
        cluster.cores["n1"].campaign()
        await cluster.drain()
        leader = cluster.cores["n1"]
        assert leader.role == LEADER
        for i in range(40):
            leader.propose_many([f"v{i}-{j}".encode() for j in range(5)])
            await cluster.drain()
        for _ in range(2):
            for core in cluster.cores.values():
                core.tick()
            await cluster.drain()
        expected = [f"v{i}-{j}".encode() for i in range(40) for j in range(5)]
        assert [e.data for e in cluster.applied["n3"] if e.kind == "normal"] == expected
        await cluster.stop("n3")
        await cluster.start("n3")  # restart: committed entries come again, loaded in steps
        for _ in range(3):
            for core in cluster.cores.values():
                core.tick()
            await cluster.drain()
        assert [e.data for e in cluster.applied["n3"] if e.kind == "normal"] == expected
        log = cluster.storages["n3"].log
        assert log.highest_index == cluster.storages["n1"].log.highest_index
        record = await log.read(1)
        assert record.value == b"v0-0" and record.term == 1  # offsets: raft 2 is record 1
        for node in list(cluster.cores):
            await cluster.stop(node)

    run(scenario())


def stamped(first: int, term: int, timestamps: list[int]) -> list[Entry]:
    """Normal entries as a partition's leader makes them: timestamp_ms first."""
    return [
        Entry(i, term, ts.to_bytes(8, "big") + b"r%d" % i) for i, ts in enumerate(timestamps, first)
    ]


def test_a_ready_with_many_timestamps_is_made_durable_in_one_flush(tmp_path: Path) -> None:
    async def scenario() -> None:
        storage = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL, stamped=True)
        written = stamped(1, 1, [1000, 1001, 1001, 1002, 1005])  # four timestamp runs
        before = storage.log.flush_count
        await storage.append(written)
        assert storage.log.flush_count - before == 1  # not one write + fdatasync per run
        records = await storage.log.read_range(0, 1 << 20)
        assert [r.timestamp_ms for r in records] == [1000, 1001, 1001, 1002, 1005]
        await storage.close()
        again = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL, stamped=True)
        assert await read_all(again) == written
        await again.close()

    run(scenario())


def test_only_a_term_or_vote_change_rewrites_the_state_file(tmp_path: Path) -> None:
    async def scenario() -> None:
        storage = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL)
        await storage.set_hard_state(HardState(2, "n1", 0))
        state_file = tmp_path / STATE_FILE
        written = state_file.read_bytes()
        await storage.set_hard_state(HardState(2, "n1", 7))  # the commit index alone
        assert state_file.read_bytes() == written  # no file replace (two fsyncs) for it
        await storage.append(entries(1, [1] * 9))
        await storage.note_applied(entries(1, [1] * 9))
        await storage.set_hard_state(HardState(3, None, 9))
        await storage.close()
        again = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL)
        assert again.initial_state() == HardState(3, None, 9)
        await again.close()

    run(scenario())


def test_a_load_asked_for_before_a_compaction_finds_nothing_to_load(tmp_path: Path) -> None:
    """The core asked for old entries, then the application compacted them away
    before the shell loaded them: the load is a no-op (the core then finds its
    first index moved), not an error that would stop the group."""

    async def scenario() -> None:
        storage = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL)
        for first in range(1, 61, 6):
            await storage.append(entries(first, [1] * 6))
            await storage.log.roll_over()
        await storage.close()
        storage = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL)
        with pytest.raises(EntriesUnavailable):
            storage.entries(2, 4, 1 << 20)
        assert storage.wanted == 2
        assert await storage.log.remove_before(30) > 0
        await storage.load()
        assert storage.wanted is None and storage.first_index() > 2
        await storage.close()

    run(scenario())


def test_the_applied_membership_survives_a_reopen_and_the_commit_never_passes_it(
    tmp_path: Path,
) -> None:
    """A restarted replica must resume with the membership its log applied: a
    change is written when applied, and the commit index written with a term
    change never runs ahead of what was applied (a change below it would be
    skipped on restart and never recorded)."""
    added = Membership(("n1", "n2", "n3"), ("n4",))
    promoted = Membership(("n1", "n2", "n3", "n4"))
    log = [
        Entry(1, 1, b"", NOOP),
        *entries(2, [1, 1]),
        Entry(4, 1, added.encode(), CONFIG),
        *entries(5, [1, 1]),
        Entry(7, 1, promoted.encode(), CONFIG),
        *entries(8, [1]),
    ]

    async def scenario() -> None:
        storage = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL)
        assert storage.applied_membership() is None  # the group's first one holds
        await storage.append(log)
        await storage.note_applied(log[:5])  # up to 5: the learner was added
        await storage.set_hard_state(HardState(2, "n1", 8))  # commit 8, applied 5
        await storage.close()
        again = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL)
        # Resumes at 5 with the learner; 7's promotion is delivered again.
        assert again.initial_state() == HardState(2, "n1", 5)
        assert again.applied_membership() == added
        await again.note_applied(log[4:8])
        await again.close()
        again = await SegmentedLogStorage.open(tmp_path, CONFIG_SMALL)
        # The promotion was written when applied, with the commit it implies.
        assert again.initial_state() == HardState(2, "n1", 7)
        assert again.applied_membership() == promoted
        await again.close()

    run(scenario())


# -- power cuts around the hard state (the storage seam's simulated disk) ------------------

REPLICA = "/data/partitions/1-0"
VOTERS = ("n1", "n2", "n3")


class ReplicaWorld(World):
    """A power-cut scenario's world whose `open` opens n1's Raft storage."""

    async def open(self, disk: SimulatedDisk) -> SegmentedLogStorage:
        return await SegmentedLogStorage.open(REPLICA, self.config, backend=disk)


def n1(storage: SegmentedLogStorage) -> RaftCore:
    return RaftCore(RaftConfig(node_id="n1", voters=VOTERS), storage, random.Random(1))


def vote_answers(storage: SegmentedLogStorage, candidate: str, term: int) -> list[bool]:
    """Whether a restarted n1 grants `candidate` its vote in `term` (a transfer's
    campaign, which no leader lease delays): the granted flags it answers with."""
    core = n1(storage)
    core.step(Message(VOTE, candidate, "n1", term, transfer=True))
    return [not m.reject for m in core.ready().messages if m.kind == VOTE_RESP]


def test_a_granted_vote_survives_a_power_cut_at_every_point() -> None:
    """n1 grants n2 its vote in term 2; the power goes at every point of
    persisting that (and after); restarted, n1 must never grant n3 a vote in
    term 2 once the grant could have been sent (Raft §5.2: one vote per term)."""

    async def prepare(storage: SegmentedLogStorage, world: World) -> None:
        return None

    async def grant(storage: SegmentedLogStorage, world: World, notes: dict[str, object]) -> None:
        core = n1(storage)
        core.step(Message(VOTE, "n2", "n1", 2, transfer=True))
        rd = core.ready()
        assert rd.must_sync and rd.hard_state == HardState(2, "n2", 0)
        await storage.append(rd.entries)
        await storage.set_hard_state(rd.hard_state)
        assert [not m.reject for m in rd.messages_after_persist()] == [True]
        notes["granted"] = True  # the shell sends the grant from here on

    async def check(storage: SegmentedLogStorage, world: World, notes: dict[str, object]) -> None:
        if notes.get("granted"):
            assert vote_answers(storage, "n3", 2) == [False]
            assert storage.initial_state() == HardState(2, "n2", 0)
        else:  # nothing was sent: the state is the old one or the new one, whole
            assert storage.initial_state() in (HardState(), HardState(2, "n2", 0))

    assert cut_everywhere(CONFIG_SMALL, prepare, grant, check, make_world=ReplicaWorld) >= 4


def test_an_applied_membership_survives_a_power_cut_at_every_point() -> None:
    """n1 applies a membership change (n4 added as a learner); the power goes
    at every point of recording it (and after); restarted, n1 resumes with
    that membership once `note_applied` returned (the shell then acts on it),
    and with the old one or the new one, never a damaged state, before."""
    added = Membership(VOTERS, ("n4",))
    log = [Entry(1, 1, b"", NOOP), *entries(2, [1, 1]), Entry(4, 1, added.encode(), CONFIG)]

    async def prepare(storage: SegmentedLogStorage, world: World) -> None:
        await storage.append(log)  # durable on return
        await storage.set_hard_state(HardState(1, "n1", 4))

    async def apply(storage: SegmentedLogStorage, world: World, notes: dict[str, object]) -> None:
        await storage.note_applied(log)
        notes["applied"] = True

    async def check(storage: SegmentedLogStorage, world: World, notes: dict[str, object]) -> None:
        assert storage.last_index() == 4
        if notes.get("applied"):
            assert storage.applied_membership() == added
            assert storage.initial_state() == HardState(1, "n1", 4)
        else:
            assert storage.applied_membership() in (None, added)
            assert storage.initial_state().term == 1 and storage.initial_state().vote == "n1"

    assert cut_everywhere(CONFIG_SMALL, prepare, apply, check, make_world=ReplicaWorld) >= 4


def test_a_leftover_temporary_state_file_is_no_segment() -> None:
    """A crash between writing `raft-state.json.tmp` and renaming it leaves
    the temporary file: recovery of the log must not take it for a segment,
    and the next replace reuses it (a longer leftover is cut back)."""

    async def scenario() -> None:
        disk = SimulatedDisk()
        storage = await SegmentedLogStorage.open(REPLICA, CONFIG_SMALL, backend=disk)
        await storage.append(entries(1, [1, 1]))
        leftover = await disk.open(f"{REPLICA}/{STATE_FILE}.tmp", create=True)
        await leftover.writev([b"x" * 4096], 0, sync=True)
        await storage.close()
        storage = await SegmentedLogStorage.open(REPLICA, CONFIG_SMALL, backend=disk)
        assert storage.last_index() == 2 and storage.initial_state() == HardState()
        await storage.set_hard_state(HardState(3, "n2", 0))
        await storage.close()
        names = await disk.list_dir(REPLICA)
        assert [name for name in names if name.startswith(STATE_FILE)] == [STATE_FILE]
        storage = await SegmentedLogStorage.open(REPLICA, CONFIG_SMALL, backend=disk)
        assert storage.initial_state() == HardState(3, "n2", 0)
        await storage.close()

    run(scenario())

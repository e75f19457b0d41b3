"""A replica that cannot run is offline, says so once, redirects, and comes back.

n1 and n2 are plain Raft hosts of the fake network (`test_raft_groups`); n3 is
a real `ShardGroups` over its partition directory, as a node's shard
runs it. A damaged Raft state file takes n3's replica offline until
`laminar repair` rebuilds it from its peers; a Ready loop that dies on a
failed fsync takes it offline until it reopens by itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from pathlib import Path

import pytest

from laminar.cli.main import main as laminar
from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.log import Fault, LogConfig, SimulatedDisk, SyscallBackend
from laminar.log.partitions import OFFLINE_RETRY_S, PartitionManager
from laminar.log.storage import StorageBackend
from laminar.raft import Message, RaftCore
from laminar.raft.messages import VOTE, VOTE_RESP
from laminar.replication.auth import PeerAuth
from laminar.replication.nodes import Node, NodeView
from laminar.replication.opening import replica_config
from laminar.replication.raft_storage import STATE_FILE, SegmentedLogStorage
from laminar.replication.repair import TERM_MARGIN
from laminar.replication.shard_groups import ShardGroups
from laminar.wire import ErrorCode
from laminar.wire.errors import RequestError
from tests.cluster import test_raft_groups as groups
from tests.support.clock import FakeClock

CONFIG = LogConfig(segment_bytes=1 << 20, preallocate_bytes=0, flush="always")
NODES = groups.NODES


def _n3(
    tmp_path: Path,
    net: groups.FakeNetwork,
    backend: StorageBackend,
    clock: Clock = SYSTEM_CLOCK,
    reopen_after_s: float = 1.0,
) -> ShardGroups:
    """Node n3's shard on the fake network."""
    n3 = ShardGroups(
        NodeView(1, tuple(Node(n, "127.0.0.1", 1) for n in NODES)),
        PeerAuth.from_secret("n3", None),
        0,
        1,
        PartitionManager(
            str(tmp_path / "n3" / "partitions"), CONFIG, backend, lambda p: True, clock=clock
        ),
        1 << 20,
        (2,),
        clock=clock,
        reopen_after_s=reopen_after_s,
    )
    n3.host.transport = net.transport("n3")
    n3.host.tick_s = groups.TICK_S
    n3.start()
    net.hosts["n3"] = n3.host
    return n3


async def _stop(n3: ShardGroups, net: groups.FakeNetwork) -> None:
    net.hosts.pop("n3")
    await n3.close()
    await n3.partitions.close_all()


async def _refused(n3: ShardGroups) -> RequestError:
    try:
        await n3.ensure_open(groups.PID, NODES, CONFIG)
    except RequestError as exc:
        return exc
    raise AssertionError("the offline replica served a request")


async def _caught_up(net: groups.FakeNetwork, acked: list[tuple[int, int]]) -> None:
    for host in net.hosts.values():
        await groups._until(lambda h=host: h.groups[groups.PID].committed_end > acked[-1][0])


def test_a_damaged_state_file_redirects_until_repair_rebuilds_the_replica(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """n3's raft-state.json is damaged: its replica is offline, logged once,
    and requests get NOT_LEADER naming the leader n3 heard from (INTERNAL
    before); nothing opens it on a leader's message. Stopped, `laminar repair`
    keeps the damaged copy aside and puts an empty replica in a term above any
    it can have voted in (a vote in that term is refused); started again, it
    catches up from its peers and holds exactly the leader's records."""
    caplog.set_level(logging.ERROR, "laminar.replication")
    clock = FakeClock(running=True)  # the damaged n3's: real time, plus the retry wait skipped

    async def scenario(net: groups.FakeNetwork) -> None:
        n3 = _n3(tmp_path, net, SyscallBackend())
        await n3.ensure_open(groups.PID, NODES, CONFIG)
        acked = [await groups._produce(net, b"before-%d" % n) for n in range(5)]
        await _caught_up(net, acked)
        directory = n3.partitions.directory(groups.PID)
        await _stop(n3, net)
        state = Path(directory) / STATE_FILE
        state.write_bytes(state.read_bytes().replace(b'"term"', b'"tern"'))

        n3 = _n3(tmp_path, net, SyscallBackend(), clock)
        first = await _refused(n3)
        leader = (await groups._until(lambda: groups._leader(net))).core.id
        assert first.code is ErrorCode.NOT_LEADER and first.leader in NODES
        assert "laminar repair" in n3.offline[groups.PID].reason
        named = await groups._until(lambda: n3._heard_leader.get(groups.PID, (0, ""))[1] == leader)
        assert named
        waited = n3.offline[groups.PID]
        clock.advance(OFFLINE_RETRY_S)  # the next request tries to open the replica again
        again = await _refused(n3)
        retried = n3.offline[groups.PID]
        assert retried is not waited and retried.since == waited.since  # same failure
        assert again.code is ErrorCode.NOT_LEADER and again.leader == leader
        assert f"node {leader} leads it" in again.message
        assert groups.PID not in n3.replicas  # a leader's message opened nothing
        offline_logs = [r for r in caplog.records if "replica is offline" in r.getMessage()]
        assert len(offline_logs) == 1, offline_logs
        acked.append(await groups._produce(net, b"while-offline"))
        await _stop(n3, net)

        assert await asyncio.to_thread(laminar, ["repair", directory, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["term"] == report["log_last_term"] + TERM_MARGIN
        assert os.path.isdir(report["kept_at"])
        assert await asyncio.to_thread(laminar, ["repair", directory]) == 1  # nothing to do now
        floor = report["term"]
        await _refuses_votes_up_to(directory, floor)

        n3 = _n3(tmp_path, net, SyscallBackend())
        try:
            replica = await n3.ensure_open(groups.PID, NODES, CONFIG)
            assert groups.PID not in n3.offline
            # Its first answer carries its term: the leader steps down, the group elects again.
            await groups._until(lambda: (groups._leader(net) or replica.group).core.term > floor)
            acked.append(await groups._produce(net, b"after"))
            await _caught_up(net, acked)
            leader_records = await groups._records(net.hosts[groups._leader(net).core.id])
            assert await groups._records(n3.host) == leader_records
            values = [value for _, _, value in leader_records]
            assert values == [*(b"before-%d" % n for n in range(5)), b"while-offline", b"after"]
        finally:
            await _stop(n3, net)

    groups._run(tmp_path, scenario, opened=("n1", "n2"))


async def _refuses_votes_up_to(directory: str, term: int) -> None:
    """A core over the rebuilt replica grants no vote in `term`, one in the next."""
    storage = await SegmentedLogStorage.open(directory, CONFIG, stamped=True)
    try:
        core = RaftCore(replica_config("n3", storage, NODES), storage, random.Random(1))
        for candidate_term, granted in ((term, False), (term + 1, True)):
            core.step(Message(VOTE, "n1", "n3", candidate_term, 100, candidate_term))
            answer = core.ready()
            core.advance(answer)
            vote = next(m for m in answer.messages if m.kind == VOTE_RESP)
            assert vote.reject is not granted, (candidate_term, vote)
    finally:
        await storage.close()


def test_a_group_whose_loop_dies_is_offline_then_reopens_by_itself(tmp_path: Path) -> None:
    """n3's log fails an fsync: its group's Ready loop stops. The replica is
    reported offline (it used to stay dead with /health ok), requests get
    NOT_LEADER, and it reopens from disk on its own: the same replica object
    serves again and holds every acknowledged record."""
    disk = SimulatedDisk()

    async def scenario(net: groups.FakeNetwork) -> None:
        os.makedirs(tmp_path / "n3" / "partitions" / "0-7")  # the state file is a real file
        n3 = _n3(tmp_path, net, disk, reopen_after_s=0.5)
        try:
            replica = await n3.ensure_open(groups.PID, NODES, CONFIG)
            acked = [await groups._produce(net, b"before-%d" % n) for n in range(3)]
            await _caught_up(net, acked)
            failed_group = replica.group
            if failed_group.hand_over():  # a follower's fsync fails: no proposal to settle
                await groups._until(lambda: groups._leader(net) not in (None, failed_group))
            disk.inject(Fault("sync", path_contains="0-7"))
            acked.append(await groups._produce(net, b"fails-on-n3"))
            await groups._until(lambda: groups.PID in n3.offline)
            assert "Raft group stopped" in n3.offline[groups.PID].reason
            refused = await _refused(n3)
            assert refused.code is ErrorCode.NOT_LEADER
            assert await groups._until(lambda: n3.replicas.get(groups.PID)) is replica
            assert replica.group is not failed_group and groups.PID not in n3.offline
            acked.append(await groups._produce(net, b"after"))
            await _caught_up(net, acked)
            values = [value for _, _, value in await groups._records(n3.host)]
            assert values == [b"before-0", b"before-1", b"before-2", b"fails-on-n3", b"after"]
        finally:
            await _stop(n3, net)

    groups._run(tmp_path, scenario, opened=("n1", "n2"))

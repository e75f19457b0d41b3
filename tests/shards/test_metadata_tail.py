"""The metadata owner's tail op moves a follower's position only for a request it
serves: the create/delete barrier waits on those positions. A follower that the
owner compacted past skips to the snapshot."""

from __future__ import annotations

import asyncio
from unittest import mock

import pytest

from laminar.log.partitions import LongPolls
from laminar.replication import metalog
from laminar.replication.metadata import (
    METADATA_PID,
    Applied,
    CreateTopic,
    DeleteTopic,
    MetadataError,
    Snapshot,
    encode_entry,
)
from laminar.replication.metadata_home import LocalMetadata
from laminar.wire import (
    ErrorCode,
    FetchedRecord,
    Frame,
    MetadataTailRequest,
    MetadataTailResponse,
    TopicInfo,
)
from laminar.wire.codec import decode_frame
from tests.support.clock import FakeClock


class EndOfLog:
    """The part of the owner's log `serve_tail` reads: two entries, nothing to read past them."""

    lowest_index = 0
    highest_index = 2


def test_a_refused_tail_request_does_not_move_the_follower_past_what_it_applied() -> None:
    async def main() -> None:
        owner = metalog.MetadataService(
            0,
            0,
            None,
            None,
            None,
            2,
            LongPolls(),
            LocalMetadata(None),  # type: ignore[arg-type]
        )
        owner._log = EndOfLog()  # type: ignore[assignment]
        owner._ready.set_result(None)
        await owner.serve_tail(MetadataTailRequest(2, 1, max_wait_ms=0))  # shard 1 applied 0, 1
        assert owner._lagging_followers(3) == [1]  # so it is waited for, for entry 2
        for bogus, code in (
            (MetadataTailRequest(9, 1), ErrorCode.OFFSET_OUT_OF_RANGE),  # past the end
            (MetadataTailRequest(2, 7), ErrorCode.INVALID_REQUEST),  # no such shard
        ):
            with pytest.raises(MetadataError) as refused:
                await owner.serve_tail(bogus)
            assert refused.value.code is code
        assert owner._lagging_followers(3) == [1]  # still waited for

    asyncio.run(main())


def test_a_follower_silent_for_its_live_time_is_no_longer_waited_for() -> None:
    """A create's barrier waits only for live followers: one that has not tailed
    for `FOLLOWER_LIVE_S` (dead, restarting) replays when it is back."""
    clock = FakeClock()

    async def main() -> None:
        owner = metalog.MetadataService(
            0,
            0,
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            2,
            LongPolls(),
            LocalMetadata(None),  # type: ignore[arg-type]
            clock=clock,
        )
        owner._log = EndOfLog()  # type: ignore[assignment]
        owner._ready.set_result(None)
        await owner.serve_tail(MetadataTailRequest(2, 1, max_wait_ms=0))
        clock.advance(metalog.FOLLOWER_LIVE_S - 0.1)
        assert owner._lagging_followers(3) == [1]
        clock.advance(0.2)
        assert owner._lagging_followers(3) == []

    asyncio.run(main())


class CompactedOwner:
    """An owner's channel answering from a log compacted the Raft way: its first
    entries (5 and 6: create and delete `w`) precede the snapshot at 7."""

    def __init__(self) -> None:
        self.requests: list[MetadataTailRequest] = []

    def to(self, peer: int) -> CompactedOwner:
        return self

    async def request(self, request: MetadataTailRequest, timeout_s: float) -> Frame:
        self.requests.append(request)
        entries = (
            CreateTopic("w", 2, 1),
            DeleteTopic("w", 2),
            Snapshot(4, (TopicInfo("y", 3, 1, {}),), at=7),
        )
        records = tuple(FetchedRecord(5 + k, 0, encode_entry(e)) for k, e in enumerate(entries))
        answer = MetadataTailResponse(METADATA_PID, records, 5, 8, 8)
        return decode_frame(answer.encode(1))


def test_a_sibling_behind_the_owners_compaction_skips_to_the_snapshot() -> None:
    """A sibling shard whose next entry the owner compacted away acts on nothing
    before the snapshot (no topic `w` created and deleted again), then learns
    from the snapshot what changed while it was behind."""
    seen: list[Applied] = []

    async def on_applied(applied: Applied) -> None:
        seen.append(applied)

    async def main() -> None:
        sibling = metalog.MetadataService(
            1,
            0,
            None,  # type: ignore[arg-type]
            CompactedOwner(),  # type: ignore[arg-type]
            on_applied,
            2,
            LongPolls(),
            LocalMetadata(None),  # type: ignore[arg-type]
        )
        sibling._partitions = mock.Mock()  # the reconciliation's target
        sibling._partitions.remove_orphans = mock.AsyncMock(return_value=0)
        sibling.state.apply(0, CreateTopic("x", 1, 1))
        assert await sibling._fetch_and_apply(0) == 3
        assert [t.name for a in seen for t in a.created] == ["y"]
        assert [t.name for a in seen for t in a.deleted] == ["x"]
        assert [t.name for t in sibling.state.topics()] == ["y"]
        sibling._partitions.remove_orphans.assert_called_once()

    asyncio.run(main())

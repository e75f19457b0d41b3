"""A shard still loading its metadata makes requests wait, never answers wrongly.

While the metadata owner replays its log after a restart (or a follower makes
its first catch-up), its state is empty: requests forwarded to it for existing
topics were answered UNKNOWN_TOPIC. Now they wait for the metadata, and get
NOT_READY (retriable, nothing applied) if it takes too long.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from laminar.log.partitions import LongPolls
from laminar.placement import partition_id
from laminar.replication import metalog
from laminar.replication.metadata import MetadataError, MetadataState
from laminar.replication.metadata_home import LocalMetadata
from laminar.shards.handlers import Handlers, RequestContext, ShardIdentity
from laminar.shards.metrics import ShardMetrics
from laminar.shards.replicas import NodeReplicas
from laminar.wire import (
    ErrorCode,
    ListTopicsRequest,
    ListTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    decode_frame,
    decode_response,
)
from laminar.wire.errors import RequestError
from tests.support import wait_until_async

IDENT = ShardIdentity("n", 0, 2, "127.0.0.1", 1, (1, 2), None, "userspace", 1 << 20, 1000)


class LoadingMetadata:
    """The part of `MetadataService` handlers use, loading until `finish()`."""

    def __init__(self, clustered: bool = False) -> None:
        self.state = MetadataState()
        self._loaded = asyncio.Event()
        self.clustered = clustered
        self.waiters = 0
        """How many callers are waiting in `ready()` (what a test waits on)."""

    @property
    def is_ready(self) -> bool:
        return self._loaded.is_set()

    async def ready(self) -> None:
        self.waiters += 1
        await self._loaded.wait()

    async def catch_up(self) -> None:
        pass

    def finish(self) -> None:
        self.state.apply(0, self.state.plan_create("t", 2))
        self._loaded.set()


def handlers(metadata: Any) -> Handlers:
    return Handlers(IDENT, metadata, None, ShardMetrics(), LongPolls(), NodeReplicas(None))  # type: ignore[arg-type]


def test_a_request_during_the_replay_waits_for_the_metadata() -> None:
    async def main() -> None:
        metadata = LoadingMetadata()
        lookup = asyncio.ensure_future(handlers(metadata)._topic_of(partition_id(1, 1)))
        await wait_until_async(lambda: metadata.waiters or lookup.done(), "the lookup")
        assert not lookup.done()  # not UNKNOWN_TOPIC: the topic exists in the log
        metadata.finish()
        assert (await lookup).name == "t"

    asyncio.run(main())


def test_metadata_and_the_topic_list_wait_for_the_metadata_too() -> None:
    """A client that bootstraps from a node still loading must not learn an
    empty topic list (it would call an existing topic unknown, for good)."""

    async def main() -> None:
        metadata = LoadingMetadata()
        handler = handlers(metadata)
        ctx = RequestContext(received_by=0, forwarded=True)
        answers = [
            asyncio.ensure_future(handler.metadata_request(MetadataRequest(), 1, ctx)),
            asyncio.ensure_future(handler.list_topics(ListTopicsRequest(), 2, ctx)),
        ]
        await wait_until_async(
            lambda: metadata.waiters == 2 or any(answer.done() for answer in answers),
            "both requests waiting for the metadata",
        )
        assert not any(answer.done() for answer in answers)
        metadata.finish()
        for answer, kind in zip(answers, (MetadataResponse, ListTopicsResponse), strict=True):
            frame = b"".join(bytes(b) for b in await answer)
            decoded = decode_response(decode_frame(frame, len(frame)))
            assert isinstance(decoded, kind)
            assert [t.name for t in decoded.topics] == ["t"]

    asyncio.run(main())


def test_metadata_that_takes_too_long_is_not_ready() -> None:
    async def main() -> None:
        service = metalog.MetadataService(
            1, 0, None, None, None, 2, LongPolls(), LocalMetadata(None), ready_wait_s=0.05
        )  # type: ignore[arg-type]
        assert not service.is_ready
        with pytest.raises(MetadataError) as caught:
            await handlers(service)._topic_of(partition_id(1, 0))
        assert caught.value.code is ErrorCode.NOT_READY and caught.value.code.retriable

    asyncio.run(main())


@pytest.mark.parametrize("clustered", [False, True])
def test_a_topic_id_past_what_this_node_applied(clustered: bool) -> None:
    """In a cluster, a client may have seen a topic's creation on a node ahead of
    this one: NOT_READY (retried), not UNKNOWN_TOPIC (final). An id this node
    already passed is unknown for good (deleted) either way."""

    async def main() -> None:
        metadata = LoadingMetadata(clustered)
        metadata.finish()  # topic id 1 exists
        state = metadata.state
        state.apply(1, state.plan_create("gone", 1))
        state.apply(2, state.plan_delete("gone"))  # topic id 2 existed
        handler = handlers(metadata)
        with pytest.raises(RequestError) as ahead:
            await handler._topic_of(partition_id(3, 0))
        expected = ErrorCode.NOT_READY if clustered else ErrorCode.UNKNOWN_TOPIC
        assert ahead.value.code is expected
        with pytest.raises(RequestError) as deleted:
            await handler._topic_of(partition_id(2, 0))
        assert deleted.value.code is ErrorCode.UNKNOWN_TOPIC

    asyncio.run(main())

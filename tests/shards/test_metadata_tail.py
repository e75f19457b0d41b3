"""The metadata owner's tail op moves a follower's position only for a request it
serves: the create/delete barrier waits on those positions."""

from __future__ import annotations

import asyncio

import pytest

from laminar.shards import metalog
from laminar.shards.metadata import MetadataError
from laminar.shards.partitions import LongPolls
from laminar.wire import ErrorCode, MetadataTailRequest


class EndOfLog:
    """The part of the owner's log `serve_tail` reads: two entries, nothing to read past them."""

    lowest_index = 0
    highest_index = 2


def test_a_refused_tail_request_does_not_move_the_follower_past_what_it_applied() -> None:
    async def main() -> None:
        owner = metalog.MetadataService(0, 0, None, None, None, 2, LongPolls())  # type: ignore[arg-type]
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

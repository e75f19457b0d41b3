"""The client core's plans, driven by hand: no node, no sockets, no clock."""

from __future__ import annotations

import time
from typing import Any

import pytest

from laminar.client import calls
from laminar.client.core import RECOVER, REFRESH, ClientCore, Send, Sleep
from laminar.client.errors import (
    CannotConnectError,
    ConnectionLostError,
    LaminarError,
    NotLeaderError,
    OutcomeUnknownError,
    WriteAbortedError,
)
from laminar.client.retry import RetryPolicy
from laminar.client.routing import ClusterView
from laminar.client.writes import CommitResult, commit_write
from laminar.wire import (
    ErrorCode,
    ErrorResponse,
    Frame,
    MetadataResponse,
    Op,
    ShardInfo,
    TopicInfo,
)
from laminar.wire.writes import CommitWriteResponse, Published

VIEW = ClusterView.from_metadata(
    MetadataResponse(
        "node-1", "10.0.0.5", 7070, "userspace", (ShardInfo(0, "10.0.0.5", 7071),), ()
    ),
    ("10.0.0.5", 7070),
)
PUBLISHED = (Published(7, 0, 3),)
WITH_TOPIC = ClusterView.from_metadata(
    MetadataResponse(
        "node-1",
        "10.0.0.5",
        7070,
        "userspace",
        (ShardInfo(0, "10.0.0.5", 7071),),
        (TopicInfo("events", 7, 1),),
    ),
    ("10.0.0.5", 7070),
)


def run(
    plan: Any, answers: list[Frame | LaminarError], view: ClusterView = VIEW, sleep: bool = False
) -> Any:
    """Perform `plan`: each Send gets the next of `answers` (a frame, or an
    error raised at the send), metadata is `view`, recoveries pass, and sleeps
    pass too, or are slept (`sleep`: a retry budget then runs out)."""
    action = next(plan)
    try:
        while True:
            if isinstance(action, Send):
                answer = answers.pop(0)
                if isinstance(answer, LaminarError):
                    action = plan.throw(answer)
                else:
                    action = plan.send(answer)
            elif action is REFRESH:
                action = plan.send(view)
            else:
                assert isinstance(action, Sleep) or action is RECOVER
                if sleep and isinstance(action, Sleep):
                    time.sleep(action.delay_s)
                action = plan.send(None)
    except StopIteration as done:
        return done.value


def core() -> ClientCore:
    return ClientCore(
        "10.0.0.5:7070",
        timeout_s=1.0,
        connect_timeout_s=1.0,
        retry=RetryPolicy(),
        read_from="leader",
        idempotent=True,
    )


def committed(first: bool) -> Frame:
    return CommitWriteResponse(42, first, PUBLISHED).to_frame(1)


def test_a_commit_answered_at_once_says_what_the_node_says() -> None:
    assert run(core()._call_plan(commit_write(42, ())), [committed(True)]) == CommitResult(
        42, True, PUBLISHED
    )
    again = run(core()._call_plan(commit_write(42, ())), [committed(False)])
    assert not again.first  # a commit sent again by someone: it published nothing now


def test_a_commit_whose_answer_was_lost_published_what_its_retry_hears_of() -> None:
    """The first attempt decided the commit but its answer was lost; the retry
    hears "committed before", which was this call's own first attempt."""
    lost = ConnectionLostError("connection lost")
    result = run(core()._call_plan(commit_write(42, ())), [lost, committed(False)])
    assert result == CommitResult(42, True, PUBLISHED)


def test_a_commit_answered_pending_published_what_its_retry_hears_of() -> None:
    """COMMIT_PENDING says the first attempt decided the commit (publishing
    it failed for now); the retry hears "committed before" of that attempt."""
    pending = ErrorResponse(Op.COMMIT_WRITE, ErrorCode.COMMIT_PENDING, "pending").to_frame(1)
    result = run(core()._call_plan(commit_write(42, ())), [pending, committed(False)])
    assert result == CommitResult(42, True, PUBLISHED)


def test_a_refused_attempt_is_no_attempt_that_may_have_committed() -> None:
    """Only an attempt that may have been applied makes a later "committed
    before" this call's own: a node that refused it (not the leader) did not."""
    refused = ErrorResponse(Op.COMMIT_WRITE, ErrorCode.NOT_LEADER, "not the leader").to_frame(1)
    result = run(core()._call_plan(commit_write(42, ())), [refused, committed(False)])
    assert not result.first


def test_an_aborted_write_cannot_commit() -> None:
    aborted = ErrorResponse(Op.COMMIT_WRITE, ErrorCode.WRITE_ABORTED, "aborted").to_frame(1)
    with pytest.raises(WriteAbortedError):
        run(core()._call_plan(commit_write(42, ())), [aborted])


def test_a_produce_whose_answer_was_lost_is_unknown_when_given_up_never_refused() -> None:
    """An idempotent produce's first answer is lost (it may be in the
    partition); its retries are refused NOT_LEADER or cannot connect until the
    budget runs out: the caller hears "unknown", not "not applied", which it
    would take as leave to send the records again under a new sequence."""
    lost = ConnectionLostError("connection lost")
    unsent = CannotConnectError("cannot reach 10.0.0.5:7071")
    refused = ErrorResponse(Op.PRODUCE, ErrorCode.NOT_LEADER, "not the leader").to_frame(1)
    brief = RetryPolicy(budget_s=0.05, backoff_first_s=0.01)

    def produce(answers: list[Frame | LaminarError]) -> Any:
        client = ClientCore(
            "10.0.0.5:7070",
            timeout_s=1.0,
            connect_timeout_s=1.0,
            retry=brief,
            read_from="leader",
            idempotent=True,
        )
        call = calls.produce("events", 0, [b"v"], producer_id=9, sequence=0)
        return run(client._call_plan(call), answers, WITH_TOPIC, sleep=True)

    for last in (unsent, refused):
        with pytest.raises(OutcomeUnknownError, match="an earlier attempt was sent") as raised:
            produce([lost, *[last] * 100])
        assert isinstance(raised.value.__cause__, CannotConnectError | NotLeaderError)
    # Never sent, or refused each time: nothing can be in the partition.
    with pytest.raises(CannotConnectError):
        produce([unsent] * 100)
    with pytest.raises(NotLeaderError):
        produce([refused] * 100)

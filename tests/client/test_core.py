"""The client core's plans, driven by hand: no node, no sockets, no clock."""

from __future__ import annotations

from typing import Any

import pytest

from laminar.client.core import RECOVER, REFRESH, ClientCore, Send, Sleep
from laminar.client.errors import ConnectionLostError, LaminarError, WriteAbortedError
from laminar.client.retry import RetryPolicy
from laminar.client.routing import ClusterView
from laminar.client.writes import CommitResult, commit_write
from laminar.wire import ErrorCode, ErrorResponse, Frame, MetadataResponse, Op, ShardInfo
from laminar.wire.writes import CommitWriteResponse, Published

VIEW = ClusterView.from_metadata(
    MetadataResponse(
        "node-1", "10.0.0.5", 7070, "userspace", (ShardInfo(0, "10.0.0.5", 7071),), ()
    ),
    ("10.0.0.5", 7070),
)
PUBLISHED = (Published(7, 0, 3),)


def run(plan: Any, answers: list[Frame | LaminarError]) -> Any:
    """Perform `plan`: each Send gets the next of `answers` (a frame, or an
    error raised at the send), metadata is `VIEW`, sleeps and recoveries pass."""
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
                action = plan.send(VIEW)
            else:
                assert isinstance(action, Sleep) or action is RECOVER
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

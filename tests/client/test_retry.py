"""The retry rule: idempotent requests are repeated, others only when refused;
a missing answer (a timeout included) counts against the node."""

from __future__ import annotations

import pytest

from laminar.client import (
    CannotConnectError,
    ConnectionLostError,
    LaminarError,
    OffsetOutOfRangeError,
    OutcomeUnknownError,
    ProtocolViolationError,
    RequestTimeoutError,
    RetryPolicy,
)
from laminar.client.errors import server_error
from laminar.client.retry import Backoff, MetadataSearch, final_error, may_retry, no_answer
from laminar.client.routing import RouteHints
from laminar.wire import ErrorCode

LOST = ConnectionLostError("reset")
NEVER_SENT = CannotConnectError("refused")
TIMEOUT = RequestTimeoutError("slow")


@pytest.mark.parametrize(
    ("error", "idempotent", "retry"),
    [
        (NEVER_SENT, True, True),
        (NEVER_SENT, False, True),
        (LOST, True, True),
        (LOST, False, False),
        (ProtocolViolationError("junk"), True, True),
        (TIMEOUT, True, True),
        (TIMEOUT, False, False),
        (server_error(ErrorCode.NOT_OWNER, "moved"), False, True),
        (server_error(ErrorCode.SHUTTING_DOWN, "draining"), False, True),
        (server_error(ErrorCode.STORAGE_ERROR, "disk"), True, True),
        (server_error(ErrorCode.STORAGE_ERROR, "disk"), False, False),
        (server_error(ErrorCode.TIMEOUT, "slow"), False, False),
        (server_error(ErrorCode.NOT_READY, "loading"), False, True),
        (server_error(ErrorCode.TOO_MANY_CONNECTIONS, "full"), False, True),
        (server_error(ErrorCode.OUTCOME_UNKNOWN, "lost"), False, False),
        (server_error(ErrorCode.OUTCOME_UNKNOWN, "lost"), True, True),
        (server_error(ErrorCode.OFFSET_OUT_OF_RANGE, "no"), True, False),
    ],
)
def test_may_retry(error: LaminarError, idempotent: bool, retry: bool) -> None:
    assert may_retry(error, idempotent) is retry


@pytest.mark.parametrize("error", [LOST, TIMEOUT, ProtocolViolationError("junk")])
def test_a_lost_answer_to_a_produce_says_the_outcome_is_unknown(error: LaminarError) -> None:
    final = final_error(error, idempotent=False, what="produce of 2 records to t/0")
    assert isinstance(final, OutcomeUnknownError)
    assert "may or may not have been applied" in str(final)
    assert "produce of 2 records to t/0" in str(final)


def test_the_nodes_own_outcome_unknown_is_raised_as_such() -> None:
    err = server_error(ErrorCode.OUTCOME_UNKNOWN, "shard 1 died")
    assert isinstance(err, OutcomeUnknownError) and err.code is ErrorCode.OUTCOME_UNKNOWN
    assert final_error(err, idempotent=False, what="produce") is err


def test_other_errors_are_raised_as_they_are() -> None:
    err = server_error(ErrorCode.OFFSET_OUT_OF_RANGE, "past the end")
    assert isinstance(err, OffsetOutOfRangeError)
    assert final_error(err, True, "fetch") is err
    assert final_error(NEVER_SENT, False, "produce") is None  # retried: nothing was sent


@pytest.mark.parametrize(
    ("error", "silent"),
    [
        (NEVER_SENT, True),
        (LOST, True),
        (TIMEOUT, True),
        (ProtocolViolationError("junk"), True),
        (server_error(ErrorCode.TOO_MANY_CONNECTIONS, "full"), False),  # it answered that
        (server_error(ErrorCode.OUTCOME_UNKNOWN, "lost"), False),
        (server_error(ErrorCode.NOT_LEADER, "not me"), False),
    ],
)
def test_only_a_missing_answer_counts_against_the_node(error: LaminarError, silent: bool) -> None:
    assert no_answer(error) is silent


def _search_failing_with(*failures: tuple[tuple[str, int], LaminarError]) -> MetadataSearch:
    search = MetadataSearch(tuple(address for address, _ in failures), None, RouteHints())
    for address, error in failures:
        search.failed(address, error)
    return search


def test_a_metadata_search_names_every_address_or_keeps_a_refusal() -> None:
    a, b = ("10.0.0.1", 7070), ("10.0.0.2", 7070)
    both = _search_failing_with((a, TIMEOUT), (b, NEVER_SENT)).error()
    assert isinstance(both, CannotConnectError)
    assert "10.0.0.1:7070: slow" in str(both) and "10.0.0.2:7070: refused" in str(both)
    assert _search_failing_with((a, TIMEOUT)).error() is TIMEOUT
    loading = server_error(ErrorCode.NOT_READY, "loading")
    assert _search_failing_with((a, loading), (b, TIMEOUT)).error() is loading
    bad = server_error(ErrorCode.INVALID_REQUEST, "no")
    with pytest.raises(type(bad)):  # no other node would answer better
        _search_failing_with((a, bad))


def test_a_metadata_search_asks_silent_addresses_last() -> None:
    a, b = ("10.0.0.1", 7070), ("10.0.0.2", 7070)
    hints = RouteHints()
    MetadataSearch((a, b), None, hints).failed(a, TIMEOUT)
    assert MetadataSearch((a, b), None, hints).candidates == [b, a]
    MetadataSearch((a, b), None, hints).failed(b, server_error(ErrorCode.NOT_READY, "x"))
    assert MetadataSearch((a, b), None, hints).candidates == [b, a]  # b answered


def test_backoff_doubles_up_to_its_cap_and_stops_at_the_budget() -> None:
    now = [100.0]
    backoff = Backoff(RetryPolicy(1.0, 0.1, 0.3), clock=lambda: now[0])
    delays = []
    while (d := backoff.next_delay()) is not None:
        delays.append(round(d, 6))
        now[0] += d
    assert delays == [0.1, 0.2, 0.3, 0.3, 0.1]
    assert Backoff(RetryPolicy(budget_s=0)).next_delay() is None


def test_server_errors_carry_code_and_message() -> None:
    err = server_error(ErrorCode.UNKNOWN_TOPIC, "no topic 'x'")
    assert err.code == ErrorCode.UNKNOWN_TOPIC and err.message == "no topic 'x'"
    assert str(err) == "no topic 'x' (UNKNOWN_TOPIC)"
    assert not err.retriable
    assert server_error(ErrorCode.NOT_OWNER, "").retriable
    assert type(server_error(ErrorCode.INTERNAL, "bug")).__name__ == "ServerError"

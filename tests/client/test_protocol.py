"""Correlation ids and answer matching, sans-IO."""

from __future__ import annotations

import pytest

from laminar.client import CannotConnectError, ProtocolViolationError, UnknownTopicError
from laminar.client.protocol import ClientProtocol, Liveness
from laminar.wire import ErrorCode, ErrorResponse, Op, Ping, Pong


def pong(corr: int) -> bytes:
    return Pong(0, "n", 0, 0).encode(corr)


def test_ids_are_unique_while_in_flight_and_wrap() -> None:
    proto = ClientProtocol()
    proto._next = 2**32 - 2
    ids = [proto.request(Ping())[0] for _ in range(4)]
    assert ids == [2**32 - 2, 2**32 - 1, 1, 2]
    proto._next = 2**32 - 2  # wrap onto ids still in flight: they are skipped
    assert proto.request(Ping())[0] == 3


def test_answers_match_in_any_order_and_across_reads() -> None:
    proto = ClientProtocol()
    ids = [proto.request(Ping())[0] for _ in range(5)]
    stream = b"".join(pong(c) for c in reversed(ids))
    frames = []
    for i in range(0, len(stream), 7):  # trickle the bytes in
        frames += proto.receive(stream[i : i + 7])
    assert [f.correlation_id for f in frames] == list(reversed(ids))
    assert not proto.in_flight


def test_abandoned_answers_are_dropped() -> None:
    proto = ClientProtocol()
    corr, _ = proto.request(Ping())
    proto.abandon(corr)
    assert proto.receive(pong(corr)) == []
    with pytest.raises(ProtocolViolationError):  # answered twice: not any more
        proto.receive(pong(corr))


def test_an_answer_nobody_asked_for_breaks_the_connection() -> None:
    proto = ClientProtocol()
    proto.request(Ping())
    with pytest.raises(ProtocolViolationError, match="correlation id 99"):
        proto.receive(pong(99))


def test_a_parting_error_names_its_cause() -> None:
    proto = ClientProtocol()
    proto.request(Ping())
    last_word = ErrorResponse.for_code(Op.PING, ErrorCode.UNKNOWN_TOPIC, "gone").encode(0)
    with pytest.raises(ProtocolViolationError, match="gone") as info:
        proto.receive(last_word)
    assert isinstance(info.value.__cause__, UnknownTopicError)


def test_a_connection_refused_unread_says_nothing_was_sent() -> None:
    proto = ClientProtocol()
    proto.request(Ping())
    refusal = ErrorResponse.for_code(0, ErrorCode.TOO_MANY_CONNECTIONS).encode(0)
    with pytest.raises(CannotConnectError, match="as many connections") as info:
        proto.receive(refusal)
    assert info.value.code is ErrorCode.TOO_MANY_CONNECTIONS


def test_bytes_that_are_not_frames() -> None:
    proto = ClientProtocol()
    with pytest.raises(ProtocolViolationError, match="do not decode"):
        proto.receive(b"HTTP/1.1 400 Bad Request\r\n\r\n")


def test_a_timeout_on_a_connection_silent_since_the_send_says_so() -> None:
    """Silence is judged per request: anything received after it was sent (an
    answer to another request, part of a large answer) shows the peer alive."""
    proto = ClientProtocol()
    old, _ = proto.request(Ping())
    proto.receive(pong(old)[:5])  # the start of an answer: the peer is alive
    late, _ = proto.request(Ping())
    other, _ = proto.request(Ping())
    assert proto.expire(old) is False  # bytes came after it was sent
    assert proto.expire(late) is True  # nothing since: silent
    assert proto.expire(late) is False  # not in flight any more
    assert proto.receive(pong(old)[5:] + pong(late)) == []  # both dropped when late
    assert proto.expire(other) is False  # the late answers came after it was sent


def test_liveness_probes_a_quiet_connection_then_calls_it_silent() -> None:
    proto = ClientProtocol()
    liveness = Liveness(probe_after_s=1.0)
    assert liveness.check(0.0, proto) == Liveness.OK  # nothing in flight: nothing to judge
    proto.request(Ping(0))
    assert [liveness.check(t, proto) for t in (10.0, 10.9)] == [Liveness.OK, Liveness.OK]
    assert liveness.check(11.0, proto) == Liveness.PROBE
    assert liveness.check(11.5, proto) == Liveness.OK  # the probe's answer may still come
    assert liveness.check(12.0, proto) == Liveness.SILENT


def test_liveness_takes_any_byte_as_an_answer_and_starts_over() -> None:
    proto = ClientProtocol()
    liveness = Liveness(probe_after_s=1.0)
    corr, _ = proto.request(Ping(0))
    liveness.check(0.0, proto)
    assert liveness.check(1.0, proto) == Liveness.PROBE
    proto.probe()
    proto.receive(pong(corr)[:5])  # part of an answer: bytes all the same
    assert liveness.check(1.9, proto) == Liveness.OK
    assert liveness.check(2.9, proto) == Liveness.PROBE  # quiet again since 1.9

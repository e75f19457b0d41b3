"""Every ErrorCode is Kafka's: its number is in kafka-python's table of broker
errors, under the same name but for the renames Errors.java made since."""

from __future__ import annotations

import kafka.errors

from laminar.kafka.errors import ErrorCode

# Errors.java's current name -> kafka-python's (older) message for that code.
RENAMED = {
    "UNKNOWN_SERVER_ERROR": "UNKNOWN",
    "NONE": "NO_ERROR",
    "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
    "MESSAGE_TOO_LARGE": "MESSAGE_SIZE_TOO_LARGE",
    "INVALID_TOPIC_EXCEPTION": "INVALID_TOPIC",
}


def test_every_code_matches_kafka_python() -> None:
    for code in ErrorCode:
        theirs = kafka.errors.kafka_errors.get(int(code))
        assert theirs is not None, f"{code.name} ({int(code)}) is not a Kafka error code"
        assert theirs.message == RENAMED.get(code.name, code.name), code.name

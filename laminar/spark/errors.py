"""The one error the connector raises on purpose, and the words it uses.

Spark shows a Python exception raised while planning as an AnalysisException
(or a PythonException from a task) whose text ends with the exception's
message, so every message here names the option to fix and the value given.
"""

from __future__ import annotations

from laminar.client import CannotConnectError, LaminarError, UnknownTopicError


class LaminarSparkError(ValueError):
    """A laminar read or write cannot run as asked (bad option, unknown topic,
    unreachable node, out-of-range index, unusable DataFrame schema)."""


def explain(exc: LaminarError, bootstrap: str, topic: str) -> LaminarSparkError:
    """A `LaminarSparkError` for a client error met while planning."""
    if isinstance(exc, CannotConnectError):
        return LaminarSparkError(
            f"cannot reach the laminar node at bootstrap={bootstrap!r}: {exc.message}. "
            "Is `laminar-node` running there? Set the `bootstrap` option to its host:port."
        )
    if isinstance(exc, UnknownTopicError):
        return LaminarSparkError(
            f"the laminar topic {topic!r} does not exist at {bootstrap} "
            f"(create it with `laminar topic create {topic}`)"
        )
    return LaminarSparkError(f"laminar at {bootstrap}, topic {topic!r}: {exc}")

"""When the client sends a request again, and how long it waits before it does.

The rule is the one at-least-once systems get wrong most often, so it lives
in one place for both clients:

- A request that was never sent (`CannotConnectError`) may always be sent
  again: nothing can have been applied.
- An idempotent request (fetch, offsets, metadata, ping, list topics) is sent
  again after a lost connection, a timeout or a retriable error code, each
  time with freshly fetched metadata, until the retry budget is spent.
- No answer (`no_answer`: a lost or silent connection, a timeout) counts
  against the node, not just the request: whatever the request, the client
  routes around that node for a while (`laminar.client.routing.AVOID_S`), so
  the retry and the metadata refresh before it go to the others. A node that
  stopped, or was cut off by the network, makes its connections silent rather
  than closed; its partitions elect new leaders, which the retries find.
- Metadata is asked of one address after another (`MetadataSearch`), each
  allowed `routing.metadata_timeout_s`: after no answer or a refusal worth
  retrying (a restarting node's `NOT_READY`) the next one is asked.
- A produce or topic change is sent again only when the node said it did not
  apply it (`NOT_OWNER`, `SHUTTING_DOWN`, `NOT_READY`, `NOT_LEADER`,
  `NOT_ENOUGH_REPLICAS`: it refused before doing anything; a NOT_LEADER answer
  names the leader, which the next attempt goes to; `TOO_MANY_CONNECTIONS`:
  it refused the connection unread). When
  the node itself lost the answer (`OUTCOME_UNKNOWN`, a shard it handed the
  request to died or timed out) the caller gets an `OutcomeUnknownError`.
  After a lost connection or a timeout it is never repeated: the caller gets
  an `OutcomeUnknownError` and decides (fetch to check, or accept duplicates).
  An idempotent produce (one with a producer id and sequence) is the
  exception: the node appends each sequence once, so it is retried like a fetch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from laminar.client.errors import (
    CannotConnectError,
    CommitPendingError,
    ConnectionLostError,
    LaminarError,
    OutcomeUnknownError,
    RequestTimeoutError,
    ServerError,
    ServerTimeoutError,
)
from laminar.client.routing import (
    Address,
    ClusterView,
    RouteHints,
    format_address,
    metadata_candidates,
)
from laminar.wire import ErrorCode, NodeInfo

# Codes with which the node refuses a request before applying any of it.
_REFUSED_UNAPPLIED = frozenset(
    {
        ErrorCode.NOT_OWNER,
        ErrorCode.SHUTTING_DOWN,
        ErrorCode.NOT_READY,
        ErrorCode.NOT_LEADER,
        ErrorCode.NOT_ENOUGH_REPLICAS,
    }
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to keep retrying and how to space attempts (exponential backoff).

    `budget_s` bounds the time from the first failure to giving up; it covers a
    shard restart (a second or two) with room to spare. `budget_s=0` disables
    retries.
    """

    budget_s: float = 10.0
    backoff_first_s: float = 0.02
    backoff_max_s: float = 0.5


def may_retry(exc: LaminarError, idempotent: bool) -> bool:
    """Whether a request that failed with `exc` may be sent again (see module doc)."""
    if isinstance(exc, CannotConnectError):
        return True
    if exc.code is ErrorCode.OUTCOME_UNKNOWN:  # the node lost the answer: safe if idempotent
        return idempotent
    if isinstance(exc, ServerError):
        return exc.retriable and (idempotent or exc.code in _REFUSED_UNAPPLIED)
    if isinstance(exc, ConnectionLostError):
        return idempotent and not isinstance(exc, OutcomeUnknownError)
    if isinstance(exc, RequestTimeoutError):
        return idempotent
    return False


def no_answer(exc: LaminarError) -> bool:
    """Whether `exc` says the node at the request's address gave no answer at
    all (a refused, lost or silent connection, or a timeout), as opposed to an
    answer refusing the request: the client then routes around that node."""
    return isinstance(exc, ConnectionLostError | RequestTimeoutError) and exc.code is None


def may_have_applied(exc: LaminarError) -> bool:
    """Whether a request that failed with `exc` may have been applied all the
    same: it was sent and its answer was lost or late (a node that timed out
    or lost track of what it handed on counts too), or the node said it was
    applied and is still being finished (COMMIT_PENDING: the commit was
    decided, publishing it goes on), as opposed to refused or never sent."""
    if isinstance(exc, CannotConnectError):
        return False
    return isinstance(
        exc, ConnectionLostError | RequestTimeoutError | ServerTimeoutError | CommitPendingError
    )


def given_up(exc: LaminarError, applied_maybe: bool, what: str) -> LaminarError:
    """The error to raise for a produce given up on with `exc`, when one of its
    attempts may have been applied (`applied_maybe`: `may_have_applied`).
    The last attempt's "not sent" or "not applied" speaks for that attempt
    only: an idempotent produce whose first answer was lost, then refused
    NOT_LEADER or unsent until the budget ran out, may be in the partition,
    so the caller hears `OutcomeUnknownError`, never a refusal it would take
    for "nothing was written" and send again under a new sequence."""
    unapplied = isinstance(exc, CannotConnectError) or exc.code in _REFUSED_UNAPPLIED
    if not applied_maybe or not unapplied:
        return exc
    unknown = OutcomeUnknownError(
        f"{what}: an earlier attempt was sent and its answer lost, and the last "
        f"failed ({exc}); it may or may not have been applied. Read the partition "
        "to check before sending it again."
    )
    unknown.__cause__ = exc
    return unknown


def final_error(exc: LaminarError, idempotent: bool, what: str) -> LaminarError | None:
    """None when a request that failed with `exc` may be sent again; else the
    error to raise, which for a request not safe to repeat whose answer was lost
    is an `OutcomeUnknownError` saying so."""
    if may_retry(exc, idempotent):
        return None
    if (
        not idempotent
        and isinstance(exc, ConnectionLostError | RequestTimeoutError)
        and not isinstance(exc, CannotConnectError | OutcomeUnknownError)
    ):
        return outcome_unknown(exc, what)
    return exc


class MetadataSearch:
    """Asking for metadata address after address, as both clients refresh:
    `candidates` in order (`metadata_candidates`), `failed` for each that
    did not give it, `error` when none did."""

    __slots__ = ("_failures", "_hints", "_nodes", "candidates")

    def __init__(
        self, bootstraps: tuple[Address, ...], view: ClusterView | None, hints: RouteHints
    ) -> None:
        self.candidates = metadata_candidates(bootstraps, view, hints)
        self._nodes: Mapping[str, NodeInfo] = view.nodes if view is not None else {}
        self._hints = hints
        self._failures: list[tuple[Address, LaminarError]] = []

    def failed(self, address: Address, exc: LaminarError) -> None:
        """`address` did not give metadata: raises `exc` if no other address
        would do better (a refusal not worth retrying), else notes why, and
        routes around the node there if it gave no answer."""
        if not may_retry(exc, idempotent=True):
            raise exc
        if no_answer(exc):
            self._hints.unreachable(address, self._nodes)
        self._failures.append((address, exc))

    def error(self) -> LaminarError:
        """The error once every candidate failed: a refusal if one answered
        with one, else `CannotConnectError` naming each address and why (for
        a single address, its own error)."""
        failures = self._failures
        refusals = [exc for _, exc in failures if not no_answer(exc)]
        if refusals:
            return refusals[-1]
        if len(failures) == 1:
            return failures[0][1]
        tried = "; ".join(f"{format_address(address)}: {exc.message}" for address, exc in failures)
        error = CannotConnectError(f"no node answered for the cluster's metadata ({tried})")
        if failures:
            error.__cause__ = failures[-1][1]
        return error


def outcome_unknown(exc: LaminarError, what: str) -> OutcomeUnknownError:
    """The error for a non-idempotent request `what` whose answer was lost."""
    return OutcomeUnknownError(
        f"{what}: the request was sent but no answer came back ({exc.message}); "
        "it may or may not have been applied. Read the partition to check before "
        "sending it again."
    )


class Backoff:
    """The delays of one request's retries, ending when the budget is spent.

    `clock` is injected so tests can drive time."""

    __slots__ = ("_clock", "_deadline", "_delay", "_policy")

    def __init__(self, policy: RetryPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self._policy = policy
        self._clock = clock
        self._deadline: float | None = None
        self._delay = policy.backoff_first_s

    def next_delay(self) -> float | None:
        """Seconds to wait before the next attempt, or None to give up."""
        now = self._clock()
        if self._deadline is None:
            self._deadline = now + self._policy.budget_s
        remaining = self._deadline - now
        if remaining <= 0:
            return None
        delay = min(self._delay, remaining)
        self._delay = min(self._delay * 2, self._policy.backoff_max_s)
        return delay

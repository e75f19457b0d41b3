"""`Client` and `AsyncClient` expose the same API: the same public methods with
the same parameters (coroutines on one side), so they cannot drift apart again.
The few differences are the shells' own and listed here."""

from __future__ import annotations

import inspect

from laminar.client import (
    AsyncAtomicWrite,
    AsyncClient,
    AsyncConsumer,
    AsyncStager,
    AtomicWrite,
    Client,
    Consumer,
    Stager,
)

ONLY_SYNC = {"refresh_metadata_view"}
"""`AsyncClient.refresh_metadata` returns the view itself."""
ONLY_ASYNC = {"connect", "reader"}
"""Fetching metadata later than construction; a prefetching reader on the loop."""


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and callable(member)
    }


def _differences(sync: type, aio: type, only_sync: set[str], only_async: set[str]) -> list[str]:
    blocking, coroutines = _public(sync), _public(aio)
    problems = [f"only on {sync.__name__}: {n}" for n in blocking.keys() - coroutines.keys()]
    problems += [f"only on {aio.__name__}: {n}" for n in coroutines.keys() - blocking.keys()]
    problems = [p for p in problems if p.rsplit(" ", 1)[1] not in only_sync | only_async]
    for name in blocking.keys() & coroutines.keys():
        if list(blocking[name].parameters) != list(coroutines[name].parameters):
            problems.append(f"{name}: {blocking[name]} != {coroutines[name]}")
    return problems


def test_the_clients_have_the_same_methods_and_parameters() -> None:
    assert _differences(Client, AsyncClient, ONLY_SYNC, ONLY_ASYNC) == []


def test_the_atomic_writes_have_the_same_methods_and_parameters() -> None:
    assert _differences(AtomicWrite, AsyncAtomicWrite, set(), set()) == []
    assert _differences(Stager, AsyncStager, set(), set()) == []


def test_every_blocking_operation_is_a_coroutine_on_the_async_client() -> None:
    """Each method that talks to the node is awaited on `AsyncClient`; the
    `_nowait` ones and the factories return at once on both."""
    returning_at_once = {"begin_write", "stager", "consumer", "close", "produce_nowait"}
    returning_at_once |= {"fetch_nowait", "fetch_batch_nowait"}
    for name in _public(Client).keys() - ONLY_SYNC:
        method = getattr(AsyncClient, name)
        if name in returning_at_once - {"close"}:
            assert not inspect.iscoroutinefunction(method), name
        else:
            assert inspect.iscoroutinefunction(method), name


def test_the_consumers_have_the_same_methods_and_parameters() -> None:
    assert _differences(Consumer, AsyncConsumer, set(), set()) == []

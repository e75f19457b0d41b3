"""Checked reads of msgpack header fields.

A header comes from the peer, so every field is checked for presence, type and
range before a message is built from it; a violation is an `InvalidMessage`
naming the field. Unknown fields are ignored, so a newer peer may add fields
without breaking an older one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

from laminar.wire.errors import InvalidMessage

U8: Final = 1 << 8
U16: Final = 1 << 16
U32: Final = 1 << 32
U64: Final = 1 << 64

T = TypeVar("T")

_MISSING: Final = object()


def uint(h: dict[str, Any], key: str, limit: int = U64) -> int:
    """An int in `0..limit-1`."""
    v = h.get(key, _MISSING)
    if type(v) is int and 0 <= v < limit:
        return v
    raise _bad(key, f"an unsigned int below {limit}", v)


def opt_uint(h: dict[str, Any], key: str, limit: int = U64) -> int | None:
    """An int in `0..limit-1`, or None when absent or nil."""
    v = h.get(key)
    if v is None:
        return None
    if type(v) is int and 0 <= v < limit:
        return v
    raise _bad(key, f"an unsigned int below {limit} or nil", v)


def string(h: dict[str, Any], key: str) -> str:
    """A str."""
    v = h.get(key, _MISSING)
    if type(v) is str:
        return v
    raise _bad(key, "a string", v)


def opt_string(h: dict[str, Any], key: str) -> str | None:
    """A str, or None when absent or nil."""
    v = h.get(key)
    if v is None or type(v) is str:
        return v
    raise _bad(key, "a string or nil", v)


def flag(h: dict[str, Any], key: str) -> bool:
    """A bool; absent or nil means False."""
    v = h.get(key)
    if v is None or type(v) is bool:
        return bool(v)
    raise _bad(key, "true, false or nil", v)


def binary(h: dict[str, Any], key: str) -> bytes:
    """Raw bytes (msgpack bin)."""
    v = h.get(key, _MISSING)
    if type(v) is bytes:
        return v
    raise _bad(key, "bytes", v)


def mapping(v: object, what: str) -> dict[str, Any]:
    """A msgpack map (for nested structures)."""
    if type(v) is dict:
        return v
    raise InvalidMessage(f"{what} must be a map, got {type(v).__name__}")


def items(h: dict[str, Any], key: str, parse: Callable[[dict[str, Any]], T]) -> tuple[T, ...]:
    """A list of maps, each turned into a `T` by `parse`."""
    v = h.get(key, _MISSING)
    if type(v) is not list:
        raise _bad(key, "a list", v)
    return tuple(parse(mapping(item, f"each item of {key!r}")) for item in v)


def strings(h: dict[str, Any], key: str) -> tuple[str, ...]:
    """A list of str; absent means empty."""
    v = h.get(key)
    if v is None:
        return ()
    if type(v) is list and all(type(x) is str for x in v):
        return tuple(v)
    raise _bad(key, "a list of strings", v)


def config(h: dict[str, Any], key: str) -> dict[str, int | str]:
    """A map of str to int or str (topic configuration); absent means empty."""
    v = h.get(key)
    if v is None:
        return {}
    if type(v) is dict and all(type(k) is str and type(x) in (int, str) for k, x in v.items()):
        return v
    raise _bad(key, "a map of str to int or str", v)


def _bad(key: str, expected: str, got: object) -> InvalidMessage:
    if got is _MISSING:
        return InvalidMessage(f"header field {key!r} is missing (expected {expected})")
    shown = repr(got)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return InvalidMessage(f"header field {key!r} must be {expected}, got {shown}")

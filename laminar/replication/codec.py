"""Raft messages of many groups in one frame payload, and back: no I/O.

A shard sends everything it has for one remote shard in one loop iteration as
one RAFT_BATCH frame (so heartbeats of every group two shards share travel
together, one frame per pair per tick). The payload is msgpack:

    [[pid, kind, src, dst, term, index, log_term, commit, flags, hint, context,
      data, entries], ...]

`kind` is a small int (`KIND_CODES`), `flags` packs reject, transfer and removed, and
`entries` is `[[term, kind, data], ...]` for the entries at `index + 1`,
`index + 2`, ... (an append's entries are contiguous after `index`, so their
indexes are not sent). A peer is authenticated before it may send this, but
it is still input: decoding is bounded (msgpack limits, field types and
ranges) and anything malformed raises `RaftCodecError` for the whole frame.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import msgpack

from laminar.raft import Entry, Message
from laminar.raft.messages import ENTRY_KINDS, MESSAGE_KINDS

KIND_CODES: Final = {kind: code for code, kind in enumerate(sorted(MESSAGE_KINDS))}
KINDS_BY_CODE: Final = {code: kind for kind, code in KIND_CODES.items()}
ENTRY_KIND_CODES: Final = {kind: code for code, kind in enumerate(sorted(ENTRY_KINDS))}
ENTRY_KINDS_BY_CODE: Final = {code: kind for kind, code in ENTRY_KIND_CODES.items()}

_REJECT: Final = 1
_TRANSFER: Final = 2
_REMOVED: Final = 4
_U63: Final = (1 << 63) - 1
NODE_ID_BYTES_MAX: Final = 64
MESSAGES_MAX: Final = 65536
"""Messages in one batch (a shard with thousands of groups heartbeats them all at once)."""


class RaftCodecError(ValueError):
    """A RAFT_BATCH payload that does not decode to valid messages."""


def encode_batch(messages: Iterable[tuple[int, Message]]) -> bytes:
    """[(partition id, message), ...] -> one payload."""
    rows = []
    for pid, m in messages:
        entries = []
        expected = m.index + 1
        for e in m.entries:
            if e.index != expected:
                raise ValueError(f"entries of a message must follow its index: {e.index}")
            entries.append((e.term, ENTRY_KIND_CODES[e.kind], e.data))
            expected += 1
        flags = (
            (_REJECT if m.reject else 0)
            | (_TRANSFER if m.transfer else 0)
            | (_REMOVED if m.removed else 0)
        )
        rows.append(
            (
                pid,
                KIND_CODES[m.kind],
                m.src,
                m.dst,
                m.term,
                m.index,
                m.log_term,
                m.commit,
                flags,
                m.hint,
                m.context,
                m.data,
                entries,
            )
        )
    packed: bytes = msgpack.packb(rows, use_bin_type=True)
    return packed


def decode_batch(payload: bytes, max_bytes: int) -> list[tuple[int, Message]]:
    """One payload -> [(partition id, message), ...]; raises `RaftCodecError`."""
    if len(payload) > max_bytes:
        raise RaftCodecError(f"a raft batch of {len(payload)} B exceeds {max_bytes} B")
    try:
        rows = msgpack.unpackb(
            payload,
            raw=False,
            use_list=True,
            max_bin_len=max_bytes,
            max_str_len=NODE_ID_BYTES_MAX,
            max_array_len=max_bytes // 4 + 16,  # an encoded item takes >= 4 bytes
            max_map_len=0,
            max_ext_len=0,
        )
    except Exception as exc:
        raise RaftCodecError(f"a raft batch is not valid msgpack: {exc}") from None
    if type(rows) is not list or len(rows) > MESSAGES_MAX:
        raise RaftCodecError("a raft batch must be a list of at most 65536 messages")
    return [_decode_row(row) for row in rows]


def _u63(value: Any, name: str) -> int:
    if type(value) is not int or not 0 <= value <= _U63:
        raise RaftCodecError(f"raft message field {name} must be an int in 0..2**63-1")
    return value


def _node(value: Any, name: str) -> str:
    if type(value) is not str or not value:
        raise RaftCodecError(f"raft message field {name} must be a node id")
    return value


def _decode_row(row: Any) -> tuple[int, Message]:
    if type(row) is not list or len(row) != 13:
        raise RaftCodecError("a raft message must be a list of 13 fields")
    pid, kind, src, dst, term, index, log_term, commit, flags, hint, context, data, entries = row
    if type(pid) is not int or not 0 <= pid < 1 << 64:
        raise RaftCodecError("raft message field pid must be a u64")
    kind_name = KINDS_BY_CODE.get(kind) if type(kind) is int else None
    if kind_name is None:
        raise RaftCodecError(f"unknown raft message kind {kind!r}")
    if type(data) is not bytes:
        raise RaftCodecError("raft message field data must be bytes")
    index = _u63(index, "index")
    return pid, Message(
        kind=kind_name,
        src=_node(src, "src"),
        dst=_node(dst, "dst"),
        term=_u63(term, "term"),
        index=index,
        log_term=_u63(log_term, "log_term"),
        entries=_decode_entries(entries, index),
        commit=_u63(commit, "commit"),
        reject=bool(_u63(flags, "flags") & _REJECT),
        transfer=bool(flags & _TRANSFER),
        removed=bool(flags & _REMOVED),
        hint=_u63(hint, "hint"),
        context=_u63(context, "context"),
        data=data,
    )


def _decode_entries(rows: Any, index: int) -> tuple[Entry, ...]:
    if type(rows) is not list:
        raise RaftCodecError("raft message entries must be a list")
    entries: list[Entry] = []
    for offset, row in enumerate(rows, start=1):
        if type(row) is not list or len(row) != 3:
            raise RaftCodecError("a raft entry must be [term, kind, data]")
        term, kind, data = row
        kind_name = ENTRY_KINDS_BY_CODE.get(kind) if type(kind) is int else None
        if kind_name is None or type(data) is not bytes:
            raise RaftCodecError(f"invalid raft entry kind {kind!r} or data")
        entries.append(Entry(index + offset, _u63(term, "entry term"), data, kind_name))
    return tuple(entries)

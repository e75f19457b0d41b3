"""The frame codec: bytes <-> `Frame`, with no sockets and no event loop (sans-IO).

The frame
---------

Every message between clients, shards and nodes is one frame. All integers are
big-endian (network order), unsigned::

    offset  size  field
         0     4  frame_len       bytes that follow this field: the frame is 4 + frame_len
         4     1  magic           0xA7; anything else is not laminar traffic
         5     1  version         1
         6     1  op              `Op` (response: the request's op)
         7     1  flags           `Flags.RESPONSE` 0x01, `Flags.ERROR` 0x02
         8     4  correlation_id  chosen by the requester, echoed by the response
        12     8  partition_id    (topic_id << 32) | partition_idx; 0 when none
        20     4  header_len      H, the size of the msgpack header, >= 1
        24     H  header          a msgpack map with str keys (the message fields)
    24 + H     P  payload         raw bytes, P = frame_len - 20 - H (record bytes)

The first 20 bytes are the routing prefix: fixed, so a forwarder or the BPF
program reads the op and partition id at fixed offsets without decoding
anything, and drops foreign traffic on the magic byte. The msgpack header is
delimited by its own length field rather than by parsing msgpack: a bounds
check finds a truncated header exactly, and decoding the header never touches
the payload. Record bytes travel in the payload, outside msgpack, so they are
never copied through a msgpack buffer (`laminar.wire.records` lays them out).

Limits: the decoder rejects a frame whose total size (4 + frame_len) exceeds
`max_frame_bytes` as soon as the 20-byte prefix has arrived, before buffering
its body; `frame_limits` may set a lower limit per op (a server gives ops
without a payload room for a header only). The smallest frame is 25 bytes
(prefix, header length, empty map).

The header is the peer's input decoded into Python objects, which can be ~50
times larger than its bytes (an empty msgpack array is one byte and a 56-byte
list). A side that decodes untrusted headers passes `HeaderLimits`: the
header length is capped, and a header longer than `SMALL_HEADER_BYTES` is
decoded with msgpack's per-container limits and refused when containers nest
deeper than allowed. A short header cannot hold enough objects to matter, so
the common case costs one comparison.

Decoding
--------

`FrameDecoder` is the h11 shape: `feed(bytes)` appends to a bounded receive
buffer, `next_frame()` returns a `Frame` or `NEED_DATA`. Call `next_frame()`
until it returns `NEED_DATA` after every `feed`. Every error the decoder
raises is a fatal `ProtocolError` and leaves it in an error state: later
calls raise the same error, and the connection should be answered and
closed. The buffer is a bytearray read at an offset with `struct.unpack_from`;
consumed bytes are dropped once per `feed`, so decoding stays linear in the
bytes received.

`decode_frame(data)` decodes a whole datagram: exactly one frame, nothing after.

Encoding
--------

`encode_frame(...) -> bytes` for small frames, `encode_frame_buffers(...) ->
list of buffers` for writev/sendmsg, so record payloads are sent without being
joined into one copy. The caller's buffers must stay unchanged until written.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple

import msgpack

from laminar.wire.errors import (
    BadMagic,
    FrameTooLarge,
    MalformedFrame,
    ProtocolError,
    ReceiveBufferFull,
    UnsupportedVersion,
    WireUsageError,
)
from laminar.wire.ops import Flags

MAGIC: Final = 0xA7
VERSION: Final = 1

PREFIX: Final = struct.Struct(">IBBBBIQ")  # frame_len magic version op flags corr pid
PREFIX_BYTES: Final = PREFIX.size  # 20
_HEAD = struct.Struct(">IBBBBIQI")  # the prefix plus header_len: what an encoder writes first
_HEADER_LEN = struct.Struct(">I")
HEADER_OFFSET: Final = _HEAD.size  # 24
MIN_FRAME_BYTES: Final = HEADER_OFFSET + 1  # an empty msgpack map is one byte
DEFAULT_MAX_FRAME_BYTES: Final = 8 << 20
UDP_AMPLIFICATION_MAX: Final = 3
"""No answer datagram exceeds this many times its request datagram (or
`UDP_SMALL_ANSWER_BYTES`): a client pads a request (a `pad` header field,
which no op reads) to make room for a larger answer."""
UDP_SMALL_ANSWER_BYTES: Final = 100
SMALL_HEADER_BYTES: Final = 256
"""Headers up to this size skip the container checks: they hold at most this many objects."""

# Byte offsets of the routing fields, for code (and C) that reads them in place.
OFFSET_MAGIC: Final = 4
OFFSET_VERSION: Final = 5
OFFSET_OP: Final = 6
OFFSET_FLAGS: Final = 7
OFFSET_CORRELATION_ID: Final = 8
OFFSET_PARTITION_ID: Final = 12

Buffer = bytes | bytearray | memoryview
"""A byte buffer. memoryviews must be of format 'B' (len() counts bytes)."""

# Below this many bytes, slicing twice beats making a memoryview to copy once.
_SLICE_COPY_MAX: Final = 2048

_packb = msgpack.Packer(use_bin_type=True).pack
_unpackb = msgpack.unpackb


@dataclass(frozen=True, slots=True)
class HeaderLimits:
    """Bounds on the msgpack headers one side accepts (see the module docstring)."""

    max_header_bytes: int
    """The longest header; a longer one is `FrameTooLarge` (fatal)."""
    max_items: int
    """Entries of any one map or array in a header longer than `SMALL_HEADER_BYTES`."""
    max_depth: int
    """Containers below the header map: 0 allows scalar values only, 1 allows values
    that are lists or maps of scalars."""

    def __post_init__(self) -> None:
        if self.max_header_bytes < 1 or self.max_items < 1 or self.max_depth < 0:
            raise WireUsageError(f"header limits must be positive: {self}")

    def unpack(self, data: Buffer) -> Any:
        """Decode a header longer than `SMALL_HEADER_BYTES` within these limits;
        raises what msgpack raises, or `ValueError` for containers nested too deep."""
        n = self.max_items
        header = _unpackb(
            data,
            max_str_len=self.max_header_bytes,
            max_bin_len=self.max_header_bytes,
            max_ext_len=0,
            max_array_len=n,
            max_map_len=n,
        )
        if type(header) is dict and _nesting(header.values(), self.max_depth):
            raise ValueError(f"containers nest more than {self.max_depth} deep below the header")
        return header


def _nesting(values: Any, depth: int) -> bool:
    """True if a container among `values` nests more than `depth` containers deep."""
    for value in values:
        kind = type(value)
        if kind is dict or kind is list:
            if depth == 0:
                return True
            if _nesting(value.values() if kind is dict else value, depth - 1):
                return True
    return False


REQUEST_HEADER_LIMITS: Final = HeaderLimits(max_header_bytes=64 << 10, max_items=64, max_depth=1)
"""What a node accepts from clients and peers: a few fields, at most a list or a
map of scalars each (a topic's config). Decoded, such a header holds at most
~64 x 64 objects, so a request in flight costs a bounded multiple of its bytes."""


class Frame(NamedTuple):
    """One decoded frame. A NamedTuple rather than a frozen dataclass: one is made
    per frame on the hot path and a NamedTuple is built three times faster."""

    op: int
    flags: int
    correlation_id: int
    partition_id: int
    header: dict[str, Any]
    payload: bytes

    @property
    def is_response(self) -> bool:
        return bool(self.flags & Flags.RESPONSE)

    @property
    def is_error(self) -> bool:
        return bool(self.flags & Flags.ERROR)

    def encode(self) -> bytes:
        """The frame's bytes (the header is re-encoded; fields compare equal)."""
        return encode_frame(
            self.op,
            self.correlation_id,
            self.partition_id,
            self.header,
            self.payload,
            flags=self.flags,
        )


class _NeedData(enum.Enum):
    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = _NeedData.NEED_DATA
"""Returned by `FrameDecoder.next_frame` when no complete frame is buffered yet."""

NeedData = Literal[_NeedData.NEED_DATA]


# --- encoding -------------------------------------------------------------------


def encode_frame(
    op: int,
    correlation_id: int,
    partition_id: int,
    header: Mapping[str, Any],
    payload: Buffer = b"",
    *,
    flags: int = 0,
) -> bytes:
    """One frame as a single bytes object (copies the payload once)."""
    packed = _pack_header(header)
    head = _pack_head(op, flags, correlation_id, partition_id, packed, len(payload))
    return b"".join((head, packed, payload))


def encode_frame_buffers(
    op: int,
    correlation_id: int,
    partition_id: int,
    header: Mapping[str, Any],
    payload: Sequence[Buffer] = (),
    *,
    flags: int = 0,
) -> list[Buffer]:
    """One frame as buffers to write back to back: [prefix + header, *payload].

    The payload buffers are not copied. Linux takes at most IOV_MAX (1024)
    buffers per writev; a writer with more must split the list.
    """
    packed = _pack_header(header)
    payload_len = 0
    for buf in payload:
        payload_len += len(buf)
    head = _pack_head(op, flags, correlation_id, partition_id, packed, payload_len)
    out: list[Buffer] = [head + packed]
    out.extend(payload)
    return out


def _pack_header(header: Mapping[str, Any]) -> bytes:
    try:
        packed: bytes = _packb(header)
    except (TypeError, ValueError, OverflowError) as exc:
        raise WireUsageError(f"frame header cannot be encoded as msgpack: {exc}") from None
    if not packed or packed[0] not in _MAP_TYPES:
        raise WireUsageError(f"frame header must be a mapping, got {type(header).__name__}")
    return packed


_MAP_TYPES: Final = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}


def _pack_head(
    op: int, flags: int, correlation_id: int, partition_id: int, packed: bytes, payload_len: int
) -> bytes:
    header_len = len(packed)
    frame_len = HEADER_OFFSET - 4 + header_len + payload_len
    try:
        return _HEAD.pack(
            frame_len, MAGIC, VERSION, op, flags, correlation_id, partition_id, header_len
        )
    except struct.error:
        raise WireUsageError(
            "frame fields out of range: op and flags are u8, correlation_id u32, "
            f"partition_id u64, frame_len u32 (got op={op!r} flags={flags!r} "
            f"correlation_id={correlation_id!r} partition_id={partition_id!r} "
            f"frame_len={frame_len})"
        ) from None


# --- decoding -------------------------------------------------------------------


def _check_prefix(
    frame_len: int,
    magic: int,
    version: int,
    op: int,
    correlation_id: int,
    partition_id: int,
    limit: int,
    op_specific: bool = False,
) -> None:
    """Reject a frame from its 20-byte prefix alone: before its body is buffered.
    Raises the first problem found; returns only when the prefix is good.
    `op_specific`: `limit` is the op's own, lower than the frame limit."""
    if magic != MAGIC:
        raise _bad_magic(magic)
    if version != VERSION:
        raise _unsupported_version(version, correlation_id, op, partition_id)
    if frame_len + 4 > limit:
        raise FrameTooLarge(
            f"frame of {frame_len + 4} bytes exceeds the limit of {limit} bytes"
            + (f" for op {op}, which carries no payload" if op_specific else ""),
            correlation_id=correlation_id,
            op=op,
            partition_id=partition_id,
        )
    if frame_len + 4 < MIN_FRAME_BYTES:
        raise MalformedFrame(
            f"frame_len {frame_len} is shorter than the smallest frame "
            f"({MIN_FRAME_BYTES - 4} bytes after the length field)",
            correlation_id=correlation_id,
            op=op,
            partition_id=partition_id,
        )


def _bad_magic(magic: int) -> BadMagic:
    return BadMagic(f"bad magic byte 0x{magic:02x} (expected 0x{MAGIC:02x}): not laminar traffic")


def _unsupported_version(
    version: int,
    correlation_id: int | None = None,
    op: int | None = None,
    partition_id: int | None = None,
) -> UnsupportedVersion:
    return UnsupportedVersion(
        f"protocol version {version} is not supported (this side speaks {VERSION})",
        correlation_id=correlation_id,
        op=op,
        partition_id=partition_id,
    )


def _parse_body(
    buf: Buffer,
    start: int,
    end: int,
    op: int,
    flags: int,
    correlation_id: int,
    partition_id: int,
    limits: HeaderLimits | None,
) -> Frame:
    """The header and payload of the frame at buf[start:end] (prefix already checked)."""
    (header_len,) = _HEADER_LEN.unpack_from(buf, start + PREFIX_BYTES)
    header_start = start + HEADER_OFFSET
    header_end = header_start + header_len
    if header_len == 0 or header_end > end:
        raise MalformedFrame(
            f"header_len {header_len} does not fit the frame "
            f"({end - header_start} bytes after the header length)",
            correlation_id=correlation_id,
            op=op,
            partition_id=partition_id,
        )
    try:
        if header_len <= SMALL_HEADER_BYTES or limits is None:
            header = _unpackb(buf[header_start:header_end])
        elif header_len > limits.max_header_bytes:
            raise FrameTooLarge(
                f"frame header of {header_len} bytes exceeds the limit of "
                f"{limits.max_header_bytes} bytes",
                correlation_id=correlation_id,
                op=op,
                partition_id=partition_id,
            )
        else:
            header = limits.unpack(buf[header_start:header_end])
    except ProtocolError:
        raise
    except Exception as exc:
        # unpackb raises ValueError, TypeError and msgpack's own errors for
        # bad input; whatever it raises, the peer's bytes are at fault.
        raise MalformedFrame(
            f"msgpack header does not decode: {type(exc).__name__}: {exc}",
            correlation_id=correlation_id,
            op=op,
            partition_id=partition_id,
        ) from None
    if type(header) is not dict:
        raise MalformedFrame(
            f"msgpack header must be a map, got {type(header).__name__}",
            correlation_id=correlation_id,
            op=op,
            partition_id=partition_id,
        )
    if end - header_end < _SLICE_COPY_MAX:
        payload = bytes(buf[header_end:end])
    else:  # one copy instead of two (slice, then bytes) for large payloads
        with memoryview(buf) as view:
            payload = view[header_end:end].tobytes()
    return Frame(op, flags, correlation_id, partition_id, header, payload)


def decode_frame(
    data: Buffer,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    header_limits: HeaderLimits | None = None,
) -> Frame:
    """Decode exactly one whole frame, for example a UDP datagram."""
    size = len(data)
    if size < PREFIX_BYTES:
        if size > OFFSET_MAGIC and data[OFFSET_MAGIC] != MAGIC:
            raise _bad_magic(data[OFFSET_MAGIC])
        raise MalformedFrame(f"datagram of {size} bytes is shorter than the frame prefix")
    frame_len, magic, version, op, flags, corr, pid = PREFIX.unpack_from(data)
    _check_prefix(frame_len, magic, version, op, corr, pid, max_frame_bytes)
    if frame_len + 4 != size:
        raise MalformedFrame(
            f"frame_len says {frame_len + 4} bytes but the datagram has {size}",
            correlation_id=corr,
            op=op,
            partition_id=pid,
        )
    return _parse_body(data, 0, size, op, flags, corr, pid, header_limits)


class FrameDecoder:
    """Incremental decoder for one byte stream (one TCP connection or channel).

    `max_frame_bytes` bounds one frame (4 + frame_len); `max_buffer_bytes`
    bounds what may wait in the buffer (several pipelined frames), by default
    twice the frame limit. `frame_limits`, indexed by op, may lower the frame
    limit of single ops (ops without a payload); `header_limits` bounds headers
    (see the module docstring). `last_frame_bytes` is the size of the frame
    `next_frame` returned last (its header is that minus 24 minus the payload).
    """

    __slots__ = (
        "_buf",
        "_error",
        "_frame_limits",
        "_header_limits",
        "_max_buffer",
        "_max_frame",
        "_pos",
        "last_frame_bytes",
    )

    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_buffer_bytes: int | None = None,
        *,
        frame_limits: Sequence[int] | None = None,
        header_limits: HeaderLimits | None = None,
    ) -> None:
        if max_frame_bytes < MIN_FRAME_BYTES:
            raise WireUsageError(f"max_frame_bytes must be >= {MIN_FRAME_BYTES}")
        if max_buffer_bytes is None:
            max_buffer_bytes = 2 * max_frame_bytes
        if max_buffer_bytes < max_frame_bytes:
            raise WireUsageError("max_buffer_bytes must be >= max_frame_bytes")
        if frame_limits is None:
            limits: tuple[int, ...] = (max_frame_bytes,) * 256
        elif len(frame_limits) != 256:
            raise WireUsageError("frame_limits needs one limit per op (256)")
        else:
            limits = tuple(min(max_frame_bytes, max(MIN_FRAME_BYTES, n)) for n in frame_limits)
        self._buf = bytearray()
        self._pos = 0
        self._max_frame = max_frame_bytes
        self._frame_limits = limits
        self._max_buffer = max_buffer_bytes
        self._header_limits = header_limits
        self._error: ProtocolError | None = None
        self.last_frame_bytes = 0

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet returned as frames."""
        return len(self._buf) - self._pos

    @property
    def room(self) -> int:
        """How many more bytes `feed` accepts now: read at most this much."""
        return self._max_buffer - self.buffered_bytes

    @property
    def error(self) -> ProtocolError | None:
        """The fatal error the decoder stopped at, if any."""
        return self._error

    def feed(self, data: Buffer) -> None:
        """Append received bytes. Raises `ReceiveBufferFull` (taking nothing) past the
        bound, and the stored error once the decoder has failed."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        if self._pos:
            del buf[: self._pos]  # drop consumed frames: at most once per feed
            self._pos = 0
        if len(buf) + len(data) > self._max_buffer:
            raise ReceiveBufferFull(
                f"receive buffer holds {len(buf)} bytes; {len(data)} more would pass "
                f"its bound of {self._max_buffer}: take frames with next_frame() first"
            )
        buf += data

    def next_frame(self) -> Frame | NeedData:
        """The next complete frame, or `NEED_DATA` until more bytes are fed."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        pos = self._pos
        avail = len(buf) - pos
        if avail < PREFIX_BYTES:
            if avail > OFFSET_MAGIC:
                self._check_early(buf, pos, avail)
            return NEED_DATA
        frame_len, magic, version, op, flags, corr, pid = PREFIX.unpack_from(buf, pos)
        end = pos + 4 + frame_len
        try:
            limit = self._frame_limits[op]
            if (
                magic != MAGIC
                or version != VERSION
                or not MIN_FRAME_BYTES <= frame_len + 4 <= limit
            ):
                _check_prefix(
                    frame_len, magic, version, op, corr, pid, limit, limit < self._max_frame
                )
            if end > len(buf):
                return NEED_DATA
            frame = _parse_body(buf, pos, end, op, flags, corr, pid, self._header_limits)
        except ProtocolError as exc:
            self._error = exc
            raise
        self._advance(pos, end)
        return frame

    def _advance(self, pos: int, end: int) -> None:
        """The frame at `pos`..`end` was taken: move past it."""
        self.last_frame_bytes = end - pos
        if end == len(self._buf):
            self._buf.clear()
            self._pos = 0
        else:
            self._pos = end

    def discard(self) -> None:
        """Drop whatever is buffered (the stream is being closed): the memory goes
        now, not when the decoder is collected."""
        self._buf = bytearray()
        self._pos = 0

    def _check_early(self, buf: bytearray, pos: int, avail: int) -> None:
        """Fail on a foreign magic or version from the first bytes of a prefix, so a
        stray client is told at once instead of after 20 bytes."""
        magic = buf[pos + OFFSET_MAGIC]
        if magic != MAGIC:
            self._error = _bad_magic(magic)
            raise self._error
        if avail > OFFSET_VERSION and buf[pos + OFFSET_VERSION] != VERSION:
            self._error = _unsupported_version(buf[pos + OFFSET_VERSION])
            raise self._error

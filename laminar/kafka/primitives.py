"""The few wire primitives the generated codec (`messages`) calls rather than
inlines: unsigned varints past their one-byte fast path, skipping unknown
tagged fields, and the error every malformed input becomes."""

from __future__ import annotations


class WireError(ValueError):
    """Bytes that do not parse as the message they claim to be (remote fault)."""


_UVARINT32_SHIFT_MAX = 28  # a uvarint of a 32-bit length has at most 5 bytes


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint at `pos` (at most 5 bytes, as Kafka's lengths and
    counts are): its value and the position after it."""
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("varint past the end")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > _UVARINT32_SHIFT_MAX:
            raise WireError("varint longer than 5 bytes")


def write_uvarint(out: bytearray, value: int) -> None:
    """Append `value` (>= 0) as an unsigned varint."""
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def skip_tagged_fields(buf: memoryview, pos: int) -> int:
    """Skip a tagged-fields section none of whose tags this version knows;
    each field costs at least 2 bytes, so a huge count fails at the end."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise WireError("tagged field past the end")
    return pos

"""Classic BPF reuseport steering: exact xxh64 rendezvous with 32-bit registers.

Why this mode exists
--------------------

`SO_ATTACH_REUSEPORT_CBPF` needs no privilege at all, so it is the steering a
node gets when it runs without CAP_BPF. The kernel runs the program over each
datagram of the reuseport group and uses its return value as an index into
the group's socket array, in the order the sockets joined (bind order); an
index out of range means "no choice": the kernel hashes the 4-tuple as if no
program were attached. There are no maps, no counters and no drop: a classic
program can only choose.

What it computes
----------------

Exactly `laminar.placement.shard_for`: the xxh64 rendezvous over the shard
ids. Two other designs were weighed and rejected:

- a lookup generated from the known partitions (a compare chain or binary
  search over partition ids) would need rebuilding on every topic change and
  misroutes every partition it does not list;
- a cheaper 32-bit hash would disagree with the clients and with eBPF mode, so
  the owning shard would depend on the routing mode.

Classic BPF has two 32-bit registers (A, X), sixteen 32-bit scratch slots and
no 64-bit arithmetic, so each 64-bit value lives in two slots (hi, lo) and
this module assembles xxh64 out of 32-bit operations:

- 64 x 64 -> 64 multiplication by a constant `c`: the low word is the 32-bit
  product `lo * c_lo`; the high word is `hi32(lo * c_lo) + hi * c_lo +
  lo * c_hi` (mod 2**32), where `hi32(lo * c_lo)` is built from 16-bit limbs
  so that no partial sum overflows 32 bits:
  `mid = (a0*c0 >> 16) + (a0*c1 & 0xffff) + (a1*c0 & 0xffff)`,
  `hi32 = a1*c1 + (a0*c1 >> 16) + (a1*c0 >> 16) + (mid >> 16)`.
  About 60 instructions.
- rotations and xor-shifts by constants move bits between the two words;
  64-bit addition of a constant propagates the carry with one compare.
- the lane (bytes 12..19 of the frame read little-endian, see `csource`) is
  assembled from single-byte loads, since classic loads are big-endian.
- `k1 = rotl(lane * P2, 31) * P1` does not depend on the seed and is computed
  once; each shard then costs three multiplications and ~270 instructions.
  The classic instruction limit is 4096 (BPF_MAXINSNS), which bounds this
  mode to `max_shards()` shards; beyond that the node falls back to
  userspace forwarding and says so.

The program's prologue sends datagrams shorter than the smallest frame or
without laminar's magic byte to the kernel's hash ("no choice"); the shard
that gets them validates and answers or drops them as it does in every mode.

Bind order
----------

The program returns a socket index, not a shard id, so it is generated for
one arrangement: `socket_index[shard]` gives the index of that shard's socket
in the group (None when the shard has no socket: "no choice"). The kernel
appends a socket on bind and, when one leaves, moves the last socket into its
hole; `ReuseportSteering` tracks that order and rebuilds the program whenever
it changes (a shard's socket replaced, the shard count changed).

The assembler here is small on purpose: instructions are tuples, jumps are
to named labels, scratch slots are allocated by name.
"""

from __future__ import annotations

import ctypes
import functools
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from laminar.wire import codec
from laminar.xdp.errors import SteeringUsageError

# Instruction encoding (linux/filter.h, linux/bpf_common.h).
LD: Final = 0x00
LDX: Final = 0x01
ST: Final = 0x02
STX: Final = 0x03
ALU: Final = 0x04
JMP: Final = 0x05
RET: Final = 0x06
MISC: Final = 0x07
W: Final = 0x00
H: Final = 0x08
B: Final = 0x10
IMM: Final = 0x00
ABS: Final = 0x20
MEM: Final = 0x60
LEN: Final = 0x80
ADD: Final = 0x00
SUB: Final = 0x10
MUL: Final = 0x20
OR: Final = 0x40
AND: Final = 0x50
LSH: Final = 0x60
RSH: Final = 0x70
XOR: Final = 0xA0
JA: Final = 0x00
JEQ: Final = 0x10
JGT: Final = 0x20
JGE: Final = 0x30
K: Final = 0x00
X: Final = 0x08
RET_A: Final = 0x10
TAX: Final = 0x00
TXA: Final = 0x80

BPF_MAXINSNS: Final = 4096
SCRATCH_SLOTS: Final = 16
NO_CHOICE: Final = 0xFFFF_FFFF
"""Returned to let the kernel pick by hash (any index >= the group size does)."""

SO_ATTACH_REUSEPORT_CBPF: Final = 51

U32: Final = 0xFFFF_FFFF
XXH_P1: Final = 0x9E3779B185EBCA87
XXH_P2: Final = 0xC2B2AE3D27D4EB4F
XXH_P3: Final = 0x165667B19E3779F9
XXH_P4: Final = 0x85EBCA77C2B2AE63
XXH_P5: Final = 0x27D4EB2F165667C5

Insn = tuple[int, int, int, int]
"""(code, jt, jf, k): one `struct sock_filter`."""


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


@dataclass
class _Pending:
    code: int
    k: int
    jt: str | None = None
    jf: str | None = None


@dataclass
class Assembler:
    """A classic BPF assembler: emit instructions, jump to labels, name slots."""

    _insns: list[_Pending] = field(default_factory=list)
    _labels: dict[str, int] = field(default_factory=dict)
    _slots: dict[str, int] = field(default_factory=dict)
    _next_label: int = 0

    def slot(self, name: str) -> int:
        """The scratch slot called `name`, allocated on first use."""
        if name not in self._slots:
            if len(self._slots) == SCRATCH_SLOTS:
                raise SteeringUsageError(f"out of cBPF scratch slots allocating {name!r}")
            self._slots[name] = len(self._slots)
        return self._slots[name]

    def new_label(self, hint: str) -> str:
        self._next_label += 1
        return f"{hint}.{self._next_label}"

    def label(self, name: str) -> None:
        if name in self._labels:
            raise SteeringUsageError(f"label {name!r} defined twice")
        self._labels[name] = len(self._insns)

    def emit(self, code: int, k: int = 0, jt: str | None = None, jf: str | None = None) -> None:
        self._insns.append(_Pending(code, k & U32, jt, jf))

    # Loads and stores.
    def ld(self, name: str) -> None:
        self.emit(LD | W | MEM, self.slot(name))

    def ldx(self, name: str) -> None:
        self.emit(LDX | W | MEM, self.slot(name))

    def st(self, name: str) -> None:
        self.emit(ST, self.slot(name))

    def ld_imm(self, k: int) -> None:
        self.emit(LD | W | IMM, k)

    def ld_byte(self, offset: int) -> None:
        self.emit(LD | B | ABS, offset)

    def ld_len(self) -> None:
        self.emit(LD | W | LEN)

    # Arithmetic on A.
    def alu(self, op: int, k: int) -> None:
        self.emit(ALU | op | K, k)

    def alu_x(self, op: int) -> None:
        self.emit(ALU | op | X)

    def tax(self) -> None:
        self.emit(MISC | TAX)

    # Control.
    def jump_if(self, op: int, k: int, true: str | None, false: str | None) -> None:
        """Compare A with `k`; None means fall through."""
        self.emit(JMP | op | K, k, true, false)

    def jump_if_x(self, op: int, true: str | None, false: str | None) -> None:
        """Compare A with X; None means fall through."""
        self.emit(JMP | op | X, 0, true, false)

    def ret(self, k: int) -> None:
        self.emit(RET | K, k)

    def ret_a(self) -> None:
        self.emit(RET | RET_A)

    def assemble(self) -> list[Insn]:
        """Resolve labels; every jump must go forward by at most 255."""
        out: list[Insn] = []
        for index, insn in enumerate(self._insns):
            jt = self._offset(index, insn.jt)
            jf = self._offset(index, insn.jf)
            out.append((insn.code, jt, jf, insn.k))
        return out

    def _offset(self, index: int, label: str | None) -> int:
        if label is None:
            return 0
        if label not in self._labels:
            raise SteeringUsageError(f"undefined label {label!r}")
        offset = self._labels[label] - index - 1
        if not 0 <= offset <= 255:
            raise SteeringUsageError(f"jump to {label!r} out of range ({offset})")
        return offset


class _U64Ops:
    """64-bit operations over (hi, lo) slot pairs named `<name>.hi` / `<name>.lo`."""

    def __init__(self, asm: Assembler) -> None:
        self.a = asm

    def copy(self, src: str, dst: str) -> None:
        for half in ("hi", "lo"):
            self.a.ld(f"{src}.{half}")
            self.a.st(f"{dst}.{half}")

    def xor_const(self, src: str, c: int, dst: str) -> None:
        for half, k in (("hi", c >> 32), ("lo", c & U32)):
            self.a.ld(f"{src}.{half}")
            self.a.alu(XOR, k)
            self.a.st(f"{dst}.{half}")

    def add_const(self, src: str, c: int, dst: str) -> None:
        c_hi, c_lo = c >> 32, c & U32
        done = self.a.new_label("add")
        self.a.ld(f"{src}.hi")
        self.a.alu(ADD, c_hi)
        self.a.st("t.hi")
        self.a.ld(f"{src}.lo")
        self.a.alu(ADD, c_lo)
        self.a.st(f"{dst}.lo")
        # carry out of the low word iff the sum wrapped below the addend
        self.a.jump_if(JGE, c_lo, done, None)
        self.a.ld("t.hi")
        self.a.alu(ADD, 1)
        self.a.st("t.hi")
        self.a.label(done)
        self.a.ld("t.hi")
        self.a.st(f"{dst}.hi")

    def rotl(self, src: str, r: int, dst: str) -> None:
        if not 0 < r < 32:
            raise SteeringUsageError(f"rotl by {r} not supported")
        # new hi = hi << r | lo >> (32 - r); new lo = lo << r | hi >> (32 - r)
        for out, first, second in (("t.hi", "hi", "lo"), ("t.lo", "lo", "hi")):
            self.a.ld(f"{src}.{second}")
            self.a.alu(RSH, 32 - r)
            self.a.tax()
            self.a.ld(f"{src}.{first}")
            self.a.alu(LSH, r)
            self.a.alu_x(OR)
            self.a.st(out)
        self.copy("t", dst)

    def xorshift(self, name: str, s: int) -> None:
        """`v ^= v >> s` in place, for 0 < s < 64."""
        a = self.a
        if s >= 32:
            a.ld(f"{name}.hi")
            if s > 32:
                a.alu(RSH, s - 32)
            a.tax()
            a.ld(f"{name}.lo")
            a.alu_x(XOR)
            a.st(f"{name}.lo")
            return
        # lo ^= (lo >> s) | (hi << (32 - s)); then hi ^= hi >> s
        a.ld(f"{name}.hi")
        a.alu(LSH, 32 - s)
        a.tax()
        a.ld(f"{name}.lo")
        a.alu(RSH, s)
        a.alu_x(OR)
        a.tax()
        a.ld(f"{name}.lo")
        a.alu_x(XOR)
        a.st(f"{name}.lo")
        a.ld(f"{name}.hi")
        a.alu(RSH, s)
        a.tax()
        a.ld(f"{name}.hi")
        a.alu_x(XOR)
        a.st(f"{name}.hi")

    def mul_const(self, src: str, c: int, dst: str) -> None:
        """dst = src * c mod 2**64 (dst may be src)."""
        a = self.a
        c_hi, c_lo = c >> 32, c & U32
        c0, c1 = c_lo & 0xFFFF, c_lo >> 16
        lo = f"{src}.lo"
        a.ld(lo)
        a.alu(AND, 0xFFFF)
        a.st("m.a0")
        a.ld(lo)
        a.alu(RSH, 16)
        a.st("m.a1")
        # mid = (a0*c0) >> 16
        a.ld("m.a0")
        a.alu(MUL, c0)
        a.alu(RSH, 16)
        a.st("m.mid")
        # a0*c1: low half into mid, high half into the high word
        a.ld("m.a0")
        a.alu(MUL, c1)
        a.st("m.t")
        a.alu(AND, 0xFFFF)
        a.tax()
        a.ld("m.mid")
        a.alu_x(ADD)
        a.st("m.mid")
        a.ld("m.t")
        a.alu(RSH, 16)
        a.st("m.hi")
        # a1*c0: the same
        a.ld("m.a1")
        a.alu(MUL, c0)
        a.st("m.t")
        a.alu(AND, 0xFFFF)
        a.tax()
        a.ld("m.mid")
        a.alu_x(ADD)
        a.st("m.mid")
        a.ld("m.t")
        a.alu(RSH, 16)
        self._add_to_hi()
        # a1*c1, the carry out of mid, and the two cross products
        a.ld("m.a1")
        a.alu(MUL, c1)
        self._add_to_hi()
        a.ld("m.mid")
        a.alu(RSH, 16)
        self._add_to_hi()
        a.ld(f"{src}.hi")
        a.alu(MUL, c_lo)
        self._add_to_hi()
        a.ld(lo)
        a.alu(MUL, c_hi)
        self._add_to_hi()
        # low word last: src is no longer read after this
        a.ld(lo)
        a.alu(MUL, c_lo)
        a.st(f"{dst}.lo")
        a.ld("m.hi")
        a.st(f"{dst}.hi")

    def _add_to_hi(self) -> None:
        """m.hi += A."""
        self.a.tax()
        self.a.ld("m.hi")
        self.a.alu_x(ADD)
        self.a.st("m.hi")


def _emit_lane(asm: Assembler) -> None:
    """lane.lo / lane.hi = bytes 12..15 / 16..19 of the frame, little-endian."""
    base = codec.OFFSET_PARTITION_ID
    for half, start in (("lo", base), ("hi", base + 4)):
        asm.ld_byte(start + 3)
        asm.alu(LSH, 24)
        asm.st("t.lo")
        for i, shift in ((2, 16), (1, 8), (0, 0)):
            asm.ld_byte(start + i)
            if shift:
                asm.alu(LSH, shift)
            asm.ldx("t.lo")
            asm.alu_x(OR)
            asm.st("t.lo" if i else f"lane.{half}")


def _emit_shard(asm: Assembler, ops: _U64Ops, shard: int) -> None:
    """h = xxh64(lane, seed=shard) from k1; keep it if it beats the best so far."""
    ops.xor_const("k1", (shard + XXH_P5 + 8) & 0xFFFF_FFFF_FFFF_FFFF, "h")
    ops.rotl("h", 27, "h")
    ops.mul_const("h", XXH_P1, "h")
    ops.add_const("h", XXH_P4, "h")
    ops.xorshift("h", 33)
    ops.mul_const("h", XXH_P2, "h")
    ops.xorshift("h", 29)
    ops.mul_const("h", XXH_P3, "h")
    ops.xorshift("h", 32)
    if shard == 0:
        ops.copy("h", "best")
        asm.ld_imm(0)
        asm.st("best.index")
        return
    take = asm.new_label("take")
    keep = asm.new_label("keep")
    low = asm.new_label("low")
    asm.ld("best.hi")
    asm.tax()
    asm.ld("h.hi")
    asm.jump_if_x(JGT, take, None)
    asm.jump_if_x(JEQ, low, keep)
    asm.label(low)
    asm.ld("best.lo")
    asm.tax()
    asm.ld("h.lo")
    asm.jump_if_x(JGT, take, keep)  # strict: a tie keeps the lower shard
    asm.label(take)
    ops.copy("h", "best")
    asm.ld_imm(shard)
    asm.st("best.index")
    asm.label(keep)


def build_program(shard_count: int, socket_index: Sequence[int | None] | None = None) -> list[Insn]:
    """The classic program steering `shard_count` shards.

    `socket_index[shard]` is the position of that shard's socket in the
    reuseport group (None: no socket, let the kernel hash); the default is
    the identity, shard i bound i-th. Raises `SteeringUsageError` past
    `max_shards()`.
    """
    if shard_count < 1:
        raise SteeringUsageError(f"shard_count must be >= 1, got {shard_count}")
    if socket_index is None:
        socket_index = list(range(shard_count))
    if len(socket_index) != shard_count:
        raise SteeringUsageError("socket_index needs one entry per shard")
    program = _assemble(shard_count, socket_index)
    if len(program) > BPF_MAXINSNS:
        raise SteeringUsageError(
            f"the cBPF program for {shard_count} shards needs {len(program)} instructions "
            f"(limit {BPF_MAXINSNS}); cBPF steering supports at most {max_shards()} shards"
        )
    return program


def _assemble(shard_count: int, socket_index: Sequence[int | None]) -> list[Insn]:
    asm = Assembler()
    ops = _U64Ops(asm)
    # Prologue: conditional jumps reach 255 instructions at most, so each
    # "no choice" return sits right after its test.
    magic, body = asm.new_label("magic"), asm.new_label("body")
    asm.ld_len()
    asm.jump_if(JGE, codec.MIN_FRAME_BYTES, magic, None)
    asm.ret(NO_CHOICE)
    asm.label(magic)
    asm.ld_byte(codec.OFFSET_MAGIC)
    asm.jump_if(JEQ, codec.MAGIC, body, None)
    asm.ret(NO_CHOICE)
    asm.label(body)
    if shard_count > 1:
        _emit_lane(asm)
        ops.mul_const("lane", XXH_P2, "k1")
        ops.rotl("k1", 31, "k1")
        ops.mul_const("k1", XXH_P1, "k1")
        for shard in range(shard_count):
            _emit_shard(asm, ops, shard)
        asm.ld("best.index")
    else:
        asm.ld_imm(0)
    if list(socket_index) == list(range(shard_count)):
        asm.ret_a()
    else:
        for shard, index in enumerate(socket_index):
            nxt = asm.new_label("map")
            asm.jump_if(JEQ, shard, None, nxt)
            asm.ret(NO_CHOICE if index is None else index)
            asm.label(nxt)
        asm.ret(NO_CHOICE)
    return asm.assemble()


@functools.cache
def max_shards() -> int:
    """The most shards one classic program can steer within BPF_MAXINSNS.

    Sized with a non-identity socket order (the longer epilogue), so a
    program that fits once keeps fitting after sockets are replaced.
    """
    shards = 1
    while len(_assemble(shards + 1, [None] * (shards + 1))) <= BPF_MAXINSNS:
        shards += 1
    return shards


def encode(program: Sequence[Insn]) -> bytes:
    """The program as an array of `struct sock_filter` (host byte order)."""
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)


def attach(sock: socket.socket, program: Sequence[Insn]) -> None:
    """Attach `program` to the reuseport group of `sock` (no privilege needed).

    The socket must already be bound with SO_REUSEPORT: attaching to an
    unbound socket gives it a private group that it leaves on bind.
    """
    filters = (_SockFilter * len(program))(*(_SockFilter(*insn) for insn in program))
    fprog = _SockFprog(len(program), filters)
    # setsockopt copies the struct; the kernel copies the filter array it points to
    # before returning, so `filters` only has to outlive this call.
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, bytes(fprog))

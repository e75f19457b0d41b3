"""A classic BPF interpreter, enough for the programs `laminar.xdp.cbpf` makes.

It follows the kernel's semantics for socket programs: 32-bit A and X, sixteen
scratch slots, big-endian absolute loads that end the program with 0 when
they run past the packet, unsigned compares, forward jumps only. It lets the
tests hold the generated program to the placement vectors without a kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

from laminar.xdp import cbpf

U32 = 0xFFFF_FFFF


def run(program: Sequence[cbpf.Insn], packet: bytes) -> int:
    """The program's return value for `packet` (the UDP payload)."""
    a = x = 0
    scratch: list[int | None] = [None] * cbpf.SCRATCH_SLOTS
    pc = 0
    while True:
        code, jt, jf, k = program[pc]
        pc += 1
        cls = code & 0x07
        if cls in (cbpf.LD, cbpf.LDX):
            value = _load(code, k, packet, scratch)
            if value is None:
                return 0
            if cls == cbpf.LD:
                a = value
            else:
                x = value
        elif cls == cbpf.ST:
            scratch[k] = a
        elif cls == cbpf.STX:
            scratch[k] = x
        elif cls == cbpf.ALU:
            a = _alu(code & 0xF0, a, x if code & cbpf.X else k)
        elif cls == cbpf.JMP:
            op = code & 0xF0
            if op == cbpf.JA:
                pc += k
                continue
            operand = x if code & cbpf.X else k
            taken = {
                cbpf.JEQ: a == operand,
                cbpf.JGT: a > operand,
                cbpf.JGE: a >= operand,
            }[op]
            pc += jt if taken else jf
        elif cls == cbpf.RET:
            return a if code & 0x18 == cbpf.RET_A else k
        elif cls == cbpf.MISC:
            if code & 0xF8 == cbpf.TXA:
                a = x
            else:
                x = a
        else:
            raise ValueError(f"unknown instruction class {cls}")


def _load(code: int, k: int, packet: bytes, scratch: list[int | None]) -> int | None:
    mode = code & 0xE0
    if mode == cbpf.IMM:
        return k
    if mode == cbpf.LEN:
        return len(packet)
    if mode == cbpf.MEM:
        value = scratch[k]
        if value is None:
            raise ValueError(f"scratch slot {k} read before written")
        return value
    if mode == cbpf.ABS:
        size = {cbpf.W: 4, cbpf.H: 2, cbpf.B: 1}[code & 0x18]
        if k + size > len(packet):
            return None
        return int.from_bytes(packet[k : k + size], "big")
    raise ValueError(f"unsupported load mode {mode:#x}")


def _alu(op: int, a: int, operand: int) -> int:
    if op == cbpf.ADD:
        return (a + operand) & U32
    if op == cbpf.SUB:
        return (a - operand) & U32
    if op == cbpf.MUL:
        return (a * operand) & U32
    if op == cbpf.OR:
        return a | operand
    if op == cbpf.AND:
        return a & operand
    if op == cbpf.XOR:
        return a ^ operand
    if op == cbpf.LSH:
        return (a << operand) & U32
    if op == cbpf.RSH:
        return a >> operand
    raise ValueError(f"unsupported ALU op {op:#x}")

"""The eBPF SK_REUSEPORT steering program, loaded once per node by the supervisor.

`EbpfSteeringProgram.load()` does the privileged work, in this order:

1. `probe_bpf()`: a one-slot map, so a process without CAP_BPF fails fast
   with EPERM before any compiling;
2. the REUSEPORT_SOCKARRAY (type 20, which bcc 0.26 cannot create) through raw
   `bpf(2)`, `MAX_SHARDS` slots for shards plus `MEMBERSHIP_SLOT` for the
   membership agent, u32 key, u64 value (a socket fd goes in, its socket
   cookie comes out);
3. the C text of `csource.steer_program_c` with the array's fd compiled in
   (`bpf_pseudo_fd(1, fd)`), loaded as program type 21 (SK_REUSEPORT), which
   bcc also has no name for.

Compiling costs 0.3-0.7 s and ~130 MiB, so it happens once, before shards
are started. After that the program and the array are plain fds: a shard that
inherits them (pass_fds) can register its own socket with `set_socket` and
attach the program without bcc. Slots empty themselves when their socket
closes for the last time.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
from dataclasses import dataclass
from typing import Any

from laminar.xdp import bcc_env, bpf_sys, csource, sockets
from laminar.xdp.errors import BpfSyscallError, BpfUnavailable, SteeringUsageError, permission_hint

PROGRAM_NAME = b"laminar_steer"
SO_COOKIE = 57


@dataclass(frozen=True, slots=True)
class SteerCounters:
    """Totals over all CPUs of the steering program's counters (eBPF mode only)."""

    steered: int
    short: int
    bad_magic: int
    bad_version: int
    bad_length: int
    no_socket: int
    unconfigured: int
    membership: int

    @property
    def malformed(self) -> int:
        """Datagrams dropped as not a laminar frame."""
        return self.short + self.bad_magic + self.bad_version + self.bad_length

    def as_dict(self) -> dict[str, int]:
        return {
            "steered": self.steered,
            "short": self.short,
            "bad_magic": self.bad_magic,
            "bad_version": self.bad_version,
            "bad_length": self.bad_length,
            "no_socket": self.no_socket,
            "unconfigured": self.unconfigured,
            "membership": self.membership,
        }


def _slot_key(slot: int) -> bytes:
    return struct.pack("=I", slot)


def set_socket(sockarray_fd: int, slot: int, sock: socket.socket) -> None:
    """Put a bound reuseport UDP socket into slot `slot` of the socket array.

    A socket can sit in one slot of one array only (the kernel answers EBUSY
    otherwise), so a socket already in `slot` is left alone.
    """
    if socket_cookie(sockarray_fd, slot) == cookie_of(sock):
        return
    bpf_sys.map_update(sockarray_fd, _slot_key(slot), struct.pack("=Q", sock.fileno()))


def cookie_of(sock: socket.socket) -> int:
    """The kernel's unique id of the socket (SO_COOKIE), what the array returns."""
    return int(struct.unpack("=Q", sock.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8))[0])


def clear_socket(sockarray_fd: int, slot: int) -> bool:
    """Empty slot `slot`; False when it was empty already."""
    return bpf_sys.map_delete(sockarray_fd, _slot_key(slot))


def socket_cookie(sockarray_fd: int, slot: int) -> int | None:
    """The socket cookie in slot `slot`, None when empty."""
    raw = bpf_sys.map_lookup(sockarray_fd, _slot_key(slot), 8)
    return None if raw is None else int(struct.unpack("=Q", raw)[0])


class EbpfSteeringProgram:
    """The loaded SK_REUSEPORT program with its socket array and maps."""

    def __init__(self, bpf: Any, sockarray_fd: int, prog_fd: int) -> None:
        self._bpf = bpf
        self.sockarray_fd = sockarray_fd
        self.prog_fd = prog_fd
        self.prog_id = bpf_sys.prog_info(prog_fd).prog_id
        self._closed = False

    @classmethod
    def load(cls) -> EbpfSteeringProgram:
        """Check privilege, create the socket array, compile and load the program.

        Raises `BpfUnavailable` naming the missing piece.
        """
        try:
            bpf_sys.probe_bpf()
        except BpfSyscallError as exc:
            if exc.is_permission:
                raise BpfUnavailable(permission_hint(), exc.errno) from exc
            raise BpfUnavailable(str(exc), exc.errno) from exc
        bcc = bcc_env.import_bcc()
        sockarray_fd = bpf_sys.map_create(
            bpf_sys.BPF_MAP_TYPE_REUSEPORT_SOCKARRAY, 4, 8, csource.SOCKARRAY_SLOTS, "laminar_socks"
        )
        try:
            try:
                bpf = bcc.BPF(text=csource.steer_program_c(sockarray_fd).encode())
                fn = bpf.load_func(PROGRAM_NAME, bpf_sys.BPF_PROG_TYPE_SK_REUSEPORT)
            except Exception as exc:  # bcc raises bare Exception for compile and load errors
                raise BpfUnavailable(f"the SK_REUSEPORT program did not load: {exc}") from exc
            return cls(bpf, sockarray_fd, int(fn.fd))
        except BaseException:
            os.close(sockarray_fd)
            raise

    def set_shard_count(self, shard_count: int) -> None:
        """How many shards the program hashes over (slots 0..shard_count-1)."""
        if not 1 <= shard_count <= csource.MAX_SHARDS:
            raise SteeringUsageError(
                f"eBPF steering supports 1..{csource.MAX_SHARDS} shards, got {shard_count}"
            )
        self._bpf[b"steer_config"][ctypes.c_uint32(0)] = ctypes.c_uint32(shard_count)

    def set_socket(self, slot: int, sock: socket.socket) -> None:
        set_socket(self.sockarray_fd, slot, sock)

    def clear_socket(self, slot: int) -> bool:
        return clear_socket(self.sockarray_fd, slot)

    def socket_cookie(self, slot: int) -> int | None:
        return socket_cookie(self.sockarray_fd, slot)

    def attach(self, sock: socket.socket) -> None:
        """Make this the program of `sock`'s (bound) reuseport group."""
        sockets.attach_ebpf(sock, self.prog_fd)

    def counters(self) -> SteerCounters:
        table = self._bpf[b"steer_counters"]
        totals = [int(table.sum(ctypes.c_uint32(int(slot))).value) for slot in csource.SteerCounter]
        return SteerCounters(*totals)

    def close(self) -> None:
        """Unload: the program stays alive while a reuseport group still holds it."""
        if self._closed:
            return
        self._closed = True
        os.close(self.sockarray_fd)
        self._bpf.cleanup()

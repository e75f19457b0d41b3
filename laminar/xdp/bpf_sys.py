"""Raw `bpf(2)` calls through ctypes, for what bcc 0.26 does not offer.

bcc 0.26 knows neither BPF_MAP_TYPE_REUSEPORT_SOCKARRAY (20) nor the
SK_REUSEPORT program type (21) by name, has no test-run binding and attaches
XDP only through netlink. This module makes the handful of commands laminar
needs, each with its own `bpf_attr` layout (the kernel zero-extends a short
attr, so each struct stops at the last field used):

- BPF_MAP_CREATE, BPF_MAP_{LOOKUP,UPDATE,DELETE}_ELEM: the reuseport socket
  array (a socket fd goes in as the value, its socket cookie comes out) and
  small probes.
- BPF_PROG_TEST_RUN: run a loaded program over bytes (XDP programs here), used
  to hold the C xxh64 to the placement vectors without any network.
- BPF_OBJ_GET_INFO_BY_FD, BPF_PROG_GET_FD_BY_ID: name and id of a program, to
  recognise a stale classifier left by a killed run.
- BPF_LINK_CREATE: attach XDP as a link, which the kernel detaches by itself
  when the last fd of the link closes (process exit, even SIGKILL).

Every fd the kernel returns is O_CLOEXEC; `subprocess.Popen(pass_fds=...)`
clears that for the fds it passes. Failures raise `BpfSyscallError` (an
OSError with the errno); EPERM means the process lacks CAP_BPF.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from dataclasses import dataclass
from typing import Final

from laminar.xdp.errors import BpfSyscallError, BpfUnavailable

# bpf(2) commands.
BPF_MAP_CREATE: Final = 0
BPF_MAP_LOOKUP_ELEM: Final = 1
BPF_MAP_UPDATE_ELEM: Final = 2
BPF_MAP_DELETE_ELEM: Final = 3
BPF_PROG_TEST_RUN: Final = 10
BPF_PROG_GET_FD_BY_ID: Final = 13
BPF_OBJ_GET_INFO_BY_FD: Final = 15
BPF_LINK_CREATE: Final = 28

# Map and program types and attach types laminar uses.
BPF_MAP_TYPE_ARRAY: Final = 2
BPF_MAP_TYPE_REUSEPORT_SOCKARRAY: Final = 20
BPF_PROG_TYPE_XDP: Final = 6
BPF_PROG_TYPE_SK_REUSEPORT: Final = 21
BPF_XDP: Final = 37  # enum bpf_attach_type

# Update flags.
BPF_ANY: Final = 0

BPF_OBJ_NAME_LEN: Final = 16

_SYSCALL_NUMBERS: Final = {"x86_64": 321, "aarch64": 280, "arm64": 280}

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint]


class _MapCreateAttr(ctypes.Structure):
    _fields_ = [
        ("map_type", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("inner_map_fd", ctypes.c_uint32),
        ("numa_node", ctypes.c_uint32),
        ("map_name", ctypes.c_char * BPF_OBJ_NAME_LEN),
    ]


class _MapElemAttr(ctypes.Structure):
    _fields_ = [
        ("map_fd", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
        ("key", ctypes.c_uint64),
        ("value", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
    ]


class _TestRunAttr(ctypes.Structure):
    _fields_ = [
        ("prog_fd", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("data_in", ctypes.c_uint64),
        ("data_out", ctypes.c_uint64),
        ("repeat", ctypes.c_uint32),
        ("duration", ctypes.c_uint32),
    ]


class _GetFdByIdAttr(ctypes.Structure):
    _fields_ = [("prog_id", ctypes.c_uint32), ("next_id", ctypes.c_uint32)]


class _InfoByFdAttr(ctypes.Structure):
    _fields_ = [
        ("bpf_fd", ctypes.c_uint32),
        ("info_len", ctypes.c_uint32),
        ("info", ctypes.c_uint64),
    ]


class _ProgInfo(ctypes.Structure):
    # The head of struct bpf_prog_info, up to and including the name.
    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("tag", ctypes.c_uint8 * 8),
        ("jited_prog_len", ctypes.c_uint32),
        ("xlated_prog_len", ctypes.c_uint32),
        ("jited_prog_insns", ctypes.c_uint64),
        ("xlated_prog_insns", ctypes.c_uint64),
        ("load_time", ctypes.c_uint64),
        ("created_by_uid", ctypes.c_uint32),
        ("nr_map_ids", ctypes.c_uint32),
        ("map_ids", ctypes.c_uint64),
        ("name", ctypes.c_char * BPF_OBJ_NAME_LEN),
    ]


class _LinkCreateAttr(ctypes.Structure):
    _fields_ = [
        ("prog_fd", ctypes.c_uint32),
        ("target_ifindex", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
    ]


@dataclass(frozen=True, slots=True)
class ProgInfo:
    """What the kernel says about a loaded program."""

    prog_id: int
    prog_type: int
    name: str
    tag: str


@dataclass(frozen=True, slots=True)
class TestRun:
    """The result of one BPF_PROG_TEST_RUN."""

    retval: int
    data_out: bytes
    duration_ns: int


def _syscall_number() -> int:
    machine = platform.machine()
    number = _SYSCALL_NUMBERS.get(machine)
    if number is None:
        raise BpfUnavailable(f"no bpf(2) syscall number known for machine {machine!r}")
    return number


def _bpf(command: int, name: str, attr: ctypes.Structure) -> int:
    result = int(_syscall(_syscall_number(), command, ctypes.byref(attr), ctypes.sizeof(attr)))
    if result < 0:
        raise BpfSyscallError(name, ctypes.get_errno())
    return result


def map_create(
    map_type: int, key_size: int, value_size: int, max_entries: int, name: str = ""
) -> int:
    """Create a map; returns its fd (O_CLOEXEC). The caller closes it."""
    attr = _MapCreateAttr(
        map_type=map_type,
        key_size=key_size,
        value_size=value_size,
        max_entries=max_entries,
        map_name=name.encode()[: BPF_OBJ_NAME_LEN - 1],
    )
    return _bpf(BPF_MAP_CREATE, "BPF_MAP_CREATE", attr)


def map_update(map_fd: int, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
    """Set `key` to `value` in the map (sizes must match the map's)."""
    key_buf = ctypes.create_string_buffer(key, len(key))
    value_buf = ctypes.create_string_buffer(value, len(value))
    attr = _MapElemAttr(
        map_fd=map_fd,
        key=ctypes.addressof(key_buf),
        value=ctypes.addressof(value_buf),
        flags=flags,
    )
    _bpf(BPF_MAP_UPDATE_ELEM, "BPF_MAP_UPDATE_ELEM", attr)


def map_lookup(map_fd: int, key: bytes, value_size: int) -> bytes | None:
    """The value at `key`, or None when the slot is empty (ENOENT)."""
    key_buf = ctypes.create_string_buffer(key, len(key))
    value_buf = ctypes.create_string_buffer(value_size)
    attr = _MapElemAttr(
        map_fd=map_fd, key=ctypes.addressof(key_buf), value=ctypes.addressof(value_buf)
    )
    try:
        _bpf(BPF_MAP_LOOKUP_ELEM, "BPF_MAP_LOOKUP_ELEM", attr)
    except BpfSyscallError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise
    return value_buf.raw


def map_delete(map_fd: int, key: bytes) -> bool:
    """Empty the slot at `key`; False when it was already empty."""
    key_buf = ctypes.create_string_buffer(key, len(key))
    attr = _MapElemAttr(map_fd=map_fd, key=ctypes.addressof(key_buf))
    try:
        _bpf(BPF_MAP_DELETE_ELEM, "BPF_MAP_DELETE_ELEM", attr)
    except BpfSyscallError as exc:
        if exc.errno == errno.ENOENT:
            return False
        raise
    return True


def prog_test_run(prog_fd: int, data: bytes, repeat: int = 1) -> TestRun:
    """Run a loaded program once (or `repeat` times) over `data`."""
    data_in = ctypes.create_string_buffer(data, len(data))
    out_size = len(data) + 256  # XDP may grow the packet; give it room
    data_out = ctypes.create_string_buffer(out_size)
    attr = _TestRunAttr(
        prog_fd=prog_fd,
        data_size_in=len(data),
        data_size_out=out_size,
        data_in=ctypes.addressof(data_in),
        data_out=ctypes.addressof(data_out),
        repeat=repeat,
    )
    _bpf(BPF_PROG_TEST_RUN, "BPF_PROG_TEST_RUN", attr)
    return TestRun(attr.retval, data_out.raw[: attr.data_size_out], attr.duration)


def prog_info(prog_fd: int) -> ProgInfo:
    """Id, type, name and tag of the program behind `prog_fd`."""
    info = _ProgInfo()
    attr = _InfoByFdAttr(bpf_fd=prog_fd, info_len=ctypes.sizeof(info), info=ctypes.addressof(info))
    _bpf(BPF_OBJ_GET_INFO_BY_FD, "BPF_OBJ_GET_INFO_BY_FD", attr)
    return ProgInfo(
        prog_id=info.id,
        prog_type=info.type,
        name=info.name.decode(errors="replace"),
        tag=bytes(info.tag).hex(),
    )


def prog_fd_by_id(prog_id: int) -> int:
    """An fd for the loaded program with id `prog_id` (needs CAP_SYS_ADMIN)."""
    return _bpf(BPF_PROG_GET_FD_BY_ID, "BPF_PROG_GET_FD_BY_ID", _GetFdByIdAttr(prog_id=prog_id))


def prog_info_by_id(prog_id: int) -> ProgInfo:
    """`prog_info` for a program known only by id."""
    fd = prog_fd_by_id(prog_id)
    try:
        return prog_info(fd)
    finally:
        os.close(fd)


def link_create(prog_fd: int, target_ifindex: int, attach_type: int, flags: int = 0) -> int:
    """Attach `prog_fd` through a BPF link; returns the link fd.

    The attachment lives exactly as long as the link fd (and its duplicates).
    """
    attr = _LinkCreateAttr(
        prog_fd=prog_fd, target_ifindex=target_ifindex, attach_type=attach_type, flags=flags
    )
    return _bpf(BPF_LINK_CREATE, "BPF_LINK_CREATE", attr)


def probe_bpf() -> None:
    """Raise `BpfSyscallError` unless this process may create BPF maps.

    Creates and closes a one-slot array map: the cheapest question that gets
    the same answer as every other privileged `bpf(2)` command.
    """
    os.close(map_create(BPF_MAP_TYPE_ARRAY, 4, 4, 1, "laminar_probe"))

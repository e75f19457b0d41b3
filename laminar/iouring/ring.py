"""One io_uring instance: prepare entries, submit them, reap completions.

Some facts about io_uring, and how this module uses them:

- A ring is two queues shared with the kernel through mmap: the submission
  queue (SQ) of 64-byte entries (SQEs) and the completion queue (CQ) of 16-byte
  entries (CQEs). We write SQEs straight into the mapped memory with one
  `struct.pack_into` each and read CQEs with `struct.iter_unpack`: about a third
  of the cost of going through python-liburing's per-field objects, which
  measured 0.6 us per operation. python-liburing supplies the constants and its
  bundled C library the three syscalls (see `native`).
- Producer and consumer indexes are free-running u32 counters. We publish the SQ
  tail after writing the entries, and advance the CQ head after reading them.
  x86-64 keeps stores in order and loads in order, and CPython performs each
  memoryview store as a single aligned 4-byte store, so no explicit barriers are
  needed there. Other architectures would need them: the ring refuses to start
  on anything but x86-64 (the caller then falls back to the stock loop).
- `io_uring_enter` both submits and waits. One call per loop iteration submits
  every new SQE and sleeps until a completion or the timeout (passed through
  IORING_ENTER_EXT_ARG, so no timeout SQE is needed). ctypes drops the GIL there.
- A full SQ is never an error here: `prep` flushes the queue to the kernel
  (submit without waiting) and then writes the entry. The kernel may refuse to
  take entries (EBUSY while its completion queue overflows, EAGAIN when short
  of memory) or take only some: an entry it has not taken is never overwritten;
  the ring reaps completions (keeping them for the next `wait`) until it does.
- A chain of linked entries must reach the kernel in one submission (a chain
  cut at the end of a submission is ended there), so callers `reserve(n)` slots
  before writing a chain. If the kernel still takes only part of a chain, the
  rest runs unlinked: `chain_split(user_datas)` tells the caller, who must then
  not rely on the order (a write -> fdatasync chain needs its sync again).
- The loop needs IORING_FEAT_NODROP (5.5), IORING_FEAT_EXT_ARG (5.11: a wait
  with a timeout and no timeout entry; without it the loop would spin while a
  timer is pending) and the opcodes in `LOOP_OPCODES` (UNLINKAT: 5.11):
  `check_available` reports what is missing, so runtime="auto" falls back to
  the stock loop with that reason.
- With IORING_SETUP_SUBMIT_ALL a bad entry fails alone, with its own CQE, and
  does not stop the rest of the batch. With IORING_FEAT_NODROP the kernel never
  drops a completion when the CQ is full: it keeps it and posts it later.
- The kernel reads and writes our buffers until it posts the completion. Each
  operation carries a token (the caller's) and a keep-alive object (the buffers);
  both live in `_ops` under the entry's user_data until its CQE is reaped.
  `close()` cancels what is in flight and waits for the completions before it
  unmaps anything; buffers of operations that never complete are kept forever
  rather than freed under the kernel's feet.
- SINGLE_ISSUER + DEFER_TASKRUN make completions cheaper (no interrupts of the
  running thread; the kernel does the work inside our enter call) but require
  one thread to do all submissions: the ring is created disabled and enabled by
  the first thread that submits.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import platform
import struct
import time
from collections.abc import Callable
from typing import Any

import liburing

from . import abi
from .errors import IoUringUnavailable, unavailable_from_errno
from .native import bytes_address, io_uring_enter2, io_uring_register, io_uring_setup

Completion = tuple[Any, int, int]
"""(token, res, flags) for one reaped CQE whose operation carried a token."""

_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF
_SUBMIT_ATTEMPTS = 1000
_SQE_FLAGS_AT = 1  # byte offsets inside a 64-byte SQE
_SQE_USER_DATA = struct.Struct("<Q")
_SQE_USER_DATA_AT = 32
_NO_COMPLETIONS: list[Completion] = []
# Buffers of operations that did not complete before their ring closed. The
# kernel may still write into them, so they are never freed.
_ORPHANED: list[object] = []


class WrongThread(RuntimeError):
    """A single-issuer ring was used from a thread other than its owner."""


class Ring:
    """An io_uring with a token and keep-alive table.

    `prep(...)` writes one SQE and returns its user_data; `wait(timeout)` submits
    everything prepared and returns the completions of operations that carried a
    token. Counters (`sqes_prepared`, `completions`, `enter_calls`) let tests
    prove work went through the ring.
    """

    def __init__(self, entries: int = 256, *, cq_entries: int = 0, single_issuer: bool = True):
        """Set up a ring of `entries` SQEs (CQ: `cq_entries`, default 4x).

        `single_issuer` asks for SINGLE_ISSUER + DEFER_TASKRUN (see module
        docs); the ring then belongs to the first thread that submits.
        """
        if platform.machine() not in ("x86_64", "AMD64"):
            raise IoUringUnavailable(
                f"laminar's ring needs x86-64 memory ordering, this is {platform.machine()}"
            )
        cq_entries = cq_entries or entries * 4
        fd, params = _setup(entries, cq_entries, single_issuer)
        self._fd = fd
        self._enabled = not (params[2] & abi.SETUP_R_DISABLED)
        self.setup_flags = params[2]
        self.features = params[5]
        sq_entries, cq_entries = params[0], params[1]
        sq_off, cq_off = params[10:19], params[19:28]
        sq_size = sq_off[6] + sq_entries * 4
        cq_size = cq_off[5] + cq_entries * abi.CQE_SIZE
        flags = mmap.MAP_SHARED | mmap.MAP_POPULATE
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        try:
            if self.features & abi.FEAT_SINGLE_MMAP:
                size = max(sq_size, cq_size)
                self._sq_mm = mmap.mmap(fd, size, flags, prot, offset=abi.OFF_SQ_RING)
                self._cq_mm = self._sq_mm
            else:
                self._sq_mm = mmap.mmap(fd, sq_size, flags, prot, offset=abi.OFF_SQ_RING)
                self._cq_mm = mmap.mmap(fd, cq_size, flags, prot, offset=abi.OFF_CQ_RING)
            self._sqe_mm = mmap.mmap(
                fd, sq_entries * abi.SQE_SIZE, flags, prot, offset=abi.OFF_SQES
            )
        except OSError as exc:
            os.close(fd)
            raise IoUringUnavailable(f"cannot map the ring: {exc}", exc.errno) from exc
        self._sq32 = memoryview(self._sq_mm).cast("I")
        self._cq = memoryview(self._cq_mm)
        self._cq32 = self._cq.cast("I")
        self._sqes = memoryview(self._sqe_mm)
        self.sq_entries = sq_entries
        self.cq_entries = cq_entries
        self._sq_mask = self._sq32[sq_off[2] // 4]
        self._cq_mask = self._cq32[cq_off[2] // 4]
        self._sq_head_i = sq_off[0] // 4
        self._sq_tail_i = sq_off[1] // 4
        self._cq_head_i = cq_off[0] // 4
        self._cq_tail_i = cq_off[1] // 4
        self._cqes_off = cq_off[5]
        array_i = sq_off[6] // 4
        for i in range(sq_entries):  # identity map: SQ slot i holds SQE i
            self._sq32[array_i + i] = i
        self._tail = self._sq32[self._sq_tail_i]
        self._submitted = self._tail
        self._cq_head = self._cq32[self._cq_head_i]
        self._next_ud = 1
        self._ops: dict[int, tuple[Any, object]] = {}
        self._backlog: list[Completion] = []  # reaped while making room, not yet returned
        self._split: set[int] = set()  # user_data of entries that lost their link
        self._pack = abi.SQE_HEAD.pack_into
        # Timeout argument for io_uring_enter2 (IORING_ENTER_EXT_ARG).
        self._ts = ctypes.create_string_buffer(abi.TIMESPEC.size)
        self._arg = ctypes.create_string_buffer(abi.GETEVENTS_ARG.size)
        abi.GETEVENTS_ARG.pack_into(self._arg, 0, 0, 0, 0, ctypes.addressof(self._ts))
        self._arg_addr = ctypes.addressof(self._arg)
        self._ext_arg = bool(self.features & abi.FEAT_EXT_ARG)
        self.sqes_prepared = 0
        self.completions = 0
        self.enter_calls = 0
        # The one syscall that submits and waits; tests put a refusing kernel here.
        self._enter_syscall: Callable[..., int] = io_uring_enter2

    # -- preparing -------------------------------------------------------------

    def prep(
        self,
        opcode: int,
        fd: int,
        addr: int,
        length: int,
        offset: int,
        op_flags: int,
        token: Any,
        keep: object = None,
        sqe_flags: int = 0,
    ) -> int:
        """Write one SQE; return its user_data. `keep` stays alive until its CQE.

        A `token` of None means nobody waits for the result: the CQE is reaped
        and dropped (the keep-alive is still held until then).
        """
        tail = self._tail
        if tail - self._submitted >= self.sq_entries:
            self._make_room(1)
            tail = self._tail
        ud = self._next_ud
        self._next_ud = ud + 1
        self._pack(
            self._sqes,
            (tail & self._sq_mask) << 6,
            opcode,
            sqe_flags,
            0,
            fd,
            offset,
            addr,
            length,
            op_flags,
            ud,
        )
        self._tail = tail + 1
        self._ops[ud] = (token, keep)
        return ud

    def reserve(self, count: int) -> None:
        """Make room for `count` SQEs so that a linked chain is submitted whole."""
        if count > self.sq_entries:
            raise ValueError(f"a chain of {count} entries exceeds the SQ ({self.sq_entries})")
        if self._tail - self._submitted + count > self.sq_entries:
            self._make_room(count)

    def _make_room(self, count: int) -> None:
        """Submit until `count` SQ slots are free, never overwriting an entry the
        kernel has not taken. While it refuses, reap what completed (a full
        completion queue is the usual reason) and try again; give up loudly."""
        for _ in range(_SUBMIT_ATTEMPTS):
            self._enter(0, None)
            if self._tail - self._submitted + count <= self.sq_entries:
                return
            self._backlog += self._reap_new()
            os.sched_yield()
        raise OSError(
            errno.EBUSY,
            f"io_uring keeps refusing submissions ({self._tail - self._submitted} waiting)",
        )

    def chain_split(self, user_datas: list[int]) -> bool:
        """Did a submission end inside the chain made of `user_datas`? (Then its
        later entries ran unlinked.) Forgets them either way."""
        split = False
        for ud in user_datas:
            if ud in self._split:
                self._split.discard(ud)
                split = True
        return split

    def cancel(self, user_data: int) -> None:
        """Ask the kernel to cancel one operation; it completes with -ECANCELED.

        If it already completed (or is past cancelling) its completion arrives
        as usual: callers must treat either outcome as the end of the operation.
        """
        self.prep(abi.OP_ASYNC_CANCEL, -1, user_data, 0, 0, 0, None)

    def cancel_all(self) -> None:
        """Cancel every operation in flight."""
        flags = abi.ASYNC_CANCEL_ALL | abi.ASYNC_CANCEL_ANY
        self.prep(abi.OP_ASYNC_CANCEL, -1, 0, 0, 0, flags, None)

    # -- named operations ------------------------------------------------------
    # Thin wrappers over `prep` that state each opcode's field layout once.

    def prep_nop(self, token: Any) -> int:
        return self.prep(abi.OP_NOP, -1, 0, 0, 0, 0, token)

    def prep_read(
        self, fd: int, addr: int, nbytes: int, offset: int, token: Any, keep: object
    ) -> int:
        """Read `nbytes` into the buffer at `addr`; offset -1 means the file position."""
        return self.prep(abi.OP_READ, fd, addr, nbytes, offset & _U64, 0, token, keep)

    def prep_write(
        self,
        fd: int,
        addr: int,
        nbytes: int,
        offset: int,
        token: Any,
        keep: object,
        sqe_flags: int = 0,
    ) -> int:
        return self.prep(abi.OP_WRITE, fd, addr, nbytes, offset & _U64, 0, token, keep, sqe_flags)

    def prep_writev(
        self,
        fd: int,
        iovecs_addr: int,
        count: int,
        offset: int,
        token: Any,
        keep: object,
        sqe_flags: int = 0,
    ) -> int:
        """Write `count` iovecs (an array at `iovecs_addr`) at `offset`."""
        return self.prep(
            abi.OP_WRITEV, fd, iovecs_addr, count, offset & _U64, 0, token, keep, sqe_flags
        )

    def prep_fdatasync(self, fd: int, token: Any, sqe_flags: int = 0) -> int:
        return self.prep(abi.OP_FSYNC, fd, 0, 0, 0, abi.FSYNC_DATASYNC, token, None, sqe_flags)

    def prep_fallocate(self, fd: int, mode: int, offset: int, length: int, token: Any) -> int:
        return self.prep(abi.OP_FALLOCATE, fd, length, mode, offset, 0, token)

    def prep_ftruncate(self, fd: int, length: int, token: Any) -> int:
        return self.prep(abi.OP_FTRUNCATE, fd, 0, 0, length, 0, token)

    def prep_accept(self, fd: int, flags: int, token: Any) -> int:
        """Accept without asking for the peer address (the binding's EFAULT pitfall)."""
        return self.prep(abi.OP_ACCEPT, fd, 0, 0, 0, flags, token)

    def prep_recv(
        self, fd: int, addr: int, nbytes: int, msg_flags: int, token: Any, keep: object
    ) -> int:
        return self.prep(abi.OP_RECV, fd, addr, nbytes, 0, msg_flags, token, keep)

    def prep_send(
        self, fd: int, addr: int, nbytes: int, msg_flags: int, token: Any, keep: object
    ) -> int:
        return self.prep(abi.OP_SEND, fd, addr, nbytes, 0, msg_flags, token, keep)

    def prep_connect(self, fd: int, sockaddr: bytes, token: Any) -> int:
        return self.prep(
            abi.OP_CONNECT, fd, bytes_address(sockaddr), 0, len(sockaddr), 0, token, sockaddr
        )

    def prep_close(self, fd: int, token: Any) -> int:
        return self.prep(abi.OP_CLOSE, fd, 0, 0, 0, 0, token)

    def prep_poll(self, fd: int, events: int, token: Any) -> int:
        return self.prep(abi.OP_POLL_ADD, fd, 0, 0, 0, events, token)

    def prep_timeout(self, seconds: float, token: Any) -> int:
        """Complete with -ETIME after `seconds` (a relative timer in the ring)."""
        sec = int(seconds)
        ts = abi.TIMESPEC.pack(sec, int((seconds - sec) * 1e9))
        return self.prep(abi.OP_TIMEOUT, -1, bytes_address(ts), 1, 0, 0, token, ts)

    def prep_link_timeout(self, seconds: float, token: Any) -> int:
        """Cancel the previous (linked) entry if it has not completed in `seconds`."""
        sec = int(seconds)
        ts = abi.TIMESPEC.pack(sec, int((seconds - sec) * 1e9))
        return self.prep(abi.OP_LINK_TIMEOUT, -1, bytes_address(ts), 1, 0, 0, token, ts)

    # -- submitting and reaping ------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Operations prepared or submitted whose completion was not reaped yet."""
        return len(self._ops)

    def is_pending(self, user_data: int) -> bool:
        """True until the completion of `user_data` has been reaped."""
        return user_data in self._ops

    def tokens(self) -> list[Any]:
        """Tokens of the operations in flight (for shutdown)."""
        return [token for token, _keep in self._ops.values() if token is not None]

    @property
    def unsubmitted(self) -> int:
        return self._tail - self._submitted

    def submit(self) -> int:
        """Hand prepared SQEs to the kernel without waiting; return how many."""
        return self._enter(0, None)

    def wait(self, timeout: float | None) -> list[Completion]:
        """Submit everything prepared, wait up to `timeout` s for a completion, reap.

        `timeout=None` waits without limit, `0` only polls. The wait returns early
        on a signal (EINTR) so that Python can run its signal handlers.
        """
        if (timeout is None or timeout > 0) and (
            self._backlog or self._cq32[self._cq_tail_i] != self._cq_head
        ):
            timeout = 0  # completions are already waiting
        self._enter(1, timeout)
        return self.reap()

    def _enter(self, want: int, timeout: float | None) -> int:
        if not self._enabled:
            self._enable()
        tail = self._tail
        to_submit = tail - self._submitted
        if to_submit:
            self._sq32[self._sq_tail_i] = tail & _U32
        flags = abi.ENTER_GETEVENTS
        arg = None
        size = 0
        if not want or timeout == 0:
            want = 0
        elif timeout is not None:
            if self._ext_arg:
                sec = int(timeout)
                abi.TIMESPEC.pack_into(self._ts, 0, sec, int((timeout - sec) * 1e9))
                flags |= abi.ENTER_EXT_ARG
                arg = self._arg_addr
                size = abi.GETEVENTS_ARG.size
            else:
                want = 0
        ret = self._enter_syscall(self._fd, to_submit, want, flags, arg, size)
        self.enter_calls += 1
        if to_submit:
            head = self._sq32[self._sq_head_i]
            before = self._submitted
            self._submitted = tail - ((tail - head) & _U32)
            self.sqes_prepared += self._submitted - (tail - to_submit)
            if before != self._submitted != tail:
                self._note_split(self._submitted)
        if ret < 0 and ret not in (-errno.ETIME, -errno.EINTR, -errno.EBUSY, -errno.EAGAIN):
            if ret == -errno.EEXIST and self.setup_flags & abi.SETUP_SINGLE_ISSUER:
                raise WrongThread(
                    "this io_uring belongs to the thread that first submitted to it "
                    "(IORING_SETUP_SINGLE_ISSUER): run the loop on one thread, or create "
                    "it with single_issuer=False"
                )
            raise OSError(-ret, f"io_uring_enter: {os.strerror(-ret)}")
        return to_submit

    def _note_split(self, first_unsubmitted: int) -> None:
        """The kernel stopped taking entries at `first_unsubmitted`: if the entry
        before it was linked to it, that chain is cut (see module docs)."""
        mask = self._sq_mask
        last = ((first_unsubmitted - 1) & mask) << 6
        if self._sqes[last + _SQE_FLAGS_AT] & abi.IOSQE_IO_LINK:
            at = (first_unsubmitted & mask) << 6
            self._split.add(_SQE_USER_DATA.unpack_from(self._sqes, at + _SQE_USER_DATA_AT)[0])

    def reap(self) -> list[Completion]:
        """Take every posted CQE; return those whose operation carried a token."""
        if self._backlog:
            out, self._backlog = self._backlog, []
            return out + self._reap_new()
        return self._reap_new()

    def _reap_new(self) -> list[Completion]:
        cq32 = self._cq32
        tail = cq32[self._cq_tail_i]
        head = self._cq_head
        count = (tail - head) & _U32
        if not count:
            return _NO_COMPLETIONS
        start = head & self._cq_mask
        end = start + count
        base = self._cqes_off
        cq = self._cq
        it = abi.CQE.iter_unpack
        if end <= self.cq_entries:
            raw = list(it(cq[base + start * 16 : base + end * 16]))
        else:
            raw = list(it(cq[base + start * 16 : base + self.cq_entries * 16]))
            raw += it(cq[base : base + (end - self.cq_entries) * 16])
        cq32[self._cq_head_i] = tail
        self._cq_head = tail
        self.completions += count
        ops = self._ops
        out: list[Completion] = []
        for ud, res, flags in raw:
            entry = ops.get(ud) if flags & abi.CQE_F_MORE else ops.pop(ud, None)
            if entry is not None and entry[0] is not None:
                out.append((entry[0], res, flags))
        return out

    def _enable(self) -> None:
        ret = io_uring_register(self._fd, abi.REGISTER_ENABLE_RINGS, None, 0)
        if ret < 0:
            raise OSError(-ret, f"io_uring_register(ENABLE_RINGS): {os.strerror(-ret)}")
        self._enabled = True

    # -- closing ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def fileno(self) -> int:
        return self._fd

    def drain(self, timeout: float = 2.0) -> list[Completion]:
        """Cancel everything in flight and collect completions until none is left.

        Gives up after `timeout` seconds (operations that cannot be cancelled,
        such as a write punted to a kernel worker, finish on their own).
        """
        out: list[Completion] = []
        if self._fd < 0 or not self._ops:
            return out
        self.cancel_all()
        deadline = time.monotonic() + timeout
        while self._ops:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            out += self.wait(min(remaining, 0.05))
        return out

    def close(self) -> None:
        """Cancel and reap what is in flight, then unmap and close the ring."""
        if self._fd < 0:
            return
        if self._enabled or self._ops:
            with contextlib.suppress(OSError, WrongThread):
                self.drain()
        if self._ops:
            _ORPHANED.append(list(self._ops.values()))
            self._ops = {}
        self._sq32.release()
        self._cq32.release()
        self._cq.release()
        self._sqes.release()
        self._sqe_mm.close()
        if self._cq_mm is not self._sq_mm:
            self._cq_mm.close()
        self._sq_mm.close()
        fd, self._fd = self._fd, -1
        os.close(fd)

    def __enter__(self) -> Ring:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _setup(entries: int, cq_entries: int, single_issuer: bool) -> tuple[int, tuple[int, ...]]:
    """io_uring_setup with the best flags this kernel accepts."""
    base = abi.SETUP_CQSIZE | abi.SETUP_CLAMP
    candidates = []
    if single_issuer:
        candidates.append(
            base
            | abi.SETUP_SUBMIT_ALL
            | abi.SETUP_SINGLE_ISSUER
            | abi.SETUP_DEFER_TASKRUN
            | abi.SETUP_R_DISABLED
        )
    candidates += [base | abi.SETUP_SUBMIT_ALL | abi.SETUP_COOP_TASKRUN, base]
    err = errno.EINVAL
    for flags in candidates:
        params = ctypes.create_string_buffer(abi.PARAMS.size)
        abi.PARAMS.pack_into(params, 0, 0, cq_entries, flags, *([0] * 25))
        fd = io_uring_setup(entries, params)
        if fd >= 0:
            return fd, abi.PARAMS.unpack(params.raw)
        err = -fd
        if err != errno.EINVAL:
            break
    raise unavailable_from_errno(err, entries)


_SUPPORTED: dict[int, bool] = {}


def supports(opcode: int) -> bool:
    """Whether the running kernel implements `opcode` (probed once, via python-liburing)."""
    if not _SUPPORTED:
        names = liburing.probe() or {}
        for name, ok in names.items():
            member = getattr(liburing.io_uring_op, name, None)
            if member is not None:
                _SUPPORTED[int(member)] = bool(ok)
    return _SUPPORTED.get(opcode, False)


# Every opcode the event loop and its storage backend submit (FTRUNCATE, 6.9,
# has a syscall fallback and is not required).
LOOP_OPCODES = {
    "READ": abi.OP_READ,
    "WRITE": abi.OP_WRITE,
    "WRITEV": abi.OP_WRITEV,
    "FSYNC": abi.OP_FSYNC,
    "FALLOCATE": abi.OP_FALLOCATE,
    "OPENAT": abi.OP_OPENAT,
    "CLOSE": abi.OP_CLOSE,
    "UNLINKAT": abi.OP_UNLINKAT,
    "RECV": abi.OP_RECV,
    "SEND": abi.OP_SEND,
    "ACCEPT": abi.OP_ACCEPT,
    "CONNECT": abi.OP_CONNECT,
    "POLL_ADD": abi.OP_POLL_ADD,
    "TIMEOUT": abi.OP_TIMEOUT,
    "ASYNC_CANCEL": abi.OP_ASYNC_CANCEL,
}
LOOP_FEATURES = {
    "IORING_FEAT_NODROP": abi.FEAT_NODROP,
    "IORING_FEAT_EXT_ARG": abi.FEAT_EXT_ARG,
}


def missing_for_loop(features: int, supported: Callable[[int], bool] | None = None) -> list[str]:
    """What the event loop needs that this kernel's io_uring lacks (empty: nothing)."""
    check = supported or supports
    missing = [name for name, flag in LOOP_FEATURES.items() if not features & flag]
    missing += [f"IORING_OP_{name}" for name, op in LOOP_OPCODES.items() if not check(op)]
    return missing


def check_available(entries: int = 8) -> str | None:
    """None if a ring the event loop can use can be set up here, else why not."""
    try:
        ring = Ring(entries)
    except IoUringUnavailable as exc:
        return exc.cause
    features = ring.features
    ring.close()
    missing = missing_for_loop(features)
    if missing:
        return (
            f"the kernel's io_uring lacks {', '.join(missing)} (the event loop needs "
            "Linux 5.11 or later)"
        )
    return None

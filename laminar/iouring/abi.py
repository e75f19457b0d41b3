"""The kernel's io_uring ABI: opcodes, flags and structure layouts.

Numbers come from python-liburing (the pinned binding) so that there is one
source for them; layouts are the kernel's uapi structs (`linux/io_uring.h`),
which the kernel keeps stable. Everything here is little-endian x86-64.
"""

from __future__ import annotations

import struct

import liburing

_op = liburing.io_uring_op

# Opcodes the reactor and the storage backend use.
OP_NOP = int(_op.IORING_OP_NOP)
OP_WRITEV = int(_op.IORING_OP_WRITEV)
OP_FSYNC = int(_op.IORING_OP_FSYNC)
OP_POLL_ADD = int(_op.IORING_OP_POLL_ADD)
OP_POLL_REMOVE = int(_op.IORING_OP_POLL_REMOVE)
OP_TIMEOUT = int(_op.IORING_OP_TIMEOUT)
OP_ACCEPT = int(_op.IORING_OP_ACCEPT)
OP_ASYNC_CANCEL = int(_op.IORING_OP_ASYNC_CANCEL)
OP_LINK_TIMEOUT = int(_op.IORING_OP_LINK_TIMEOUT)
OP_CONNECT = int(_op.IORING_OP_CONNECT)
OP_FALLOCATE = int(_op.IORING_OP_FALLOCATE)
OP_OPENAT = int(_op.IORING_OP_OPENAT)
OP_CLOSE = int(_op.IORING_OP_CLOSE)
OP_READ = int(_op.IORING_OP_READ)
OP_WRITE = int(_op.IORING_OP_WRITE)
OP_SEND = int(_op.IORING_OP_SEND)
OP_RECV = int(_op.IORING_OP_RECV)
OP_UNLINKAT = int(_op.IORING_OP_UNLINKAT)
OP_FTRUNCATE = int(_op.IORING_OP_FTRUNCATE)

# SQE flags.
IOSQE_IO_LINK = int(liburing.IOSQE_IO_LINK)
IOSQE_IO_HARDLINK = int(liburing.IOSQE_IO_HARDLINK)
IOSQE_ASYNC = int(liburing.IOSQE_ASYNC)
IOSQE_CQE_SKIP_SUCCESS = int(liburing.IOSQE_CQE_SKIP_SUCCESS)

# Per-op flags.
FSYNC_DATASYNC = int(liburing.IORING_FSYNC_DATASYNC)
ASYNC_CANCEL_ALL = int(liburing.IORING_ASYNC_CANCEL_ALL)
ASYNC_CANCEL_ANY = int(liburing.IORING_ASYNC_CANCEL_ANY)
CQE_F_MORE = int(liburing.IORING_CQE_F_MORE)

# Setup, enter and feature flags.
SETUP_CQSIZE = int(liburing.IORING_SETUP_CQSIZE)
SETUP_CLAMP = int(liburing.IORING_SETUP_CLAMP)
SETUP_SUBMIT_ALL = int(liburing.IORING_SETUP_SUBMIT_ALL)
SETUP_COOP_TASKRUN = int(liburing.IORING_SETUP_COOP_TASKRUN)
SETUP_SINGLE_ISSUER = int(liburing.IORING_SETUP_SINGLE_ISSUER)
SETUP_DEFER_TASKRUN = int(liburing.IORING_SETUP_DEFER_TASKRUN)
SETUP_R_DISABLED = int(liburing.IORING_SETUP_R_DISABLED)
ENTER_GETEVENTS = int(liburing.IORING_ENTER_GETEVENTS)
ENTER_EXT_ARG = int(liburing.IORING_ENTER_EXT_ARG)
FEAT_SINGLE_MMAP = int(liburing.IORING_FEAT_SINGLE_MMAP)
FEAT_NODROP = int(liburing.IORING_FEAT_NODROP)
FEAT_EXT_ARG = int(liburing.IORING_FEAT_EXT_ARG)
OFF_SQ_RING = int(liburing.IORING_OFF_SQ_RING)
OFF_CQ_RING = int(liburing.IORING_OFF_CQ_RING)
OFF_SQES = int(liburing.IORING_OFF_SQES)
REGISTER_ENABLE_RINGS = 12

# struct io_uring_sqe (64 bytes): opcode, flags, ioprio, fd, off, addr, len,
# op_flags (rw/fsync/msg/accept/cancel/timeout/poll32/open flags), user_data,
# then buf_index, personality, file_index, addr3, pad. SQE_HEAD covers the
# first 40 bytes: the ring never sets the last 24, which stay zero from mmap.
SQE = struct.Struct("<BBHiQQIIQHHiQQ")
SQE_HEAD = struct.Struct("<BBHiQQIIQ")
SQE_SIZE = 64
# struct io_uring_cqe (16 bytes, no CQE32): user_data, res, flags.
CQE = struct.Struct("<QiI")
CQE_SIZE = 16
# struct io_uring_params: 10 u32, io_sqring_offsets (8 u32 + u64),
# io_cqring_offsets (8 u32 + u64).
PARAMS = struct.Struct("<10I8IQ8IQ")
# struct __kernel_timespec and struct iovec.
TIMESPEC = struct.Struct("<qq")
IOVEC = struct.Struct("<QQ")
# struct io_uring_getevents_arg: sigmask, sigmask_sz, min_wait_usec, ts.
GETEVENTS_ARG = struct.Struct("<QIIQ")

"""A kernel that refuses or splits submissions, and kernels that lack what the loop needs."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from laminar.iouring import Ring, abi
from laminar.iouring import ring as ring_module
from laminar.iouring.native import bytes_address
from laminar.iouring.ring import check_available, missing_for_loop
from laminar.reactor import runtime

from .test_ring import wait_for


class Kernel:
    """Stands in front of io_uring_enter: refuses the first `refusals` submissions
    (EBUSY, nothing taken), then takes at most `take` entries per call."""

    def __init__(self, ring: Ring, refusals: int = 0, take: int | None = None) -> None:
        self.real = ring._enter_syscall
        self.refusals = refusals
        self.take = take
        self.refused = 0

    def __call__(self, fd: int, to_submit: int, want: int, flags: int, *rest: Any) -> int:
        if to_submit and self.refused < self.refusals:
            self.refused += 1
            return -errno.EBUSY
        if self.take is not None:
            to_submit = min(to_submit, self.take)
        return self.real(fd, to_submit, want, flags, *rest)


def test_a_refusing_kernel_never_gets_an_entry_overwritten() -> None:
    with Ring(8) as ring:
        kernel = ring._enter_syscall = Kernel(ring, refusals=20)
        count = ring.sq_entries * 4
        for i in range(count):
            ring.prep_nop(i)
        done = wait_for(ring, count)
        assert kernel.refused == 20
        assert sorted(token for token, _, _ in done) == list(range(count))


def test_a_chain_the_kernel_takes_in_two_parts_is_reported(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        with Ring(8) as ring:
            ring._enter_syscall = Kernel(ring, take=1)
            data = b"x" * 100
            ring.reserve(2)
            first = ring.prep_write(
                fd, bytes_address(data), 100, 0, "write", data, abi.IOSQE_IO_LINK
            )
            second = ring.prep_fdatasync(fd, "sync")
            done = wait_for(ring, 2)
            assert sorted(token for token, _, _ in done) == ["sync", "write"]
            assert ring.chain_split([first, second])
            assert not ring.chain_split([first, second])  # reported once
    finally:
        os.close(fd)


def test_a_split_write_and_sync_chain_is_synced_again() -> None:
    from laminar.reactor import UringEventLoop

    async def main(path: str) -> int:
        loop = asyncio.get_running_loop()
        ring = loop._ring  # type: ignore[attr-defined]
        ring._enter_syscall = Kernel(ring, take=1)
        syncs = 0
        prep = ring.prep_fdatasync

        def counting(*args: Any, **kwargs: Any) -> int:
            nonlocal syncs
            syncs += 1
            return prep(*args, **kwargs)

        ring.prep_fdatasync = counting
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            await loop.file_writev(fd, [b"a" * 10, b"b" * 10], 0, sync=True)  # type: ignore[attr-defined]
        finally:
            os.close(fd)
        return syncs

    with asyncio.Runner(loop_factory=UringEventLoop) as runner:
        assert runner.run(main(f"/tmp/laminar-split-{os.getpid()}")) == 2
    os.unlink(f"/tmp/laminar-split-{os.getpid()}")


def test_what_the_loop_needs_is_named_when_missing() -> None:
    everything = abi.FEAT_NODROP | abi.FEAT_EXT_ARG
    assert missing_for_loop(everything, lambda op: True) == []
    assert missing_for_loop(abi.FEAT_NODROP, lambda op: True) == ["IORING_FEAT_EXT_ARG"]
    assert missing_for_loop(everything, lambda op: op != abi.OP_UNLINKAT) == ["IORING_OP_UNLINKAT"]


def test_a_kernel_without_unlinkat_makes_auto_fall_back_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As on Linux 5.6-5.10: a ring sets up, but the loop could not unlink (nor wait
    with a timeout); auto must pick the stock loop and say why."""
    monkeypatch.setattr(ring_module, "supports", lambda op: op != abi.OP_UNLINKAT)
    reason = check_available()
    assert reason is not None and "IORING_OP_UNLINKAT" in reason and "5.11" in reason
    monkeypatch.setattr(runtime, "_unavailable", [])
    monkeypatch.setattr(runtime, "check_available", check_available)
    with caplog.at_level(logging.WARNING, logger="laminar.reactor"):
        assert runtime.resolve_runtime("auto") == "asyncio"
    assert "IORING_OP_UNLINKAT" in caplog.text
    with pytest.raises(runtime.IoUringUnavailable, match="UNLINKAT"):
        runtime.resolve_runtime("uring")

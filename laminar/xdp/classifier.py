"""The XDP classifier: counts membership, partition and malformed traffic at the
interface and drops the malformed before the stack sees it.

Rules this class keeps
----------------------

- One owner: the supervisor attaches once and detaches on the way out.
- Attach through a BPF link (`BPF_LINK_CREATE`, the default): the kernel
  detaches the program when the last fd of the link closes, so every exit
  path is covered, SIGKILL included, and shards (started with close_fds)
  never hold it. `attach_with="netlink"` is the legacy way bcc uses; a
  program attached that way outlives its process, so this class then detaches
  it from `detach()`, `with`, atexit and a SIGTERM/SIGINT/SIGHUP handler that
  detaches and then runs the handler it replaced (so a supervisor that sets
  its own handlers should do so before `attach()`, or rely on atexit and a
  clean shutdown path).
- Stale programs: at attach, a program named `laminar_xdp` already on the
  interface is a leftover of a killed netlink-mode run and is removed. If
  removing it fails with EBUSY it is held by a live link, i.e. a running
  node: that is an error, as is any program that is not ours (unless
  `replace_foreign=True`).
- Mode: `auto` tries native (driver) XDP, then generic (skb) XDP, which every
  interface supports (`lo` has no native mode; veth has both).
- Ports: partition ports carry laminar frames and are checked; membership
  ports carry SWIM's own format and are only counted. A valid frame with a
  membership op (96-127) on a partition port also counts as membership.
- Counters are per CPU (`xdp_counters`); `counters()` returns totals and the
  per-CPU values.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any, Literal

from laminar.xdp import bcc_env, bpf_sys, csource, iface
from laminar.xdp.errors import BpfSyscallError, BpfUnavailable, XdpAttachError, permission_hint
from laminar.xdp.iface import XdpMode

PROGRAM_NAME = "laminar_xdp"
_CLEANUP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

RequestedXdpMode = Literal["auto", "native", "generic"]
AttachWith = Literal["link", "netlink"]
_SignalHandler = Callable[[int, FrameType | None], Any] | int | None


@dataclass(frozen=True, slots=True)
class XdpCounters:
    """Packets seen by the classifier, totals over CPUs (`per_cpu` has the split)."""

    partition: int
    membership: int
    short: int
    bad_magic: int
    bad_version: int
    bad_length: int
    other: int
    per_cpu: dict[str, tuple[int, ...]]

    @property
    def malformed(self) -> int:
        """Dropped at the interface: to a partition port but not a laminar frame."""
        return self.short + self.bad_magic + self.bad_version + self.bad_length

    def as_dict(self) -> dict[str, int]:
        return {
            "partition": self.partition,
            "membership": self.membership,
            "malformed": self.malformed,
            "malformed_short": self.short,
            "malformed_bad_magic": self.bad_magic,
            "malformed_bad_version": self.bad_version,
            "malformed_bad_length": self.bad_length,
            "other": self.other,
        }


class XdpClassifier:
    """Attach/detach and read the XDP classifier on one interface."""

    def __init__(
        self,
        ifname: str,
        partition_ports: Iterable[int],
        membership_ports: Iterable[int] = (),
        *,
        mode: RequestedXdpMode = "auto",
        attach_with: AttachWith = "link",
        replace_foreign: bool = False,
    ) -> None:
        self.ifname = ifname
        self.partition_ports = tuple(partition_ports)
        self.membership_ports = tuple(membership_ports)
        overlap = set(self.partition_ports) & set(self.membership_ports)
        if overlap:
            raise ValueError(f"ports {sorted(overlap)} are both partition and membership ports")
        self.requested_mode = mode
        self.attach_with = attach_with
        self.replace_foreign = replace_foreign
        self.attached_mode: XdpMode | None = None
        self.replaced_stale: list[iface.AttachedXdp] = []
        self._bpf: Any = None
        self._prog_fd = -1
        self._link_fd: int | None = None
        self._saved_handlers: dict[int, _SignalHandler] = {}
        self._lock = threading.RLock()  # a signal may arrive mid-detach

    @property
    def prog_id(self) -> int | None:
        return None if self._bpf is None else bpf_sys.prog_info(self._prog_fd).prog_id

    @property
    def attached(self) -> bool:
        return self.attached_mode is not None

    def attach(self) -> XdpClassifier:
        """Load (once), clear a stale program, attach. Returns self."""
        if self.attached:
            return self
        index = iface.ifindex(self.ifname)
        self._load()
        self._set_ports()
        self._clear_stale()
        modes: list[XdpMode] = (
            ["native", "generic"] if self.requested_mode == "auto" else [self.requested_mode]
        )
        failures = []
        for mode in modes:
            try:
                self._attach_mode(index, mode)
            except OSError as exc:
                failures.append(f"{mode}: {exc.strerror or exc}")
                continue
            self.attached_mode = mode
            self._register_cleanup()
            return self
        raise XdpAttachError(f"cannot attach XDP to {self.ifname}: {'; '.join(failures)}")

    def detach(self) -> None:
        """Detach if attached (idempotent, safe from atexit and signal handlers)."""
        with self._lock:
            mode, self.attached_mode = self.attached_mode, None
            if mode is None:
                return
            if self._link_fd is not None:
                os.close(self._link_fd)
                self._link_fd = None
            else:
                self._netlink_set(-1, mode)
        self._unregister_cleanup()

    def counters(self) -> XdpCounters:
        """Totals and per-CPU values of every class, read from the kernel now."""
        if self._bpf is None:
            raise XdpAttachError("the classifier is not loaded")
        table = self._bpf[b"xdp_counters"]
        per_cpu: dict[str, tuple[int, ...]] = {}
        for slot in csource.XdpCounter:
            values = table[ctypes.c_uint32(int(slot))]
            per_cpu[slot.name.lower()] = tuple(int(v) for v in values)
        totals = {name: sum(values) for name, values in per_cpu.items()}
        return XdpCounters(per_cpu=per_cpu, **totals)

    def close(self) -> None:
        """Detach and unload."""
        self.detach()
        if self._bpf is not None:
            self._bpf.cleanup()
            self._bpf = None

    def __enter__(self) -> XdpClassifier:
        return self.attach()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _bcc_module(self) -> Any:
        return bcc_env.import_bcc()

    def _load(self) -> None:
        if self._bpf is not None:
            return
        try:
            bpf_sys.probe_bpf()
        except BpfSyscallError as exc:
            cause = permission_hint() if exc.is_permission else str(exc)
            raise BpfUnavailable(cause, exc.errno) from exc
        bcc = self._bcc_module()
        try:
            self._bpf = bcc.BPF(text=csource.classifier_program_c().encode())
            self._prog_fd = int(self._bpf.load_func(PROGRAM_NAME.encode(), bcc.BPF.XDP).fd)
        except Exception as exc:  # bcc raises bare Exception
            self._bpf = None
            raise BpfUnavailable(f"the XDP classifier did not load: {exc}") from exc

    def _set_ports(self) -> None:
        table = self._bpf[b"xdp_ports"]
        table.clear()
        for ports, port_class in (
            (self.partition_ports, csource.PortClass.PARTITION),
            (self.membership_ports, csource.PortClass.MEMBERSHIP),
        ):
            for port in ports:
                key = ctypes.c_uint16(socket.htons(port))
                table[key] = ctypes.c_uint8(int(port_class))

    def _clear_stale(self) -> None:
        for found in iface.attached_xdp(self.ifname):
            ours = found.name == PROGRAM_NAME
            if not ours and not self.replace_foreign:
                raise XdpAttachError(
                    f"{self.ifname} already carries XDP program {found.name!r} "
                    f"(id {found.prog_id}, {found.mode}); not replacing a program that is "
                    "not laminar's (replace_foreign=True to do it anyway)"
                )
            try:
                self._netlink_set(-1, found.mode)
            except OSError as exc:
                if ours and exc.errno == errno.EBUSY:
                    raise XdpAttachError(
                        f"{self.ifname} carries laminar's classifier (id {found.prog_id}) through "
                        "a live BPF link: another laminar node owns this interface"
                    ) from exc
                raise XdpAttachError(f"cannot remove {found} from {self.ifname}: {exc}") from exc
            self.replaced_stale.append(found)

    def _attach_mode(self, index: int, mode: XdpMode) -> None:
        flags = iface.MODE_FLAGS[mode]
        if self.attach_with == "link":
            self._link_fd = bpf_sys.link_create(self._prog_fd, index, bpf_sys.BPF_XDP, flags)
            return
        self._netlink_set(self._prog_fd, mode)

    def _netlink_set(self, prog_fd: int, mode: XdpMode) -> None:
        """Attach `prog_fd` (-1: detach) through netlink, as bcc does; OSError on failure."""
        lib = self._bcc_module().libbcc.lib
        if lib.bpf_attach_xdp(self.ifname.encode(), prog_fd, iface.MODE_FLAGS[mode]) < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    def _register_cleanup(self) -> None:
        atexit.register(self.detach)
        if (
            self.attach_with != "netlink"
            or threading.current_thread() is not threading.main_thread()
        ):
            return
        for signum in _CLEANUP_SIGNALS:
            self._saved_handlers[signum] = signal.signal(signum, self._on_signal)

    def _unregister_cleanup(self) -> None:
        atexit.unregister(self.detach)
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, handler in self._saved_handlers.items():
            if signal.getsignal(signum) == self._on_signal:
                signal.signal(signum, handler)
        self._saved_handlers.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        previous = self._saved_handlers.get(signum, signal.SIG_DFL)
        self.detach()  # restores `previous` as the handler
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

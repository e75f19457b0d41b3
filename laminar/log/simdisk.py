"""A simulated disk for tests: every file operation recorded, power cuts on demand.

SIGKILL cannot see a missing fsync: the kernel's page cache outlives the
process. This backend can. It keeps, for every file, what reads see (the page
cache), what a power cut would leave (the disk image) and the changes made in
between; for every directory, its entries now and as of its last fsync. At any
moment `power_cut(rng)` replaces the whole state by one a real power cut could
have left (in the style of ALICE and CrashMonkey):

- a file keeps its disk image plus any subset of its unsynced changes, in order;
  a write may also be torn (only a prefix of it lands) or zeroed (the file grew
  to hold it, the data did not arrive: zeros where it extended the file);
- a directory keeps the entries it had at its last fsync plus any subset of the
  entry changes since (create, unlink, rename, mkdir): a file whose own data was
  synced is still lost if its directory entry was not;
- fsync/fdatasync of a file makes its disk image equal to its cache (this model
  does not distinguish them: the log never depends on mtime).

`kill()` is SIGKILL: open handles die, the cache survives. `cut_power_after(n)`
freezes the disk after `n` more operations (the next one never completes, as
when the lights go out mid-flush); `power_cut` then picks the state. Faults
(`inject`) fail chosen operations with an errno; a failed fsync behaves as Linux
does ("fsyncgate"), in its worst case: none of the unsynced data reaches the
disk, and the pages are marked clean, so a later fsync does not retry them while
reads from the cache still show them until `drop_cache`. Operations on a
handle the process itself closed are recorded in `misuse` (with a real file
descriptor they could hit another file that reused the number), and files
closed with unsynced changes in `closed_unsynced`.

Every fsync (with `yield_every_op`, every operation) yields to the event loop
once before it takes effect, so concurrent flushes interleave, and every
operation is appended to `journal` (tests count syncs per flush there).
"""

from __future__ import annotations

import asyncio
import copy
import errno
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from .storage import Buffer, DurableWrite, Storage, write_each_durably

OpKind = Literal[
    "open", "create", "read", "write", "sync", "truncate", "allocate", "drop_cache",
    "close", "unlink", "rename", "mkdir", "list", "sync_dir",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One recorded operation: what, on which path, with which detail."""

    op: OpKind
    path: str
    detail: str = ""


@dataclass(slots=True)
class Fault:
    """Fail operations `op` on paths containing `path_contains`.

    Skips the first `after` matching operations, then fails the next `times`
    (None: all) with `error`. A "write" fault with `short=True` writes the first
    half of the data before it raises, as a write that ran out of space midway.
    With a `gate` the operation first waits for the event (error 0: then it
    succeeds), so a test can hold an fsync in flight.
    """

    op: OpKind
    error: int = errno.EIO
    path_contains: str = ""
    after: int = 0
    times: int | None = 1
    short: bool = False
    gate: asyncio.Event | None = None
    hits: int = 0

    def matches(self, op: OpKind, path: str) -> bool:
        if op != self.op or self.path_contains not in path:
            return False
        self.hits += 1
        if self.hits <= self.after:
            return False
        return self.times is None or self.hits <= self.after + self.times


@dataclass(frozen=True, slots=True)
class _Write:
    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class _Resize:
    size: int
    grow_only: bool  # fallocate never shrinks


_Change = _Write | _Resize


def _apply(image: bytearray, change: _Change) -> None:
    if isinstance(change, _Write):
        end = change.offset + len(change.data)
        if end > len(image):
            image.extend(bytes(end - len(image)))
        image[change.offset : end] = change.data
    elif change.size < len(image):
        if not change.grow_only:
            del image[change.size :]
    else:
        image.extend(bytes(change.size - len(image)))


@dataclass(eq=False, slots=True)
class _File:
    cache: bytearray = field(default_factory=bytearray)
    disk: bytearray = field(default_factory=bytearray)
    dirty: list[_Change] = field(default_factory=list)

    def change(self, change: _Change) -> None:
        _apply(self.cache, change)
        self.dirty.append(change)

    def sync(self) -> None:
        """Write the dirty changes (only those: pages a failed fsync marked clean
        stay unwritten, as on Linux)."""
        for change in self.dirty:
            _apply(self.disk, change)
        self.dirty.clear()

    def after_power_cut(self, rng: random.Random, loss: float = 0.65) -> bytearray:
        """A disk image a power cut could leave: each unsynced change is lost,
        torn or zeroed with probability `loss` (in the ratio 4:1.5:1), else kept."""
        image = bytearray(self.disk)
        for change in self.dirty:
            roll = rng.random() / loss  # < 1: disturbed
            if roll < 0.6:
                continue  # never arrived
            if isinstance(change, _Write) and roll < 0.85 and len(change.data) > 1:
                kept = rng.randrange(1, len(change.data))
                change = _Write(change.offset, change.data[:kept])  # torn
            elif isinstance(change, _Write) and roll < 1:
                # The size grew, the data did not arrive: zeros where the file was
                # extended (an overwrite in place keeps the old bytes).
                change = _Resize(change.offset + len(change.data), grow_only=True)
            _apply(image, change)
        return image


@dataclass(frozen=True, slots=True)
class _Link:
    name: str
    node: _File | _Dir | None  # None: unlink


@dataclass(frozen=True, slots=True)
class _Rename:
    source: str
    target: str


@dataclass(eq=False, slots=True)
class _Dir:
    entries: dict[str, _File | _Dir] = field(default_factory=dict)
    disk: dict[str, _File | _Dir] = field(default_factory=dict)
    dirty: list[_Link | _Rename] = field(default_factory=list)

    def link(self, name: str, node: _File | _Dir | None) -> None:
        change = _Link(name, node)
        _apply_entry(self.entries, change)
        self.dirty.append(change)

    def sync(self) -> None:
        self.disk = dict(self.entries)
        self.dirty.clear()


def _apply_entry(entries: dict[str, _File | _Dir], change: _Link | _Rename) -> None:
    if isinstance(change, _Rename):
        node = entries.pop(change.source, None)
        if node is not None:
            entries[change.target] = node
    elif change.node is None:
        entries.pop(change.name, None)
    else:
        entries[change.name] = change.node


class KeepOrLose(random.Random):
    """A chooser for `SimulatedDisk.power_cut` that decides by a bit pattern:
    the k-th unsynced change it is asked about arrives whole if bit k is set,
    and is lost otherwise (never torn)."""

    def __init__(self, bits: int) -> None:
        super().__init__(bits)
        self.bits = bits
        self.asked = 0

    def __repr__(self) -> str:
        return f"KeepOrLose(0b{self.bits:b})"

    def random(self) -> float:
        keep = self.bits >> self.asked & 1
        self.asked += 1
        return 0.999999 if keep else 0.0


class SimulatedDisk:
    """A `StorageBackend` in memory that can lose power (see module docs)."""

    def __init__(self, *, yield_every_op: bool = False) -> None:
        self.root = _Dir()
        self.journal: list[JournalEntry] = []
        self.faults: list[Fault] = []
        self.misuse: list[str] = []
        self.closed_unsynced: list[str] = []
        """Files closed while holding changes no fsync covered (the log does so
        on purpose only when closing or removing; a file pool never may)."""
        # Which operations yield to the event loop before they take effect (fsyncs
        # always do, as a real device would; all of them for more interleavings).
        self.yield_every_op = yield_every_op
        self._generation = 0
        self._countdown: int | None = None
        self.frozen = False

    # -- controlling the simulation ------------------------------------------

    def inject(self, fault: Fault) -> Fault:
        """Add a fault rule (see `Fault`); returns it so tests can read `hits`."""
        self.faults.append(fault)
        return fault

    def cut_power_after(self, operations: int) -> None:
        """Freeze the disk once `operations` more operations have taken effect."""
        self._countdown = operations
        self.frozen = operations <= 0

    def kill(self) -> None:
        """The process dies (SIGKILL): open handles are gone, the cache stays."""
        self._generation += 1
        self._countdown = None
        self.frozen = False

    def power_cut(self, rng: random.Random, loss: float = 0.65) -> None:
        """Replace the state by one a power cut now could leave (see module docs).

        `loss` is the chance that an unsynced change is lost (or torn): lower it
        to reach states where almost everything arrived but one thing."""

        def cut_dir(directory: _Dir, seen: set[int]) -> None:
            entries = dict(directory.disk)
            for change in directory.dirty:
                if rng.random() >= loss * 0.75:
                    _apply_entry(entries, change)
            directory.entries = entries
            directory.sync()
            for node in entries.values():
                if id(node) in seen:
                    continue
                seen.add(id(node))
                if isinstance(node, _Dir):
                    cut_dir(node, seen)
                else:
                    node.disk = node.after_power_cut(rng, loss)
                    node.cache = bytearray(node.disk)
                    node.dirty.clear()

        cut_dir(self.root, set())
        self.kill()

    def crash(self, rng: random.Random | None = None) -> None:
        """The simpler crash model of the first memory backend, kept for tests
        written against it: directory changes all survive; each file keeps its
        synced bytes (`rng` None) or a random prefix of what reads showed, over
        its synced bytes. New tests use `power_cut`, which spares nothing."""

        def walk(directory: _Dir) -> None:
            directory.sync()
            for node in directory.entries.values():
                if isinstance(node, _Dir):
                    walk(node)
                    continue
                if rng is not None:
                    keep = rng.randint(0, len(node.cache))
                    node.disk = node.cache[:keep] + node.disk[keep:]
                node.cache = bytearray(node.disk)
                node.dirty.clear()

        walk(self.root)
        self.kill()

    def pending_changes(self) -> int:
        """How many unsynced changes (file writes and resizes, directory entries)
        a power cut would decide about now."""
        count = 0
        seen: set[int] = set()
        stack: list[_File | _Dir] = [self.root]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            count += len(node.dirty)
            if isinstance(node, _Dir):
                stack += [*node.entries.values(), *node.disk.values()]
        return count

    def every_power_cut(self, exhaustive_max: int = 6, samples: int = 16) -> list[random.Random]:
        """Choosers for `power_cut` that cover the states a power cut now could
        leave: every keep/lose combination of the pending changes when there
        are at most `exhaustive_max` of them (CrashMonkey), else `samples`
        random combinations; plus a few random choosers that also tear and zero."""
        pending = self.pending_changes()
        if pending <= exhaustive_max:
            patterns = list(range(1 << pending))
        else:
            rng = random.Random(pending)
            patterns = [0, (1 << pending) - 1, *(rng.getrandbits(pending) for _ in range(samples))]
        return [*map(KeepOrLose, patterns), *(random.Random(seed) for seed in range(4))]

    def clone(self) -> SimulatedDisk:
        """A copy of the files and directories (journal, faults and handles not)."""
        twin = SimulatedDisk(yield_every_op=self.yield_every_op)
        twin.root = copy.deepcopy(self.root)
        twin._generation = self._generation + 1
        return twin

    def sync_everything(self) -> None:
        """Make the whole current state durable (a clean shutdown of the machine)."""

        def walk(directory: _Dir) -> None:
            directory.sync()
            for node in directory.entries.values():
                if isinstance(node, _Dir):
                    walk(node)
                else:
                    node.sync()

        walk(self.root)

    def size(self, path: str) -> int:
        """A file's size as reads see it now (its page cache)."""
        directory, name = self._parent(path)
        node = directory.entries[name]
        assert isinstance(node, _File)
        return len(node.cache)

    def count(self, op: OpKind, path_contains: str = "") -> int:
        """How many `op` operations the journal holds (on matching paths)."""
        return sum(1 for e in self.journal if e.op == op and path_contains in e.path)

    # -- the machinery each operation goes through ------------------------------

    async def _step(
        self, op: OpKind, path: str, detail: str = "", generation: int | None = None
    ) -> Fault | None:
        """Yield, block forever if the power is off, record, and find a fault.

        An operation on a handle of a dead process (`generation`) fails, also if
        the process died while it was waiting to run.
        """
        if self.yield_every_op or op == "sync":
            await asyncio.sleep(0)
        if generation is not None and generation != self._generation:
            raise ValueError(f"I/O operation on closed file {path} (its process is gone)")
        if self._countdown is not None:
            if self._countdown <= 0:
                self.frozen = True
            else:
                self._countdown -= 1
        if self.frozen:
            await asyncio.get_running_loop().create_future()  # never completes
        self.journal.append(JournalEntry(op, path, detail))
        for fault in self.faults:
            if fault.matches(op, path):
                if fault.gate is not None:
                    await fault.gate.wait()
                return fault if fault.error else None
        return None

    def _lookup_dir(self, path: str) -> _Dir:
        node: _File | _Dir = self.root
        for part in _parts(path):
            if not isinstance(node, _Dir) or part not in node.entries:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            node = node.entries[part]
        if not isinstance(node, _Dir):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        return node

    def _parent(self, path: str) -> tuple[_Dir, str]:
        head, name = os.path.split(os.path.normpath(path))
        return self._lookup_dir(head), name

    # -- StorageBackend ------------------------------------------------------------

    async def open(self, path: str, *, create: bool) -> Storage:
        path = os.fspath(path)
        fault = await self._step("create" if create else "open", path, "", self._generation)
        _raise(fault, path)
        directory, name = self._parent(path)
        node = directory.entries.get(name)
        if node is None:
            if not create:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            node = _File()
            directory.link(name, node)
        if isinstance(node, _Dir):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        return SimulatedFile(self, node, path, self._generation)

    async def remove(self, path: str) -> None:
        path = os.fspath(path)
        fault = await self._step("unlink", path, "", self._generation)
        _raise(fault, path)
        directory, name = self._parent(path)
        node = directory.entries.get(name)
        if isinstance(node, _Dir) and node.entries:
            raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), path)
        if node is not None:
            directory.link(name, None)

    async def rename(self, source: str, target: str) -> None:
        fault = await self._step("rename", source, target, self._generation)
        _raise(fault, source)
        directory, name = self._parent(source)
        target_dir, target_name = self._parent(target)
        if target_dir is not directory:
            raise OSError(errno.EXDEV, "the simulated disk renames within one directory only")
        if name not in directory.entries:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), source)
        change = _Rename(name, target_name)
        _apply_entry(directory.entries, change)
        directory.dirty.append(change)

    async def list_dir(self, path: str) -> list[str]:
        await self._step("list", path, "", self._generation)
        return list(self._lookup_dir(path).entries)

    async def make_dir(self, path: str) -> list[str]:
        fault = await self._step("mkdir", path, "", self._generation)
        _raise(fault, path)
        created: list[str] = []
        node = self.root
        at = "/" if os.path.isabs(path) else ""
        for part in _parts(path):
            at = os.path.join(at, part)
            child = node.entries.get(part)
            if child is None:
                child = _Dir()
                node.link(part, child)
                created.append(at)
            if not isinstance(child, _Dir):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), at)
            node = child
        return created

    async def sync_dir(self, path: str) -> None:
        fault = await self._step("sync_dir", path, "", self._generation)
        _raise(fault, path)
        self._lookup_dir(path).sync()

    async def write_durably(self, writes: Sequence[DurableWrite]) -> None:
        # Each file's write and sync are their own steps, so a power cut can
        # fall between them as it can on a disk.
        await write_each_durably(writes)


class SimulatedFile:
    """An open handle on a simulated file; dies with its power cycle."""

    def __init__(self, disk: SimulatedDisk, node: _File, path: str, generation: int) -> None:
        self._disk = disk
        self._node: _File | None = node
        self._path = path
        self._generation = generation

    def _alive(self) -> int:
        """This handle's power cycle, after checking it is open."""
        self._file()
        return self._generation

    def _file(self) -> _File:
        if self._node is None or self._generation != self._disk._generation:
            if self._generation == self._disk._generation:
                self._disk.misuse.append(f"I/O on {self._path} after it was closed")
            raise ValueError(f"I/O operation on closed file {self._path}")
        return self._node

    @property
    def size(self) -> int:
        return len(self._file().cache)

    async def read_at(self, length: int, offset: int) -> bytes:
        fault = await self._disk._step("read", self._path, generation=self._alive())
        _raise(fault, self._path)
        return bytes(self._file().cache[offset : offset + length])

    def read_at_nowait(self, length: int, offset: int) -> Buffer | None:
        """Always "would block": every simulated read goes through `read_at`
        and the faults planned for it."""
        self._alive()
        return None

    async def writev(self, buffers: Sequence[Buffer], offset: int, *, sync: bool) -> None:
        data = b"".join(buffers)
        fault = await self._disk._step("write", self._path, f"{offset}+{len(data)}", self._alive())
        file = self._file()
        if fault is not None:
            if fault.short and len(data) > 1:
                file.change(_Write(offset, data[: len(data) // 2]))
            _raise(fault, self._path)
        file.change(_Write(offset, data))
        if sync:
            await self.sync()

    async def sync(self) -> None:
        fault = await self._disk._step("sync", self._path, generation=self._alive())
        file = self._file()
        if fault is not None:
            # fsyncgate: nothing landed, and none of it is dirty any more, so no
            # later fsync will write it; the cache still shows it.
            file.dirty.clear()
            _raise(fault, self._path)
        file.sync()

    async def truncate(self, size: int) -> None:
        fault = await self._disk._step("truncate", self._path, str(size), self._alive())
        _raise(fault, self._path)
        self._file().change(_Resize(size, grow_only=False))

    async def allocate(self, size: int) -> None:
        fault = await self._disk._step("allocate", self._path, str(size), self._alive())
        _raise(fault, self._path)
        if size > self.size:
            self._file().change(_Resize(size, grow_only=True))

    async def drop_cache(self) -> None:
        fault = await self._disk._step("drop_cache", self._path, generation=self._alive())
        _raise(fault, self._path)
        file = self._file()
        cache = bytearray(file.disk)
        for change in file.dirty:  # dirty pages stay; clean ones are read again
            _apply(cache, change)
        file.cache = cache

    async def close(self) -> None:
        if self._node is not None:
            if self._node.dirty and self._generation == self._disk._generation:
                self._disk.closed_unsynced.append(self._path)
            self._node = None
            self._disk.journal.append(JournalEntry("close", self._path))


def _parts(path: str) -> list[str]:
    return [p for p in os.path.normpath(os.fspath(path)).split(os.sep) if p and p != "."]


def _raise(fault: Fault | None, path: str) -> None:
    if fault is not None:
        raise OSError(fault.error, os.strerror(fault.error), path)

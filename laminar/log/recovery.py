"""Opening a log directory after any crash: read and judge everything, then act.

Rules, in the order they are applied:

1. Decide before touching. Every segment is read and judged first; damage that
   recovery must not repair raises `LogCorrupted` (or `UnsupportedFormat`)
   before a single byte is changed, so a person can look at exactly what the
   crash or the disk left. The only things done before deciding are fsyncs and
   dropping clean cached pages, which change no contents.
2. A segment followed by another is sealed: it was made durable whole before
   the next one was created (see `SegmentedLog._roll_over`). Its record count is
   the next segment's base minus its own; nothing in it is ever trimmed. A
   damaged entry in it is kept and reported (reads raise `RecordCorrupted`); a
   missing record (a short index) is a gap: `LogCorrupted`.
3. The last segment takes appends; its files are first synced (a killed
   process's page cache is not yet disk) and its clean cached pages dropped
   (after a failed fsync Linux keeps showing data the disk lost), then every
   payload is verified and the torn tail cut by the rules in `index`.
4. Files a crash can leave are recognised, never guessed at: a store without
   its index is debris of a removal (the index goes first, see
   `Segment.remove_index`) and is deleted; a last segment with nothing in it
   and its header or store missing is an interrupted creation and is created
   again. A lost header or a missing store with records anywhere is damage
   (creation syncs both before anything is appended).
5. What was changed is durable before the log is used: the trimmed index is
   synced, and the directory (a killed process may have left entries in it
   that no fsync covered yet).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .errors import LogCorrupted
from .index import (
    ENTRY_BYTES,
    HEADER_BYTES,
    ScanResult,
    decode_header,
    scan_sealed,
    scan_segment,
)
from .segment import INDEX_SUFFIX, STORE_SUFFIX, Segment, segment_paths
from .storage import Storage, StorageBackend

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Found:
    """One segment's files as found, and what recovery decided about them."""

    base: int
    store: Storage | None
    index: Storage | None
    index_bytes: bytes = b""
    interrupted: bool = False
    scan: ScanResult | None = None

    def close_handles(self) -> list[Storage]:
        return [f for f in (self.store, self.index) if f is not None]


async def recover_segments(backend: StorageBackend, directory: str) -> list[Segment]:
    """Open every segment in `directory`; see the module docs for the rules."""
    names = await backend.list_dir(directory)
    found = await _open_all(backend, directory, names)
    try:
        debris = [f for f in found if f.index is None]
        chain = [f for f in found if f.index is not None]
        await _judge(directory, chain)
    except BaseException:
        for f in found:
            for handle in f.close_handles():
                await handle.close()
        raise
    return await _apply(backend, directory, debris, chain)


async def _open_all(backend: StorageBackend, directory: str, names: list[str]) -> list[_Found]:
    kinds: dict[int, set[str]] = {}
    for name in names:
        for suffix in (STORE_SUFFIX, INDEX_SUFFIX):
            stem = name[: -len(suffix)]
            if name.endswith(suffix) and stem.isdigit():
                kinds.setdefault(int(stem), set()).add(suffix)
    found: list[_Found] = []
    try:
        for base in sorted(kinds):
            store_path, index_path = segment_paths(directory, base)
            store = index = None
            if STORE_SUFFIX in kinds[base]:
                store = await backend.open(store_path, create=False)
            if INDEX_SUFFIX in kinds[base]:
                index = await backend.open(index_path, create=False)
            found.append(_Found(base, store, index))
    except BaseException:
        for f in found:
            for handle in f.close_handles():
                await handle.close()
        raise
    return found


async def _judge(directory: str, chain: list[_Found]) -> None:
    """Read every segment of the chain and decide; raise on damage (rule 1)."""
    for position, f in enumerate(chain):
        assert f.index is not None
        last = position == len(chain) - 1
        index_path = segment_paths(directory, f.base)[1]
        if last:
            await _settle(f)
        f.index_bytes = await f.index.read_at(f.index.size, 0)
        header = decode_header(f.index_bytes, index_path)
        has_entries = any(f.index_bytes[HEADER_BYTES:])
        if header is None or f.store is None:
            store_empty = f.store is None or not any(await f.store.read_at(f.store.size, 0))
            if has_entries or not store_empty or not last:
                what = "header is lost or damaged" if header is None else "store file is missing"
                raise LogCorrupted(
                    f"{index_path}: the {what} but records follow (or later segments do); "
                    "refusing to guess. Move the segment away to recover the rest."
                )
            f.interrupted = True  # an interrupted creation (rule 4)
            f.scan = ScanResult(0, 0)
            continue
        if header != f.base:
            raise LogCorrupted(
                f"{index_path}: header names base index {header}, file name says {f.base}"
            )
        slots = max(0, (len(f.index_bytes) - HEADER_BYTES) // ENTRY_BYTES)
        store_size = 0 if f.store is None else f.store.size
        if not last:
            expected = chain[position + 1].base - f.base
            extra = f.index_bytes[HEADER_BYTES + expected * ENTRY_BYTES :]
            if slots < expected or any(extra):
                raise LogCorrupted(
                    f"{index_path}: holds {slots} record(s) but the next segment starts at "
                    f"{chain[position + 1].base}, {expected} after this one; records are "
                    "missing or overlap"
                )
            f.scan = scan_sealed(f.index_bytes, expected, store_size)
        else:
            store_bytes = b"" if f.store is None else await f.store.read_at(store_size, 0)
            f.scan = scan_segment(f.index_bytes, store_size, store_bytes)
        if f.scan.corrupt_slots:
            log.warning(
                "%s: %d damaged record(s) (first at index %d); they are kept and read as corrupt",
                index_path,
                len(f.scan.corrupt_slots),
                f.base + f.scan.corrupt_slots[0],
            )


async def _settle(f: _Found) -> None:
    """Sync the write segment, then drop its clean cached pages (rule 3)."""
    for handle in f.close_handles():
        await handle.sync()
        await handle.drop_cache()


async def _apply(
    backend: StorageBackend, directory: str, debris: list[_Found], chain: list[_Found]
) -> list[Segment]:
    """Carry out what `_judge` decided (rules 4 and 5) and build the segments."""
    for f in debris:
        store_path = segment_paths(directory, f.base)[0]
        log.warning(
            "%s: removing a store without index, left by an interrupted removal", store_path
        )
        for handle in f.close_handles():
            await handle.close()
        await backend.remove(store_path)
    segments: list[Segment] = []
    for position, f in enumerate(chain):
        assert f.index is not None and f.scan is not None
        last = position == len(chain) - 1
        index_path = segment_paths(directory, f.base)[1]
        if f.interrupted:
            log.warning("%s: restoring a segment whose creation a crash interrupted", index_path)
            for handle in f.close_handles():
                await handle.close()
            segments.append(await Segment.create(backend, directory, f.base))
            continue
        store = f.store
        assert store is not None  # judged: a missing store is an interrupted creation
        scan = f.scan
        index_len = HEADER_BYTES + scan.entries * ENTRY_BYTES
        buf = bytearray(f.index_bytes[:index_len])
        segment = Segment(directory, f.base, store, f.index, buf, scan.entries, scan.store_bytes)
        segment.corrupt_slots = list(scan.corrupt_slots)
        segment.sealed = not last
        segments.append(segment)
        if not last:
            continue  # sealed: never trimmed (rule 2)
        torn = f.index.size > index_len and any(f.index_bytes[index_len:])
        if torn or any(await store.read_at(store.size - scan.store_bytes, scan.store_bytes)):
            log.warning(
                "%s: trimmed a torn tail (%d index entr(ies), %d store byte(s))",
                index_path,
                scan.trimmed_entries,
                store.size - scan.store_bytes,
            )
        await segment.trim_files()
        if torn:
            await f.index.sync()  # the cut entries must never come back
    if debris or chain:
        await backend.sync_dir(directory)
    return segments

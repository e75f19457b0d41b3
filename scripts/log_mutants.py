"""Mutation check of the log's durability: every fsync must be load-bearing.

    .venv/bin/python scripts/log_mutants.py [NAME ...]

For each mutation (an fdatasync or directory fsync removed, the order of
`truncate_to` swapped, the fix of one of issue 12's defects undone) this
copies `laminar/` to a temporary directory, applies the change there, and runs
the power-cut, failure and damage tests against the copy. A mutation the tests
do not catch ("SURVIVED") is a hole in the tests or a useless fsync; the
script exits 1 if any survives. Takes a few minutes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The editable install's import hook would find the real package first: drop it,
# put the mutant's copy first on the path, then run pytest.
BOOTSTRAP = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, sys.argv[1])
import laminar
assert laminar.__file__.startswith(sys.argv[1]), laminar.__file__
import pytest
raise SystemExit(pytest.main(sys.argv[2:]))
"""
TESTS = [
    "tests/log/test_powercut.py",
    "tests/log/test_log_model.py",
    "tests/log/test_damage.py",
    "tests/log/test_failures.py",
    "tests/iouring/test_ring_refusals.py",
    "tests/shards/test_partition_failures.py",
]

Edit = tuple[str, str]  # (text, replacement)
# (name, file under laminar/, edits)
MUTATIONS: list[tuple[str, str, list[Edit]]] = [
    # -- every fdatasync and directory fsync ----------------------------------------
    (
        "commit: store write not synced",
        "log/commit.py",
        [
            (
                "            await durably.write_durably((store, index))",
                "            await store.file.writev(store.buffers, store.offset, sync=False)\n"
                "            await durably.write_durably((index,))",
            )
        ],
    ),
    (
        "commit: index write not synced",
        "log/commit.py",
        [
            (
                "            await durably.write_durably((store, index))",
                "            await index.file.writev(index.buffers, index.offset, sync=False)\n"
                "            await durably.write_durably((store,))",
            )
        ],
    ),
    (
        "create: header not synced",
        "log/segment.py",
        [
            (
                "await index.writev([header], 0, sync=True)",
                "await index.writev([header], 0, sync=False)",
            )
        ],
    ),
    (
        "create: directory not synced",
        "log/segment.py",
        [("        await backend.sync_dir(directory)\n        return cls(", "        return cls(")],
    ),
    (
        "truncate_to: no sync after the end mark",
        "log/segment.py",
        [
            (
                "            await self.write_marks(slot - 1, FLUSH_END | DURABLE)\n"
                "            await self.index.sync()\n",
                "            await self.write_marks(slot - 1, FLUSH_END | DURABLE)\n",
            )
        ],
    ),
    (
        "truncate_to: no sync after the index cut",
        "log/segment.py",
        [
            (
                "        await self.index.truncate(HEADER_BYTES + slot * ENTRY_BYTES)\n"
                "        await self.index.sync()\n",
                "        await self.index.truncate(HEADER_BYTES + slot * ENTRY_BYTES)\n",
            )
        ],
    ),
    (
        "seal (relaxed): store not synced",
        "log/segment.py",
        [("        if sync:\n            await self.store.sync()\n", "        if sync:\n")],
    ),
    (
        "seal (relaxed): index not synced",
        "log/segment.py",
        [
            (
                "            await self.store.sync()\n            await self.index.sync()\n\n",
                "            await self.store.sync()\n\n",
            )
        ],
    ),
    (
        "interval/close sync: store not synced",
        "log/segment.py",
        [
            (
                "        await self.store.sync()\n        await self.index.sync()\n"
                "        if self.entries:",
                "        await self.index.sync()\n        if self.entries:",
            )
        ],
    ),
    (
        "interval/close sync: index not synced",
        "log/segment.py",
        [
            (
                "        await self.store.sync()\n        await self.index.sync()\n"
                "        if self.entries:",
                "        await self.store.sync()\n        if self.entries:",
            )
        ],
    ),
    (
        "close (relaxed): DURABLE mark not synced",
        "log/segmented_log.py",
        [
            (
                "await write_segment.sync_and_mark_durable()\n"
                "                        await write_segment.index.sync()\n",
                "await write_segment.sync_and_mark_durable()\n",
            )
        ],
    ),
    (
        "remove: index removal not made durable before the store's",
        "log/segment.py",
        [
            (
                "            await backend.sync_dir(self.directory)\n        finally:\n",
                "            pass\n        finally:\n",
            )
        ],
    ),
    (
        "recovery: write segment not synced before it is judged",
        "log/recovery.py",
        [
            (
                "        await handle.sync()\n        await handle.drop_cache()\n",
                "        await handle.drop_cache()\n",
            )
        ],
    ),
    (
        "recovery: torn tail cut not synced",
        "log/recovery.py",
        [
            (
                "            await f.index.sync()  # the cut entries must never come back\n",
                "            pass\n",
            )
        ],
    ),
    (
        "recovery: directory not synced",
        "log/recovery.py",
        [
            (
                "        await backend.sync_dir(directory)\n    return segments",
                "        pass\n    return segments",
            )
        ],
    ),
    (
        "open: a new log directory's entry not synced",
        "log/storage.py",
        [('        await backend.sync_dir(os.path.dirname(created) or ".")\n', "        pass\n")],
    ),
    # -- order ---------------------------------------------------------------------
    (
        "truncate_to: cut before the end mark (swapped order)",
        "log/segment.py",
        [
            (
                "        await self._mark_new_end(slot)\n        await self._cut_index(slot)\n",
                "        await self._cut_index(slot)\n        await self._mark_new_end(slot)\n",
            )
        ],
    ),
    (
        "truncate_to: store cut before the index cut (swapped order)",
        "log/segment.py",
        [
            (
                "        await self._cut_index(slot)\n        await self._cut_store(store_end)\n",
                "        await self._cut_store(store_end)\n        await self._cut_index(slot)\n",
            )
        ],
    ),
    # -- the other defects of issue 12 ---------------------------------------------
    (
        "recovery: sealed segments judged and trimmed like the write segment",
        "log/recovery.py",
        [
            (
                "        if not last:\n            expected = ",
                "        if False:\n            expected = ",
            ),
            (
                "        if not last:\n            continue  # sealed",
                "        if False:\n            continue  # sealed",
            ),
        ],
    ),
    (
        "recovery: a lost header is re-created even with records after it",
        "log/recovery.py",
        [
            (
                "            if has_entries or not store_empty or not last:",
                "            if not last:",
            )
        ],
    ),
    (
        "recovery: trusts the page cache (no drop after a failed fsync)",
        "log/recovery.py",
        [
            (
                "        await handle.sync()\n        await handle.drop_cache()\n",
                "        await handle.sync()\n",
            )
        ],
    ),
    (
        "scan: unsynced flushes count as proof (interval/never debris kept as holes)",
        "log/index.py",
        [("complete, complete and bool(entry.flags & SYNCED)", "complete, complete")],
    ),
    (
        "scan: DURABLE marks ignored",
        "log/index.py",
        [("if e is not None and e.marks & DURABLE", "if False")],
    ),
    (
        "reads: damaged index entries served by read_range/read_batch",
        "log/segment.py",
        [("        if damaged is not None and damaged < end:", "        if False:")],
    ),
    (
        "commit: a failed store write abandons the running index write",
        "log/storage.py",
        [
            (
                "        *(w.file.writev(w.buffers, w.offset, sync=True) for w in writes),\n"
                "        return_exceptions=True,\n",
                "        *(w.file.writev(w.buffers, w.offset, sync=True) for w in writes),\n",
            ),
        ],
    ),
    (
        "interval: a failed sync is swallowed",
        "log/commit.py",
        [
            (
                "            self.fail(exc)\n            return\n        self._synced",
                "            return\n        self._synced",
            )
        ],
    ),
    (
        "interval: the sync holds the structure lock",
        "log/segmented_log.py",
        [
            (
                "            if not self._lock.locked():\n"
                "                self._pipeline.start_sync()\n",
                "            async with self._lock:\n                self._pipeline.start_sync()\n"
                "                await self._pipeline.drain()\n",
            )
        ],
    ),
    (
        "close after a failure keeps the unreleased tail",
        "log/segmented_log.py",
        [
            (
                "                    write_segment.drop_unreleased()\n"
                "                    await write_segment.trim_files()\n",
                "                    pass\n",
            )
        ],
    ),
    (
        "ring: a full SQ the kernel refuses to take gets an entry overwritten",
        "iouring/ring.py",
        [
            (
                "            self._make_room(1)\n            tail = self._tail",
                "            self.submit()\n            tail = self._tail",
            )
        ],
    ),
    (
        "files: a write -> fdatasync chain split by the kernel is not synced again",
        "reactor/files.py",
        [("            if broken or split:", "            if broken:")],
    ),
    (
        "files: a failed fdatasync of a rewritten chain is retried",
        "reactor/files.py",
        [
            (
                "isinstance(sync_result, OSError) and sync_result.errno != errno.ECANCELED",
                "not (broken or split) and isinstance(sync_result, OSError)",
            )
        ],
    ),
    (
        "ring: the loop is used on a kernel without EXT_ARG or UNLINKAT",
        "iouring/ring.py",
        [("    return missing\n", "    return []\n")],
    ),
    (
        "shard: a failed partition log is handed out again instead of reopened",
        "shards/partitions.py",
        [
            (
                "        if log is not None and log.failure is None:\n"
                "            return log\n        if self._closed:",
                "        if log is not None:\n            return log\n        if self._closed:",
            )
        ],
    ),
    (
        "shard: a partition that keeps failing is never taken offline",
        "shards/partitions.py",
        [("        if failures > MAX_REOPENS:", "        if False:")],
    ),
    (
        "removal: the segment leaves the lists before its index is gone",
        "log/segmented_log.py",
        [
            (
                "        segment = self._segments[position]\n"
                "        await segment.remove_index(self._backend)  # failure: nothing changed\n"
                "        del self._segments[position]\n",
                "        segment = self._segments.pop(position)\n"
                "        await segment.remove_index(self._backend)\n",
            )
        ],
    ),
]


def run(base: Path, name: str, file: str, edits: list[Edit]) -> str | None:
    """The first test that fails with the mutation applied, or None."""
    with tempfile.TemporaryDirectory(prefix="laminar-mutant-") as tmp:
        shutil.copytree(base, tmp, dirs_exist_ok=True)
        path = Path(tmp) / "laminar" / file
        text = path.read_text()
        for old, new in edits:
            if text.count(old) != 1:
                raise SystemExit(f"{name}: the text to mutate occurs {text.count(old)} times")
            text = text.replace(old, new)
        path.write_text(text)
        env = dict(os.environ, LAMINAR_MODEL_EXAMPLES="150", LAMINAR_MODEL_NO_SHRINK="1")
        args = ["-x", "-q", "-p", "no:cacheprovider", *TESTS]
        result = subprocess.run(
            [sys.executable, "-c", BOOTSTRAP, tmp, *args],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if os.environ.get("LAMINAR_MUTANTS_VERBOSE"):
            print(result.stdout[-3000:], result.stderr[-3000:])
        if "Timeout (>" in result.stdout:
            return "TIMEOUT (a test hung: make it fail instead)"
        if result.returncode == 0:
            return None
        failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
        return failed[0].split(" ")[1] if failed else f"pytest exit {result.returncode}"


def snapshot(into: Path) -> Path:
    """The code and tests as they are now, so the tree can change during the run."""
    for part in ("laminar", "tests"):
        shutil.copytree(REPO / part, into / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", into / "pyproject.toml")
    return into


def main() -> int:
    wanted = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="laminar-mutants-") as tmp:
        base = snapshot(Path(tmp))
        failed = run(base, "control (no mutation)", "log/index.py", [])
        if failed:
            raise SystemExit(f"the tests fail without any mutation ({failed}): fix them first")
        survived = 0
        for name, file, edits in MUTATIONS:
            if wanted and not any(w in name for w in wanted):
                continue
            start = time.monotonic()
            caught_by = run(base, name, file, edits)
            survived += caught_by is None
            verdict = "SURVIVED" if caught_by is None else "caught"
            took = time.monotonic() - start
            print(f"{verdict:9} {took:5.1f}s  {name}  [{caught_by or '-'}]", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The seam's whole-file helpers on every backend: `atomic_replace`,
`read_whole`, `remove_tree` (their power-cut behaviour is judged on the
simulated disk in tests/raft/test_segmented_storage.py and
tests/shards/test_partition_deletion.py)."""

from __future__ import annotations

import os

from laminar.log.storage import (
    TEMPORARY_SUFFIX,
    atomic_replace,
    make_dir_durable,
    read_whole,
    remove_tree,
)

from .conftest import LogEnv


def test_a_replace_is_read_back_whole_and_leaves_no_temporary(env: LogEnv) -> None:
    async def main() -> None:
        backend, directory = env.backend, env.directory
        await make_dir_durable(backend, directory)
        path = os.path.join(directory, "state")
        assert await read_whole(backend, path) is None
        await atomic_replace(backend, path, b"a longer first version")
        # A crash left a longer temporary file: the next replace cuts it back.
        leftover = await backend.open(path + TEMPORARY_SUFFIX, create=True)
        await leftover.writev([b"x" * 100], 0, sync=True)
        await leftover.close()
        await atomic_replace(backend, path, b"short")
        assert await read_whole(backend, path) == b"short"
        await atomic_replace(backend, path, b"")
        assert await read_whole(backend, path) == b""
        assert await backend.list_dir(directory) == ["state"]

    env.run(main)


def test_remove_tree_removes_files_and_directories_and_tolerates_none(env: LogEnv) -> None:
    async def main() -> None:
        backend, directory = env.backend, env.directory
        doomed = os.path.join(directory, "doomed")
        await make_dir_durable(backend, os.path.join(doomed, "inner"))
        for name in ("a", "b", "inner/c"):
            await (await backend.open(os.path.join(doomed, name), create=True)).close()
        await remove_tree(backend, doomed)
        assert await backend.list_dir(directory) == []
        await remove_tree(backend, doomed)  # gone already: nothing to do

    env.run(main)

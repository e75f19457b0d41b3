"""A running node never serves stored bytes that fail their checksum.

Fetches of records in the page cache are answered straight from the read loop
(`laminar.shards.fastpath`, `SegmentedLog.read_batch_nowait`); the rest by the
general path. Either way every record is checked against the checksum taken
when it was appended. Here a stored record is changed under the running node
(as a failing disk or a stray writer would), and fetches around it must stop
before it, refuse it, and serve what follows it, unchanged.
"""

from __future__ import annotations

import os

import pytest

from laminar.log.index import ENTRY, HEADER_BYTES
from laminar.wire import ErrorCode
from tests.system.nodes import RunningNode
from tests.system.wireclient import NodeClient, ServerError

VALUES = [b"record %03d " % i + bytes([i]) * 200 for i in range(50)]
VICTIM = 20


def _damage(partition_dir: str, index: int) -> None:
    """Flip one byte inside the stored value of record `index` (one segment)."""
    (index_file,) = [n for n in os.listdir(partition_dir) if n.endswith(".index")]
    stem = index_file.removesuffix(".index")
    with open(os.path.join(partition_dir, index_file), "rb") as f:
        f.seek(HEADER_BYTES + index * ENTRY.size)
        position = ENTRY.unpack(f.read(ENTRY.size))[0]
    fd = os.open(os.path.join(partition_dir, stem + ".store"), os.O_RDWR)
    try:
        (byte,) = os.pread(fd, 1, position + 5)
        os.pwrite(fd, bytes([byte ^ 0xFF]), position + 5)
    finally:
        os.close(fd)


def test_fetches_stop_before_a_record_damaged_under_the_node(node: RunningNode) -> None:
    with NodeClient(node.host, node.port) as client:
        client.create_topic("damaged", 1)
        for value in VALUES:
            client.produce("damaged", 0, [value])
        pid = client.pid("damaged", 0)
        topic_id = pid >> 32
        _damage(str(node.data_dir / "partitions" / f"{topic_id}-0"), VICTIM)

        before = client.fetch("damaged", 0, 0, max_bytes=1 << 20)
        assert [r.index for r in before.records] == list(range(VICTIM))
        assert [r.decode()[0] for r in before.records] == VALUES[:VICTIM]
        with pytest.raises(ServerError) as refused:
            client.fetch("damaged", 0, VICTIM, max_bytes=1 << 20)
        assert refused.value.code == ErrorCode.STORAGE_ERROR
        after = client.fetch("damaged", 0, VICTIM + 1, max_bytes=1 << 20)
        assert [r.decode()[0] for r in after.records] == VALUES[VICTIM + 1 :]

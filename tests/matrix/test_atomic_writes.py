"""Atomic writes (`Client.begin_write`) on every topology, a leader killed
between staging and commit: all of a write or none of it, each record once."""

from __future__ import annotations

from laminar.client import Client, LaminarError
from laminar.client.writes import new_write_id
from tests.matrix.reading import check_once, read_partition, topic_name
from tests.matrix.topologies import Topology
from tests.support import wait_until


def _write(client: Client, topic: str, tag: str, kill: Topology | None = None) -> bool:
    """Stage 20 records on each of partitions 0 and 1 and commit; with `kill`,
    kill partition 0's leader between the staging and the commit. Whether it
    committed: with `kill` the write may be refused as a whole (then aborted),
    and a commit whose answer was lost is asked about until it is settled."""
    write_id = new_write_id()
    try:
        with client.begin_write(write_id=write_id) as write:
            for p in (0, 1):
                write.send(topic, p, [f"{tag}-{p}-{i}".encode() for i in range(20)])
            if kill is not None:
                kill.kill_leader(topic, 0)
            write.commit()
        return True
    except LaminarError:
        if kill is None:
            raise
    state = wait_until(
        lambda: (s := client.write_status(write_id)) in ("done", "aborted") and s,
        f"write {write_id:#x} settled",
    )
    return bool(state == "done")


def test_an_atomic_write_is_all_or_nothing_across_a_leader_kill(healed: Topology) -> None:
    topic = topic_name("atomic")
    with Client(healed.bootstrap) as client:
        client.create_topic(topic, 2, replication_factor=healed.replication_factor)
        healed.leader(topic, 0)
        committed = {"before": _write(client, topic, "before")}
        committed["across"] = _write(client, topic, "across", kill=healed)
        committed["after"] = _write(client, topic, "after")
        for p in (0, 1):
            read = read_partition(client, topic, p)
            wanted = [
                f"{tag}-{p}-{i}".encode() for tag, ok in committed.items() if ok for i in range(20)
            ]
            check_once(read, dict.fromkeys(wanted, None))
            assert [v for _, v in read] == wanted, f"partition {p} holds a partial write"

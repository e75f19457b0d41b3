"""Atomic writes against a real `laminar-node`: staged data is invisible, a
commit publishes each record once, aborts and expiry publish nothing, and a
node SIGKILLed while staging or publishing keeps every committed record once.

Delivery is checked by identity (`tests.delivery`): every record value is
unique, and the topic must hold each expected value exactly once.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from laminar.client import (
    Client,
    LaminarError,
    RetryPolicy,
    StagedDataMissingError,
    StagingFullError,
    WriteAbortedError,
    new_write_id,
)
from laminar.wire import ErrorCode
from laminar.wire.writes import PublishStagedRequest, StagedPart, WriteState
from tests.delivery import assert_exactly_once
from tests.spark.helpers import metric
from tests.support import wait_until
from tests.system.nodes import RunningNode, start_node
from tests.system.wireclient import ServerError, WireConnection

STAGING_BYTES_MAX = 512 << 10


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    with start_node(
        tmp_path_factory.mktemp("atomic"), cores=2, staging_bytes_max=STAGING_BYTES_MAX
    ) as running:
        yield running


@pytest.fixture
def client(node: RunningNode) -> Iterator[Client]:
    with Client(node.bootstrap) as c:
        yield c


_topics = iter(range(10**6))


def _topic(client: Client, partitions: int) -> str:
    name = f"atomic-{next(_topics)}"
    client.create_topic(name, partitions=partitions)
    return name


def _values(client: Client, topic: str, partitions: int) -> list[bytes]:
    out = []
    for p in range(partitions):
        lowest, highest = client.offsets(topic, p)
        index = lowest
        while index < highest:
            got = client.fetch(topic, p, index)
            out += [r.value for r in got]
            index = got[-1].index + 1
    return out


def _batch(tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def test_a_commit_publishes_every_staged_record_once_and_nothing_before(
    node: RunningNode, client: Client
) -> None:
    events, audit = _topic(client, 4), _topic(client, 2)
    expected = []
    staged_before = metric(node, "laminar_staged_batches_total")
    with client.begin_write() as write:
        for p in range(4):
            for b in range(3):
                values = _batch(f"e{p}.{b}", 20)
                write.send(events, p, values)
                expected += values
        write.send(audit, 1, _batch("audit", 5))
        wait_until(  # every batch is at the node...
            lambda: metric(node, "laminar_staged_batches_total") >= staged_before + 13,
            "the 13 batches staged",
        )
        # ...and none is visible before the commit.
        assert _values(client, events, 4) == [] and _values(client, audit, 2) == []
        result = write.commit()
    assert result.first and result.records == len(expected) + 5
    assert_exactly_once(_values(client, events, 4), expected)
    assert_exactly_once(_values(client, audit, 2), _batch("audit", 5))
    # A commit sent again (a lost answer) is answered with the first outcome.
    again = client.commit_write(write.write_id, [])
    assert not again.first and again.published == result.published
    assert client.write_status(write.write_id) == WriteState.DONE
    assert_exactly_once(_values(client, events, 4), expected)


def test_an_abort_is_final_and_publishes_nothing(node: RunningNode, client: Client) -> None:
    topic = _topic(client, 2)
    write = client.begin_write()
    write.send(topic, 0, _batch("a", 10))
    write.send(topic, 1, _batch("b", 10))
    parts = write._stager.finish()
    write.abort()
    assert client.write_status(write.write_id) == WriteState.ABORTED
    with pytest.raises(WriteAbortedError):
        client.commit_write(write.write_id, parts)
    assert _values(client, topic, 2) == []
    wait_until(lambda: metric(node, "laminar_staged_attempts") == 0, "staged data to be dropped")


def test_a_commit_must_name_what_was_staged_in_full(client: Client) -> None:
    topic = _topic(client, 2)
    write_id = new_write_id()
    stager = client.stager(write_id, task=3)
    stager.send(topic, 0, _batch("x", 4))
    stager.send(topic, 0, _batch("y", 4))
    stager.send(topic, 1, _batch("z", 4))
    parts = stager.finish()
    short = [parts[0]._replace(batches=1, records=4), parts[1]]
    with pytest.raises(StagedDataMissingError, match="2 batches of 8 records staged"):
        client.commit_write(write_id, short)
    never = [parts[0], parts[1]._replace(attempt=parts[1].attempt + 1)]
    with pytest.raises(StagedDataMissingError, match="never staged on this node") as refused:
        client.commit_write(write_id, never)
    assert f"partition 1 of topic {topic!r}" in str(refused.value)
    assert "--staging-timeout" not in str(refused.value), "advice only when it expired"
    assert _values(client, topic, 2) == [], "nothing of a refused commit is visible"
    client.commit_write(write_id, parts)
    assert_exactly_once(_values(client, topic, 2), _batch("x", 4) + _batch("y", 4) + _batch("z", 4))


def test_a_resent_batch_is_staged_once_and_a_gap_is_refused(client: Client) -> None:
    topic = _topic(client, 1)
    write_id = new_write_id()
    first = client.stager(write_id, task=0, attempt=42)
    first.send(topic, 0, _batch("one", 3))
    # The same attempt sending batch 0 again (its answer was lost): a duplicate.
    again = client.stager(write_id, task=0, attempt=42)
    again.send(topic, 0, _batch("one", 3))
    parts = first.finish()
    assert parts == again.finish()
    from laminar.client import StageOutOfOrderError
    from laminar.client.sync import Pending
    from laminar.client.writes import stage

    blobs = (b"\x00gap",)
    with pytest.raises(StageOutOfOrderError, match="must continue at batch 1"):
        Pending(client, stage(write_id, 0, 42, 5, topic, 0, blobs, 0)).result()
    client.commit_write(write_id, parts)
    assert_exactly_once(_values(client, topic, 1), _batch("one", 3))


def test_staged_bytes_are_bounded_with_a_clear_error(node: RunningNode, client: Client) -> None:
    topic = _topic(client, 1)
    write = client.begin_write()
    with pytest.raises(StagingFullError, match="--staging-bytes-max"):
        for i in range(STAGING_BYTES_MAX // 10_000 + 10):
            write.send(topic, 0, [b"%06d" % i + b"x" * 10_000])
            write._stager.finish()
    write.abort()
    wait_until(lambda: metric(node, "laminar_staged_bytes") == 0, "staged data to be dropped")
    with client.begin_write() as ok:  # room again
        ok.send(topic, 0, [b"after"])
        ok.commit()
    assert _values(client, topic, 1) == [b"after"]


def test_idle_staged_data_expires_and_a_late_commit_publishes_nothing(
    node: RunningNode, client: Client
) -> None:
    topic = _topic(client, 2)
    expired_before = metric(node, "laminar_staged_expired_total")
    write_id = new_write_id()
    stager = client.stager(write_id, task=0, timeout_s=0.3)
    stager.send(topic, 0, _batch("late", 5))
    stager.send(topic, 1, _batch("late", 5))
    parts = stager.finish()
    wait_until(
        lambda: metric(node, "laminar_staged_expired_total") >= expired_before + 2,
        "the staged data to expire",
    )
    with pytest.raises(StagedDataMissingError, match=r"expired: .*--staging-timeout"):
        client.commit_write(write_id, parts)
    assert _values(client, topic, 2) == []


def test_two_attempts_of_one_task_racing_publish_only_the_one_committed(
    node: RunningNode, client: Client
) -> None:
    """Speculation at the protocol level: two attempts of a task stage the same
    rows in different orders at once; the driver commits one."""
    topic = _topic(client, 3)
    write_id = new_write_id()
    rows = [f"row-{i}".encode() for i in range(600)]
    parts: dict[str, tuple[StagedPart, ...]] = {}

    def attempt(name: str, order: list[bytes]) -> None:
        with Client(node.bootstrap) as own:
            stager = own.stager(write_id, task=9)
            for start in range(0, len(order), 50):
                chunk = order[start : start + 50]
                stager.send_nowait(topic, (start // 50) % 3, chunk)
            parts[name] = stager.finish()

    threads = [
        threading.Thread(target=attempt, args=("a", rows)),
        threading.Thread(target=attempt, args=("b", rows[::-1])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.commit_write(write_id, parts["b"])
    assert_exactly_once(_values(client, topic, 3), rows)
    wait_until(lambda: metric(node, "laminar_staged_attempts") == 0, "the loser to be dropped")
    assert_exactly_once(_values(client, topic, 3), rows)


def test_internal_ops_are_refused_from_clients(node: RunningNode, client: Client) -> None:
    topic = _topic(client, 1)
    pid = client.cluster.route(topic, 0).partition_id
    conn = WireConnection(node.host, node.port)
    try:
        with pytest.raises(ServerError) as refused:
            conn.call(PublishStagedRequest(pid, 1, ()))
        assert refused.value.code == ErrorCode.INVALID_REQUEST
        assert "internal" in refused.value.response.message
    finally:
        conn.close()


# --- crashes ------------------------------------------------------------------------------


def _restart(node: RunningNode) -> RunningNode:
    """SIGKILL the whole node, then start it again on its data (a machine crash)."""
    node.kill()
    return node.restart()


@pytest.fixture
def crash_node(tmp_path: Path) -> Iterator[list[RunningNode]]:
    """A node of the test's own (it is killed); the list holds its current incarnation."""
    holder = [start_node(tmp_path, cores=2, publish_chunk_bytes="16KiB")]
    yield holder
    if holder[0].alive():
        holder[0].terminate()


def test_a_node_killed_while_staging_keeps_every_committed_row_once(
    crash_node: list[RunningNode],
) -> None:
    node = crash_node[0]
    with Client(node.bootstrap) as c:
        topic = _topic(c, 4)
        write_id = new_write_id()
        # Task 0 finished staging before the crash: its rows must survive it.
        done = c.stager(write_id, task=0)
        finished_rows = []
        for p in range(4):
            values = _batch(f"t0-p{p}", 30)
            done.send(topic, p, values)
            finished_rows += values
        finished = done.finish()
    # Task 1's first attempt is staging when the node dies.
    dying: list[bytes] = []
    stop = threading.Event()

    def stage_until_killed() -> None:
        try:
            with Client(node.bootstrap, retry=RetryPolicy(budget_s=0)) as own:
                stager = own.stager(write_id, task=1)
                i = 0
                while not stop.is_set():
                    values = _batch(f"t1a0-{i}", 10)
                    stager.send(topic, i % 4, values)
                    dying.extend(values)
                    i += 1
        except LaminarError:
            pass

    thread = threading.Thread(target=stage_until_killed)
    thread.start()
    wait_until(lambda: len(dying) >= 100, "the dying attempt to stage")
    node = crash_node[0] = _restart(node)
    stop.set()
    thread.join()
    with Client(node.bootstrap) as c:
        assert _values(c, topic, 4) == [], "nothing staged is visible after the restart"
        # Task 1 runs again (a new attempt) and the driver commits the winners.
        retry = c.stager(write_id, task=1)
        retried_rows = []
        for p in range(4):
            values = _batch(f"t1a1-p{p}", 25)
            retry.send(topic, p, values)
            retried_rows += values
        c.commit_write(write_id, [*finished, *retry.finish()])
        assert_exactly_once(_values(c, topic, 4), finished_rows + retried_rows)
        wait_until(
            lambda: metric(node, "laminar_staged_attempts") == 0, "the dead attempt to be dropped"
        )
        assert_exactly_once(_values(c, topic, 4), finished_rows + retried_rows)


def test_a_node_killed_while_publishing_rolls_the_commit_forward_once(
    crash_node: list[RunningNode],
) -> None:
    """Kill the node once the commit is decided and its publishes are under way
    (small publish chunks make many appends); after the restart the coordinator
    finishes it: every row once. Several rounds, until a kill lands in that
    window at least once."""
    for round_no in range(6):
        if _kill_during_a_commit(crash_node, round_no):
            return
    raise AssertionError("no kill landed between the decision and the end of the publish")


def _kill_during_a_commit(crash_node: list[RunningNode], round_no: int) -> bool:
    """One round: stage, commit in a thread, SIGKILL the node as soon as the
    commit is decided; then check. True if the restarted node rolled it forward."""
    node = crash_node[0]
    with Client(node.bootstrap) as c:
        topic = _topic(c, 8)
        write = c.begin_write()
        rows = []
        for p in range(8):
            for b in range(8):
                values = [f"r{round_no}-p{p}-b{b}-{i}-".encode() + b"x" * 300 for i in range(40)]
                write.send(topic, p, values)
                rows += values
        parts = write._stager.finish()

    def commit() -> None:
        with (
            contextlib.suppress(LaminarError),
            Client(node.bootstrap, retry=RetryPolicy(budget_s=0)) as own,
        ):
            own.commit_write(write.write_id, parts)

    thread = threading.Thread(target=commit)
    with Client(node.bootstrap, retry=RetryPolicy(budget_s=0)) as watcher:
        thread.start()
        state = WriteState.UNKNOWN
        while state == WriteState.UNKNOWN and thread.is_alive():
            state = watcher.write_status(write.write_id)
    node = crash_node[0] = _restart(node)
    thread.join()
    with Client(node.bootstrap) as c:
        if state == WriteState.COMMITTED:
            wait_until(lambda: c.write_status(write.write_id) == "done", "the roll-forward")
        elif c.write_status(write.write_id) == WriteState.UNKNOWN:  # killed before deciding
            assert _values(c, topic, 8) == []
            c.commit_write(write.write_id, parts)
        assert_exactly_once(_values(c, topic, 8), rows)
        return metric(node, "laminar_writes_rolled_forward_total") > 0

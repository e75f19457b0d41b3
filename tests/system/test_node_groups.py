"""Consumer groups on one node: a group's coordinator is found, and the
positions topic it lives in is the node's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from laminar.groups.frames import FindCoordinatorRequest, FindCoordinatorResponse
from laminar.groups.positions import POSITIONS_TOPIC, coordinator_partition
from laminar.wire import (
    AlterTopicRequest,
    CreateTopicRequest,
    DeleteTopicRequest,
    ErrorCode,
    FetchRequest,
    ProduceRequest,
)
from tests.system.nodes import start_node
from tests.system.wireclient import NodeClient, ServerError


def test_a_group_s_coordinator_is_a_partition_of_the_node_s_own_positions_topic(
    tmp_path: Path,
) -> None:
    with start_node(tmp_path, cores=2, flush="never", group_partitions=5) as node:
        client = NodeClient(node.host, node.port)
        found: FindCoordinatorResponse = client.node.call(FindCoordinatorRequest("billing"))
        topic = found.topic
        assert (topic.name, topic.partitions) == (POSITIONS_TOPIC, 5)
        assert topic.config["flush.messages"] == 1  # durable before acknowledged
        assert found.partition == coordinator_partition("billing", 5)
        for group in ("billing", "audit", "é-ü"):  # made once, the same for every group
            again: FindCoordinatorResponse = client.node.call(FindCoordinatorRequest(group))
            assert again.topic.topic_id == topic.topic_id
            assert again.partition == coordinator_partition(group, 5)
        with pytest.raises(ServerError) as bad:
            client.node.call(FindCoordinatorRequest("tab\there"))
        assert bad.value.code is ErrorCode.INVALID_REQUEST
        assert "control characters" in str(bad.value)

        pid = found.partition_id
        refused = [
            CreateTopicRequest("__mine", 1),
            DeleteTopicRequest(POSITIONS_TOPIC),
            AlterTopicRequest(POSITIONS_TOPIC, {"retention.ms": 1}),
        ]
        for request in refused:
            with pytest.raises(ServerError) as caught:
                client.node.call(request)
            assert caught.value.code is ErrorCode.INVALID_REQUEST
            assert "are the node's own" in str(caught.value)
        client.refresh()
        read = client.conn_for(pid).call(FetchRequest(pid, 0))  # reading is allowed (and
        assert read.records == ()  # opens the log: a produce would take the fast path)
        for forged in (
            ProduceRequest.from_values(pid, [b"forged"]),
            ProduceRequest.from_values(pid, [b"forged"], producer_id=7, sequence=0),
        ):
            with pytest.raises(ServerError) as write:
                client.conn_for(pid).call(forged)
            assert write.value.code is ErrorCode.INVALID_REQUEST
        assert client.conn_for(pid).call(FetchRequest(pid, 0)).records == ()
        assert [t.name for t in client.list_topics()] == [POSITIONS_TOPIC]

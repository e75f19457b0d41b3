"""Users are cluster metadata (issue 28, step 2): a user created through one
node of a static cluster, and of a `--join` cluster, logs in on every node,
and still does once the metadata leader that wrote it is gone (the entry is
in the replicated metadata log, not on one node)."""

from __future__ import annotations

from pathlib import Path

import pytest

from laminar.client import Client, RetryPolicy
from tests.cluster.nodes import Cluster
from tests.cluster.test_gossip_cluster import gossip_cluster, metadata_group
from tests.support import wait_until
from tests.system.nodes import RunningNode

pytestmark = pytest.mark.timeout(300)

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret-1"
RETRY = RetryPolicy(budget_s=30)


def admin_file(tmp: Path) -> Path:
    path = tmp / "admin.cred"
    path.write_text(f"{ADMIN}:{ADMIN_PASSWORD}")
    path.chmod(0o600)
    return path


def login(bootstrap: str, user: str, password: str) -> Client:
    return Client(bootstrap, username=user, password=password, retry=RETRY)


def admin_of(bootstrap: str) -> Client:
    """The admin, once the bootstrap user is written (a moment after start)."""
    client: Client = wait_until(
        lambda: login(bootstrap, ADMIN, ADMIN_PASSWORD), "the bootstrap user logs in"
    )
    return client


def logs_in_everywhere(nodes: dict[str, RunningNode], user: str, password: str) -> None:
    """`user` logs in through each node alone (its node port and every shard)."""
    for node in nodes.values():
        with login(node.bootstrap, user, password) as client:
            client.refresh_metadata_view()
            for shard in range(len(node.shard_ports)):
                client.ping(shard=shard)


def test_a_user_made_on_one_node_logs_in_on_all_even_after_the_leader_dies(
    tmp_path: Path,
) -> None:
    with Cluster.start(
        tmp_path, 3, auth="scram", bootstrap_user_file=admin_file(tmp_path)
    ) as cluster:
        with admin_of(cluster.nodes["n1"].bootstrap) as admin:
            admin.create_user("alice", "alice-secret-1")
        logs_in_everywhere(cluster.nodes, "alice", "alice-secret-1")

        leader = wait_until(
            lambda: metadata_group(cluster.nodes["n1"])["leader"], "a metadata leader"
        )
        through = next(n for n in cluster.nodes if n != leader)
        with admin_of(cluster.nodes[through].bootstrap) as admin:
            admin.create_user("bob", "bob-secret-1")
        cluster.nodes[leader].kill()
        survivors = cluster.live()
        assert leader not in survivors
        logs_in_everywhere(survivors, "bob", "bob-secret-1")


def test_a_user_made_in_a_joined_cluster_logs_in_on_every_node(tmp_path: Path) -> None:
    with gossip_cluster(tmp_path, 3, auth="scram", bootstrap_user_file=admin_file(tmp_path)) as (
        nodes,
        _start,
    ):
        wait_until(
            lambda: len(metadata_group(nodes["n1"])["voters"]) == 3,
            "every node votes in the metadata group",
        )
        with admin_of(nodes["n1"].bootstrap) as admin:
            admin.create_user("carol", "carol-secret-1")
        logs_in_everywhere(nodes, "carol", "carol-secret-1")

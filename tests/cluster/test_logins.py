"""Users are cluster metadata (issue 28, step 2): a user created through one
node of a static cluster, and of a `--join` cluster, logs in on every node,
and still does once the metadata leader that wrote it is gone (the entry is
in the replicated metadata log, not on one node). The static cluster runs
twice: peers authenticated by the cluster secret, and by certificates
(mutual TLS between nodes, TLS to clients, where a client certificate logs
in on every node too)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from laminar.certs import make_cluster_certs
from laminar.client import Client, RetryPolicy
from tests.cluster.nodes import Cluster
from tests.cluster.test_gossip_cluster import gossip_cluster
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


def login(node: RunningNode, **options: Any) -> Client:
    """A client of `node` alone, logged in with `options` (a user and its
    password, or a certificate); through TLS if the node has it."""
    ca_file = node.flags.get("tls_ca_file")
    if ca_file:
        options = {"tls": True, "ca_file": str(ca_file), **options}
    return Client(node.bootstrap, retry=RETRY, **options)


def admin_of(node: RunningNode) -> Client:
    """The admin, once the bootstrap user is written (a moment after start)."""
    client: Client = wait_until(
        lambda: login(node, username=ADMIN, password=ADMIN_PASSWORD),
        "the bootstrap user logs in",
    )
    return client


def metadata_group(node: RunningNode) -> dict[str, Any]:
    """The metadata group as `node` applied it (its admin endpoint, TLS or not)."""
    status, body = node.admin_get("/status")
    assert status == 200, body
    group: dict[str, Any] = next(
        s["stats"]["metadata_group"]
        for s in json.loads(body)["shards"]
        if s["stats"]["metadata_group"]
    )
    return group


def logs_in_everywhere(nodes: dict[str, RunningNode], **options: Any) -> None:
    """A client logs in through each node alone (its node port and every shard),
    once the node's shards have applied the user (each a moment after the
    metadata leader committed it)."""

    def everywhere_on(node: RunningNode) -> bool:
        with login(node, **options) as client:
            client.refresh_metadata_view()
            for shard in range(len(node.shard_ports)):
                client.ping(shard=shard)
        return True

    for name, node in nodes.items():
        wait_until(lambda n=node: everywhere_on(n), f"logins on every shard of {name}")


@pytest.mark.parametrize("peers", ["secret", "certificates"])
def test_a_user_made_on_one_node_logs_in_on_all_even_after_the_leader_dies(
    tmp_path: Path, peers: str
) -> None:
    certs = None
    if peers == "certificates":
        certs = tmp_path / "certs"
        make_cluster_certs(certs, users=("carol",))
    with Cluster.start(
        tmp_path, 3, certs=certs, auth="scram", bootstrap_user_file=admin_file(tmp_path)
    ) as cluster:
        with admin_of(cluster.nodes["n1"]) as admin:
            admin.create_user("alice", "alice-secret-1")
        logs_in_everywhere(cluster.nodes, username="alice", password="alice-secret-1")
        if certs is not None:
            logs_in_everywhere(
                cluster.nodes, cert_file=str(certs / "carol.crt"), key_file=str(certs / "carol.key")
            )

        leader = wait_until(
            lambda: metadata_group(cluster.nodes["n1"])["leader"], "a metadata leader"
        )
        through = next(n for n in cluster.nodes if n != leader)
        with admin_of(cluster.nodes[through]) as admin:
            admin.create_user("bob", "bob-secret-1")
        cluster.nodes[leader].kill()
        survivors = cluster.live()
        assert leader not in survivors
        logs_in_everywhere(survivors, username="bob", password="bob-secret-1")


def test_a_user_made_in_a_joined_cluster_logs_in_on_every_node(tmp_path: Path) -> None:
    cluster = gossip_cluster(
        tmp_path,
        3,
        routing="auto",  # UDP is off with logins: nothing to steer in userspace
        auth="scram",
        bootstrap_user_file=admin_file(tmp_path),
    )
    with cluster as (nodes, _start):
        wait_until(
            lambda: len(metadata_group(nodes["n1"])["voters"]) == 3,
            "every node votes in the metadata group",
        )
        with admin_of(nodes["n1"]) as admin:
            admin.create_user("carol", "carol-secret-1")
        logs_in_everywhere(nodes, username="carol", password="carol-secret-1")

"""A group member belongs to the principal that joined it, on a cluster too
(issue 28): another principal cannot take over a static member's instance,
before or after the coordinator's node dies, since the owner is in the
replicated positions log that the next coordinator replays. On a static
cluster and on one joined by gossip (signed by node certificates)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laminar.certs import make_cluster_certs
from laminar.client import Client, calls
from laminar.client.consumer import Consumer
from laminar.client.errors import LaminarError, NotAuthorizedError
from laminar.groups.positions import POSITIONS_TOPIC
from laminar.security.acls import Acl, Operation, PatternType, Permission, ResourceType
from tests.cluster.nodes import Cluster, gossip_node
from tests.cluster.test_logins import admin_file, admin_of, login, logs_in_everywhere
from tests.support import wait_until
from tests.system.nodes import RunningNode

pytestmark = pytest.mark.timeout(300)

TOPIC, GROUP, INSTANCE = "events", "billing", "worker-1"
USERS = {"alice": "alice-secret-1", "bob": "bob-secret-1"}


def _may_consume(user: str) -> list[Acl]:
    return [
        Acl(f"User:{user}", kind, PatternType.LITERAL, name, Operation.READ, Permission.ALLOW)
        for kind, name in ((ResourceType.TOPIC, TOPIC), (ResourceType.GROUP, GROUP))
    ]


def _coordinator(admin: Client, nodes: list[str]) -> str:
    """The node leading GROUP's positions partition, once every node agrees."""
    partition = admin._start(calls.find_coordinator(GROUP)).result().partition

    def agreed() -> str | None:
        named = {admin.replica_offsets(POSITIONS_TOPIC, partition, n).leader for n in nodes}
        return named.pop() if len(named) == 1 else None

    leader: str = wait_until(agreed, "one coordinator named by every node")
    return leader


def _commits(member: Consumer) -> bool:
    """Alice's member polls and commits (through whichever node coordinates
    now); False on an error that a retry may cure, a refusal fails the test."""
    try:
        member.poll(timeout_s=0.2)
        member.commit({(TOPIC, 0): 0})
    except LaminarError as exc:
        if exc.code is None or exc.retriable:
            return False
        pytest.fail(f"alice's own member was refused: {exc}")  # not caught by wait_until
    return True


def _bob_is_refused(node: RunningNode) -> None:
    """Bob, through `node`, joins as the static member INSTANCE: his poll
    raises the coordinator's refusal (it does not idle without a word)."""
    with (
        login(node, username="bob", password=USERS["bob"]) as bob,
        bob.consumer(GROUP, [TOPIC], instance_id=INSTANCE, session_timeout_s=60) as member,
        pytest.raises(NotAuthorizedError),
    ):
        member.poll(timeout_s=5)


class JoinedCluster:
    """Three nodes that found each other with --join, on certificates (their
    membership signed by them, no secret) and logins."""

    def __init__(self, nodes: dict[str, RunningNode]) -> None:
        self.nodes = nodes

    def live(self) -> dict[str, RunningNode]:
        return {name: node for name, node in self.nodes.items() if node.alive()}


@contextlib.contextmanager
def _joined(tmp: Path) -> Iterator[JoinedCluster]:
    certs = tmp / "certs"
    make_cluster_certs(certs, days=2)
    with contextlib.ExitStack() as stack:
        nodes: dict[str, RunningNode] = {}
        for name in ("n1", "n2", "n3"):
            nodes[name] = stack.enter_context(
                gossip_node(
                    tmp,
                    name,
                    certs,
                    nodes.get("n1"),
                    auth="scram",
                    bootstrap_user_file=admin_file(tmp),
                )
            )
        yield JoinedCluster(nodes)


def _cluster(tmp: Path, topology: str) -> contextlib.AbstractContextManager[Any]:
    if topology == "join":
        return _joined(tmp)
    return Cluster.start(tmp, 3, auth="scram", bootstrap_user_file=admin_file(tmp))


@pytest.mark.parametrize("topology", ["static", "join"])
def test_another_principal_cannot_take_a_static_member_even_after_the_coordinator_dies(
    tmp_path: Path, topology: str
) -> None:
    with _cluster(tmp_path, topology) as cluster:
        with admin_of(cluster.nodes["n1"]) as admin:
            for user, password in USERS.items():
                admin.create_user(user, password)
                admin.add_acls(_may_consume(user))
            admin.create_topic(TOPIC, 2, replication_factor=3)
        for user, password in USERS.items():
            logs_in_everywhere(cluster.nodes, username=user, password=password)

        alice = login(cluster.nodes["n1"], username="alice", password=USERS["alice"])
        with alice:
            with alice.consumer(GROUP, [TOPIC], instance_id=INSTANCE) as member:
                wait_until(lambda: _commits(member), "alice's member is in and commits")
                _bob_is_refused(cluster.nodes["n2"])
            # Alice's static member is away (its leave was temporary); the
            # coordinator dies; the next one knows whose instance it is.
            with admin_of(cluster.nodes["n1"]) as admin:
                coordinator = _coordinator(admin, list(cluster.nodes))
            cluster.nodes[coordinator].kill()
            survivor = cluster.nodes[next(iter(cluster.live()))]
            _bob_is_refused(survivor)
            with alice.consumer(GROUP, [TOPIC], instance_id=INSTANCE) as member:
                wait_until(lambda: _commits(member), "alice's member is back and commits")

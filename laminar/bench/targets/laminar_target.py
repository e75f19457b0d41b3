"""laminar: a topic with N partitions, `laminar.client.AsyncClient`.

A produce is one produce request with the whole batch, acknowledged by the
owning shard after its group-commit flush (with `--flush always`: after
fdatasync). A reader is an `AsyncClient.reader` (one fetch at a time unless
the run asks for prefetch); `fetch` returns a long-poll `fetch_batch`'s values
as views into the answer (no object per record).
The node is either started by the harness (`laminar`, `laminar:interval`) or
an existing one given with `--bootstrap` (its flush policy is then whatever it
was started with, and the results say that the harness does not know it).

`laminar-r<N>` (N > 1) is a cluster: N nodes on loopback that name each other
as peers, one shard each, and a topic with `replication_factor` N. The client
gets every node as its bootstrap list and sends each produce to the
partition's leader as the metadata names it (following `NOT_LEADER` hints),
as any application would; the harness does not pick the leader. A produce is
acknowledged once committed on a majority, each of those replicas having
fsynced it first. `laminar-r1` is the single node of `laminar`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

from laminar.bench.servers.laminar_cluster import LaminarCluster
from laminar.bench.servers.laminar_node import LaminarNode
from laminar.bench.targets.base import (
    Durability,
    Endpoint,
    Start,
    System,
    SystemUnavailable,
)
from laminar.certs import make_ca, make_cert
from laminar.client import (
    AsyncClient,
    AuthenticationFailedError,
    Client,
    LaminarError,
    PartitionReader,
    TopicExistsError,
)
from laminar.security.acls import (
    CLUSTER_NAME,
    Acl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

KIND = "laminar"
VARIANTS = ("always", "interval", "plain", "linger5", "tls", "tls-scram")
SECURED = ("tls", "tls-scram")
BENCH_USER, BENCH_PASSWORD = "bench", "bench-password-1"
"""The `tls-scram` variant's client: an ordinary user whose ACLs allow it
everything the workloads do (not a superuser: every request takes the ACL path)."""
ADMIN_USER, ADMIN_PASSWORD = "admin", "admin-password-1"
LOGIN_WAIT_S = 30.0
"""`--flush always`, `--flush interval`, and `--flush always` with plain
(not idempotent) produce: `AsyncClient(idempotent=False)`, or with a 5 ms
linger: `AsyncClient(linger_s=0.005)`."""
LINGER5_S = 0.005
_FETCH_MAX_BYTES = 8 << 20
CLUSTER_CORES_PER_NODE = 1
"""A cluster node's shards: one partition lives on one shard of each node, and
three nodes of one shard each already put three shard processes on this
machine's two cores."""
LEADER_WAIT_S = 30.0
"""How long a new replicated topic may take to elect its partitions' leaders."""


class LaminarReader:
    """An `AsyncClient.reader`: one fetch at a time, or `prefetch` ahead. Its
    limits come with the first `fetch` (they stay the same through a run; a
    change starts a new reader where the old one stood)."""

    def __init__(
        self, client: AsyncClient, topic: str, partition: int, index: int, prefetch: int
    ) -> None:
        self._client = client
        self._topic = topic
        self._partition = partition
        self._index = index
        self._prefetch = prefetch
        self._reader: PartitionReader | None = None
        self._limits = (0, 0)

    async def fetch(self, max_records: int, max_wait_ms: int) -> list[memoryview]:
        reader = self._reader
        if reader is None or self._limits != (max_records, max_wait_ms):
            if reader is not None:
                self._index = reader.position
                await reader.close()
            reader = self._reader = self._client.reader(
                self._topic,
                self._partition,
                self._index,
                max_bytes=_FETCH_MAX_BYTES,
                max_records=max_records,
                max_wait_ms=max_wait_ms,
                prefetch=self._prefetch,
            )
            self._limits = (max_records, max_wait_ms)
        batch = await reader.next_batch()
        return batch.values()  # views into the answer's buffer, no object per record

    async def close(self) -> None:
        if self._reader is not None:
            await self._reader.close()


class LaminarTarget:
    """The `AsyncClient` side."""

    def __init__(self, endpoint: Endpoint) -> None:
        idempotent = endpoint.options.get("idempotent", "1") == "1"
        ca_file = endpoint.options.get("tls_ca_file")
        self._client = AsyncClient(
            endpoint.address,
            idempotent=idempotent,
            linger_s=float(endpoint.options.get("linger_s", "0")),
            tls=ca_file is not None,
            ca_file=ca_file,
            username=endpoint.options.get("username"),
            password=endpoint.options.get("password"),
        )
        self._replicas = int(endpoint.options.get("replication_factor", "1"))

    async def connect(self) -> None:
        await self._client.connect()

    async def create_stream(self, stream: str, partitions: int) -> None:
        with contextlib.suppress(TopicExistsError):
            await self._client.create_topic(
                stream,
                partitions,
                replication_factor=self._replicas if self._replicas > 1 else None,
            )
        if self._replicas > 1:
            await self._wait_for_leaders(stream)

    async def _wait_for_leaders(self, stream: str) -> None:
        """Return once every partition of `stream` has a leader (a new Raft
        group holds an election first; producing before that fails)."""
        deadline = asyncio.get_running_loop().time() + LEADER_WAIT_S
        last: object = None
        while asyncio.get_running_loop().time() < deadline:
            try:
                described = await self._client.describe_topic(stream)
            except LaminarError as exc:  # replicas still being opened
                last = exc
            else:
                last = [p.leader for p in described.partitions]
                if all(p.leader is not None for p in described.partitions):
                    return
            await asyncio.sleep(0.1)
        raise TimeoutError(
            f"{stream}: no leader for every partition after {LEADER_WAIT_S:g} s ({last})"
        )

    async def produce(self, stream: str, partition: int, values: Sequence[bytes]) -> None:
        await self._client.produce(stream, partition, values)

    async def open_reader(
        self, stream: str, partition: int, start: Start, prefetch: int = 0
    ) -> LaminarReader:
        lowest, highest = await self._client.offsets(stream, partition)
        index = lowest if start == "beginning" else highest
        return LaminarReader(self._client, stream, partition, index, prefetch)

    async def close(self) -> None:
        await self._client.close()


class LaminarSystem(System):
    """A node the harness starts (flush policy per variant), or `--bootstrap`."""

    def __init__(
        self,
        variant: str = "always",
        *,
        bootstrap: str | None = None,
        cores: int | None = None,
        runtime: str = "auto",
        replicas: int | None = None,
    ) -> None:
        if variant not in VARIANTS:
            raise SystemUnavailable(f"laminar has variants {', '.join(VARIANTS)}, not {variant!r}")
        self.variant = variant
        self.flush = "always" if variant in ("plain", "linger5", *SECURED) else variant
        self.replicas = replicas or 1
        if self.replicas > 1 and variant in SECURED:
            raise SystemUnavailable("the harness runs a laminar node with TLS alone")
        if self.replicas > 1 and self.flush != "always":
            raise SystemUnavailable(
                "a replicated laminar partition requires --flush always (an acknowledgement "
                "of a Raft entry promises durability on a majority)"
            )
        base = KIND if replicas is None else f"{KIND}-r{replicas}"
        self.name = base if variant == "always" else f"{base}:{variant}"
        self.bootstrap = bootstrap
        default_cores = CLUSTER_CORES_PER_NODE if self.replicas > 1 else os.cpu_count() or 1
        self.cores = cores or default_cores
        self.runtime = runtime
        self._node: LaminarNode | None = None
        self._cluster: LaminarCluster | None = None

    def start(self, workdir: Path) -> Endpoint:
        options = {
            "replication_factor": str(self.replicas),
            "idempotent": "0" if self.variant == "plain" else "1",
        }
        if self.variant == "linger5":
            options["linger_s"] = str(LINGER5_S)
        if self.bootstrap is not None:
            return Endpoint(KIND, self.bootstrap, options)
        extra_args: tuple[str, ...] = ()
        if self.variant in SECURED:
            ca = make_ca(workdir, "bench-ca")
            cert = make_cert(workdir, ca, "bench-node")
            extra_args = ("--tls-cert-file", cert.cert, "--tls-key-file", cert.key)
            options["tls_ca_file"] = ca.cert
        if self.variant == "tls-scram":
            admin = workdir / "admin.cred"
            admin.write_text(f"{ADMIN_USER}:{ADMIN_PASSWORD}\n")
            admin.chmod(0o600)
            extra_args += ("--auth", "scram", "--bootstrap-user-file", str(admin))
            options.update(username=BENCH_USER, password=BENCH_PASSWORD)
        if self.replicas > 1:
            self._cluster = LaminarCluster(
                workdir, self.replicas, self.cores, flush=self.flush, runtime=self.runtime
            )
            return Endpoint(KIND, self._cluster.start(), options)
        self._node = LaminarNode(
            workdir, self.cores, flush=self.flush, runtime=self.runtime, extra_args=extra_args
        )
        address = self._node.start()
        if self.variant == "tls-scram":
            _make_bench_user(address, options["tls_ca_file"])
        return Endpoint(KIND, address, options)

    def stop(self) -> None:
        if self._node is not None:
            self._node.stop()
        if self._cluster is not None:
            self._cluster.stop()

    def durability(self) -> Durability:
        if self.bootstrap is not None:
            return Durability(
                self.flush == "always",
                "as the external node was started",
                f"--bootstrap {self.bootstrap}: the harness did not start this node and "
                "cannot see its --flush policy; results assume the policy named by the "
                "target variant",
                {"flush": f"{self.flush} (assumed)"},
            )
        settings = {"flush": self.flush, "cores": str(self.cores), "runtime": self.runtime}
        if self.variant == "plain":
            settings["produce"] = "plain (idempotent=False)"
        if self.variant == "linger5":
            settings["produce"] = f"AsyncClient(linger_s={LINGER5_S})"
        if self.variant in SECURED:
            settings["tls"] = "TLS 1.3, ECDSA P-256 (client and every door)"
        if self.variant == "tls-scram":
            settings["auth"] = (
                f"--auth scram: SCRAM-SHA-256 logins, user {BENCH_USER!r} allowed by "
                "ACLs (not a superuser)"
            )
        if self.replicas > 1:
            settings.update(nodes=str(self.replicas), replication_factor=str(self.replicas))
            return Durability(
                True,
                f"ack after fsync on a majority of {self.replicas}",
                f"{self.replicas} nodes, replication_factor {self.replicas}: a produce is "
                "acknowledged once its Raft entry is committed, i.e. appended and "
                "fsynced (fdatasync) on a majority of the replicas, the leader included "
                "(a replicated partition requires --flush always)",
                settings,
            )
        if self.flush == "always":
            return Durability(
                True,
                "ack after fsync",
                "--flush always: a produce is acknowledged after its group-commit "
                "flush (write + fdatasync) completed",
                settings,
            )
        return Durability(
            False,
            "ack before fsync (sync every 100 ms)",
            "--flush interval: acknowledged once written to the page cache; a "
            "background task fdatasyncs every 100 ms",
            settings,
        )

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {"laminar": version("laminar"), "client": "laminar.client.AsyncClient"}

    def server_pids(self) -> dict[str, int]:
        if self._cluster is not None:
            return self._cluster.pids()
        pid = None if self._node is None else self._node.pid
        return {} if pid is None else {self.name: pid}

    def log_tail(self) -> str:
        if self._cluster is not None:
            return self._cluster.log_tail()
        return "" if self._node is None else self._node.log_tail()


def _make_bench_user(address: str, ca_file: str) -> None:
    """The `tls-scram` client's user and its ACLs, made as the bootstrap admin
    (created a moment after the node is up: logins are retried until then)."""
    deadline = time.monotonic() + LOGIN_WAIT_S
    while True:
        try:
            admin = Client(
                address, tls=True, ca_file=ca_file, username=ADMIN_USER, password=ADMIN_PASSWORD
            )
            break
        except AuthenticationFailedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    with admin:
        admin.create_user(BENCH_USER, BENCH_PASSWORD)
        principal = f"User:{BENCH_USER}"
        admin.add_acls(
            [
                Acl(principal, kind, PatternType.LITERAL, name, Operation.ALL, Permission.ALLOW)
                for kind, name in (
                    (ResourceType.TOPIC, "*"),
                    (ResourceType.GROUP, "*"),
                    (ResourceType.CLUSTER, CLUSTER_NAME),
                )
            ]
        )

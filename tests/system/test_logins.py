"""Logins on a real node (issue 28, step 2): `--auth scram` with a bootstrap
user, TLS with a client CA. Refused clients (no credentials, a wrong
password, an unknown user, an untrusted certificate) get a clear error and
nothing they sent is applied (checked by identity, read back as the admin);
the CLI creates a user who then logs in; ACLs go round trip; a client
certificate logs in without a password."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laminar.certs import make_ca, make_cert
from laminar.client import (
    Acl,
    AclFilter,
    AsyncClient,
    AuthenticationFailedError,
    Client,
    ConnectionLostError,
    NotAuthorizedError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    UserExistsError,
    WriteAbortedError,
    new_write_id,
)
from laminar.client.tls_socket import TlsSocket
from laminar.placement import partition_id
from laminar.security.frames import AuthenticateRequest, AuthenticateResponse
from laminar.security.scram import Mechanism, ScramClient
from laminar.security.tls import TlsSession, client_context
from laminar.shards.connection import LOGIN_FAILURE_DELAY_S
from laminar.wire import (
    NEED_DATA,
    ErrorCode,
    ErrorResponse,
    Frame,
    FrameDecoder,
    Message,
    ProduceRequest,
)
from tests.system.nodes import RunningNode, start_node

pytestmark = pytest.mark.timeout(180)

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret-1"
LOGIN_DEADLINE_S = 30.0
FIRST_REQUEST_TIMEOUT_S = 2
LAMINAR = [sys.executable, "-m", "laminar.cli.main"]


class Files:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ca = make_ca(directory, "ca")
        self.node = make_cert(directory, self.ca, "node")
        self.carol = make_cert(directory, self.ca, "carol")
        self.stranger = make_cert(directory, make_ca(directory, "other-ca"), "mallory")
        self.expired = make_cert(directory, self.ca, "old-carol", days=-1)  # expired
        self.admin_cred = self.secret("admin.cred", f"{ADMIN}:{ADMIN_PASSWORD}")
        self.admin_pw = self.secret("admin.pw", ADMIN_PASSWORD + "\n")

    def secret(self, name: str, text: str) -> str:
        path = self.dir / name
        path.write_text(text)
        path.chmod(0o600)
        return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return Files(tmp_path_factory.mktemp("auth-files"))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, files: Files) -> Iterator[RunningNode]:
    with start_node(
        tmp_path_factory.mktemp("auth"),
        cores=2,
        flush="never",
        auth="scram",
        bootstrap_user_file=files.admin_cred,
        tls_cert_file=files.node.cert,
        tls_key_file=files.node.key,
        tls_ca_file=files.ca.cert,
        first_request_timeout=FIRST_REQUEST_TIMEOUT_S,
    ) as running:
        yield running


def tls_client(node: RunningNode, files: Files, **options: Any) -> Client:
    """A client of the node through TLS, with `options` (a login, a certificate)."""
    return Client(node.bootstrap, tls=True, ca_file=files.ca.cert, **options)


def may_see_admin_topic(principal: str) -> Acl:
    """The ACL that lets `principal` see admin-topic (a login shows as whom it
    is logged in by what the node lets it see)."""
    return Acl(
        principal,
        ResourceType.TOPIC,
        PatternType.LITERAL,
        "admin-topic",
        Operation.DESCRIBE,
        Permission.ALLOW,
    )


def logged_in(node: RunningNode, files: Files, user: str, password: str) -> Client:
    """A client logged in as `user`, once the node has the user (the bootstrap
    user is created a moment after the node is up): a refusal is retried
    until the deadline, then raised."""
    deadline = time.monotonic() + LOGIN_DEADLINE_S
    while True:
        try:
            return tls_client(node, files, username=user, password=password)
        except AuthenticationFailedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture(scope="module")
def admin(node: RunningNode, files: Files) -> Iterator[Client]:
    with logged_in(node, files, ADMIN, ADMIN_PASSWORD) as client:
        yield client


def test_admin_logs_in_and_uses_the_node(admin: Client) -> None:
    admin.create_topic("admin-topic", 2)
    value = uuid.uuid4().bytes
    index = admin.produce("admin-topic", partition=1, values=[value])
    assert [r.value for r in admin.fetch("admin-topic", partition=1, index=index)] == [value]
    assert [u.name for u in admin.list_users()] == [ADMIN]
    assert admin.list_users()[0].superuser


@pytest.mark.parametrize(
    ("user", "password"),
    [(None, None), (ADMIN, "not-the-password"), ("nobody", "whatever-1")],
    ids=["no-credentials", "wrong-password", "unknown-user"],
)
def test_refused_clients_get_a_clear_error(
    node: RunningNode, files: Files, admin: Client, user: str | None, password: str | None
) -> None:
    with pytest.raises(AuthenticationFailedError) as refused:
        tls_client(node, files, username=user, password=password)
    if user is None:
        assert "log in first" in refused.value.message
    else:  # an unknown user hears exactly what a wrong password hears
        assert refused.value.message == "authentication failed: invalid user name or password"
    status, metrics = node.admin_get("/metrics")
    assert status == 200, metrics
    reason = (
        "not-logged-in" if user is None else "unknown-user" if user == "nobody" else "invalid-proof"
    )
    assert f'reason="{reason}"' in metrics


def _raw(files: Files, port: int) -> TlsSocket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    context = client_context(True, files.ca.cert)
    assert context is not None
    conn = TlsSocket(sock, TlsSession(context, server_side=False, server_hostname="127.0.0.1"))
    conn.handshake()
    return conn


def _until_closed(conn: TlsSocket) -> bytes:
    """Every byte the node sends until it closes the connection."""
    got = bytearray()
    buf = memoryview(bytearray(65536))
    while n := conn.recv_into(buf):
        got += buf[:n]
    return bytes(got)


def test_requests_before_login_are_never_applied(
    node: RunningNode, files: Files, admin: Client
) -> None:
    """A produce sent before logging in, with a login and another produce
    pipelined behind it, is refused, the connection closed after that one
    answer, and neither produce is in the partition when it is read back."""
    admin.create_topic("guarded", 1)
    pid = partition_id(admin.refresh_metadata_view().topic("guarded").topic_id, 0)
    marks: list[bytes] = []
    for port in (node.port, *node.shard_ports):
        first, behind = uuid.uuid4().bytes, uuid.uuid4().bytes
        marks += [first, behind]
        conn = _raw(files, port)
        conn.sendmsg(
            [
                ProduceRequest(pid, (first,)).encode(1),
                AuthenticateRequest("SCRAM-SHA-256", b"n,,n=admin,r=abc").encode(2),
                ProduceRequest(pid, (behind,)).encode(3),
            ]
        )
        data = _until_closed(conn)
        conn.close()
        decoder = FrameDecoder(1 << 20)
        decoder.feed(data)
        answers = [f for f in iter(decoder.next_frame, NEED_DATA) if isinstance(f, Frame)]
        assert [a.correlation_id for a in answers] == [1]  # one answer, then closed
        refusal = ErrorResponse.from_frame(answers[0])
        assert refusal.code is ErrorCode.AUTHENTICATION_FAILED
        assert "log in first" in refusal.message
    stored = {r.value for r in admin.fetch("guarded", partition=0, index=0, max_records=1000)}
    assert not stored & set(marks)


def _cli(node: RunningNode, files: Files, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAMINAR_")}
    return subprocess.run(
        [*LAMINAR, "--ca-file", files.ca.cert, *args, "--bootstrap", node.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_cli_creates_a_user_who_then_logs_in(
    node: RunningNode, files: Files, admin: Client
) -> None:
    alice_pw = files.secret("alice.pw", "alice-secret-1\n")
    login = ["--user", ADMIN, "--password-file", files.admin_pw]
    created = _cli(node, files, *login, "user", "create", "alice", "--password-file", alice_pw)
    assert created.returncode == 0, created.stderr
    again = _cli(node, files, *login, "user", "create", "alice", "--password-file", alice_pw)
    assert again.returncode == 1 and "USER_EXISTS" in again.stderr
    status = _cli(node, files, *login, "status", "--json")
    assert status.returncode == 0, status.stderr
    listed = _cli(node, files, *login, "user", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    users = {u["name"]: u for u in json.loads(listed.stdout)}
    assert users["alice"] == {
        "name": "alice",
        "principal": "User:alice",
        "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"],
        "superuser": False,
    }
    admin.add_acls([may_see_admin_topic("User:alice")])
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        with tls_client(
            node,
            files,
            username="alice",
            password="alice-secret-1",
            mechanism=mechanism,
        ) as alice:
            assert "admin-topic" in {t.name for t in alice.list_topics()}
    refused = _cli(
        node, files, "--user", "alice", "--password-file", files.admin_pw, "topic", "list", "--json"
    )
    assert refused.returncode == 1
    assert json.loads(refused.stderr)["error"]["code"] == "AUTHENTICATION_FAILED"
    new_pw = files.secret("alice2.pw", "alice-secret-2\n")
    changed = _cli(node, files, *login, "user", "passwd", "alice", "--password-file", new_pw)
    assert changed.returncode == 0, changed.stderr
    with pytest.raises(AuthenticationFailedError):
        tls_client(
            node,
            files,
            username="alice",
            password="alice-secret-1",
        )
    tls_client(node, files, username="alice", password="alice-secret-2").close()
    admin.remove_acls(AclFilter(principal="User:alice"))
    deleted = _cli(node, files, *login, "user", "delete", "alice")
    assert deleted.returncode == 0, deleted.stderr
    with pytest.raises(AuthenticationFailedError):
        tls_client(
            node,
            files,
            username="alice",
            password="alice-secret-2",
        )


def test_acls_round_trip(node: RunningNode, files: Files, admin: Client) -> None:
    login = ["--user", ADMIN, "--password-file", files.admin_pw]
    added = _cli(
        node, files, *login, "acl", "add", "--principal", "User:bob", "--operation", "read",
        "--topic", "events", "--group", "billing", "--json",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    bob_read = Acl(
        "User:bob",
        ResourceType.TOPIC,
        PatternType.LITERAL,
        "events",
        Operation.READ,
        Permission.ALLOW,
    )
    bob_group = Acl(
        "User:bob",
        ResourceType.GROUP,
        PatternType.LITERAL,
        "billing",
        Operation.READ,
        Permission.ALLOW,
    )
    assert set(admin.list_acls()) == {bob_read, bob_group}
    denial = Acl(
        "User:*",
        ResourceType.TOPIC,
        PatternType.PREFIXED,
        "secret-",
        Operation.ALL,
        Permission.DENY,
    )
    assert admin.add_acls([denial]) == [denial]
    assert admin.add_acls([denial]) == []  # there already
    listed = _cli(node, files, *login, "acl", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 3
    table = _cli(node, files, *login, "acl", "list")
    assert "User:bob" in table.stdout and "PRINCIPAL" in table.stdout
    removed = _cli(node, files, *login, "acl", "remove", "--principal", "User:bob", "--json")
    assert removed.returncode == 0, removed.stderr
    assert {a["name"] for a in json.loads(removed.stdout)} == {"events", "billing"}
    assert admin.remove_acls(AclFilter(permission=Permission.DENY)) == [denial]
    assert admin.list_acls() == []
    bare = _cli(node, files, *login, "acl", "remove")
    assert bare.returncode == 2


def test_a_client_certificate_logs_in(node: RunningNode, files: Files, admin: Client) -> None:
    """carol's certificate logs her in as User:carol: she sees admin-topic once
    an ACL lets User:carol see it, and not before."""
    carol_files = {"cert_file": files.carol.cert, "key_file": files.carol.key}
    with tls_client(node, files, **carol_files) as carol:
        assert carol.list_topics() == []
    admin.add_acls([may_see_admin_topic("User:carol")])
    with tls_client(node, files, **carol_files) as carol:
        assert [t.name for t in carol.list_topics()] == ["admin-topic"]
    by_cli = _cli(node, files, "--cert-file", files.carol.cert, "--key-file", files.carol.key,
                  "topic", "list", "--json")  # fmt: skip
    assert by_cli.returncode == 0, by_cli.stderr
    assert [t["name"] for t in json.loads(by_cli.stdout)] == ["admin-topic"]
    admin.remove_acls(AclFilter(principal="User:carol"))
    # TLS 1.3: the client's handshake ends before the node checks its
    # certificate; the node's alert ends the connection at the first read.
    for refused, alert in ((files.stranger, "unknown ca"), (files.expired, "certificate expired")):
        with pytest.raises(ConnectionLostError, match=alert):
            tls_client(node, files, cert_file=refused.cert, key_file=refused.key)


def test_the_async_client_logs_in_and_is_refused(node: RunningNode, files: Files) -> None:
    async def run(password: str) -> list[str]:
        async with AsyncClient(
            node.bootstrap, tls=True, ca_file=files.ca.cert, username=ADMIN, password=password
        ) as client:
            return [t.name for t in await client.list_topics()]

    assert "admin-topic" in asyncio.run(run(ADMIN_PASSWORD))
    with pytest.raises(AuthenticationFailedError, match="invalid user name or password"):
        asyncio.run(run("wrong-one"))


def test_an_existing_user_is_refused_by_name(admin: Client) -> None:
    with pytest.raises(UserExistsError):
        admin.create_user(ADMIN, "another-password")


def _exchange(conn: TlsSocket, decoder: FrameDecoder, message: Message, corr: int) -> Frame:
    conn.sendmsg(message.encode_buffers(corr))
    buf = memoryview(bytearray(65536))
    while (frame := decoder.next_frame()) is NEED_DATA:
        n = conn.recv_into(buf)
        assert n, "the node closed the connection"
        decoder.feed(buf[:n])
    assert isinstance(frame, Frame)
    return frame


def test_a_replayed_or_oversized_login_is_refused_late_and_alone(
    node: RunningNode, files: Files, admin: Client
) -> None:
    """A client-final recorded on one connection fails on another (its nonce
    is not this exchange's); the refusal comes after the door's delay while
    other clients are served at once; an oversized login frame is refused
    before it is buffered."""
    recorded = _raw(files, node.port)
    client = ScramClient(Mechanism.SCRAM_SHA_256, ADMIN, ADMIN_PASSWORD)
    challenge = _exchange(
        recorded, FrameDecoder(), AuthenticateRequest("SCRAM-SHA-256", client.first()), 1
    )
    final = client.final(AuthenticateResponse.from_frame(challenge).message)

    victim = _raw(files, node.port)
    other = ScramClient(Mechanism.SCRAM_SHA_256, ADMIN, "guessing")
    decoder = FrameDecoder()
    _exchange(victim, decoder, AuthenticateRequest("SCRAM-SHA-256", other.first()), 1)
    admin.create_topic("behind-a-replay", 1)
    pid = partition_id(admin.refresh_metadata_view().topic("behind-a-replay").topic_id, 0)
    mark = uuid.uuid4().bytes
    sent = time.monotonic()
    victim.sendmsg(
        [
            AuthenticateRequest("SCRAM-SHA-256", final).encode(2),
            ProduceRequest(pid, (mark,)).encode(3),  # pipelined behind the replay
        ]
    )
    pinged = time.monotonic()
    admin.ping()
    assert time.monotonic() - pinged < LOGIN_FAILURE_DELAY_S  # others are not held up
    answer = _until_closed(victim)
    assert time.monotonic() - sent >= LOGIN_FAILURE_DELAY_S * 0.9
    decoder.feed(answer)
    refusal = ErrorResponse.from_frame(decoder.next_frame())  # type: ignore[arg-type]
    assert refusal.code is ErrorCode.AUTHENTICATION_FAILED
    assert "not a valid SCRAM message" in refusal.message  # the nonce is another exchange's
    assert decoder.next_frame() is NEED_DATA  # that one answer, then closed
    recorded.close()
    victim.close()
    assert mark not in {r.value for r in admin.fetch("behind-a-replay", partition=0, index=0)}

    huge = _raw(files, node.port)
    huge.sendmsg(
        AuthenticateRequest("SCRAM-SHA-256", b"n,,n=admin,r=" + b"x" * 4096).encode_buffers(1)
    )
    decoder = FrameDecoder()
    decoder.feed(_until_closed(huge))
    assert ErrorResponse.from_frame(decoder.next_frame()).code is ErrorCode.FRAME_TOO_LARGE  # type: ignore[arg-type]
    huge.close()


def test_a_login_stalled_midway_is_closed_by_the_first_request_timeout(
    node: RunningNode, files: Files
) -> None:
    """A client that sends its client-first and nothing more is closed like one
    that never sent a request, not left to the idle timeout (minutes)."""
    conn = _raw(files, node.port)
    client = ScramClient(Mechanism.SCRAM_SHA_256, ADMIN, ADMIN_PASSWORD)
    decoder = FrameDecoder()
    _exchange(conn, decoder, AuthenticateRequest("SCRAM-SHA-256", client.first()), 1)
    started = time.monotonic()
    assert _until_closed(conn) == b""  # waits for the node to close it
    assert time.monotonic() - started < FIRST_REQUEST_TIMEOUT_S * 5
    conn.close()


def test_a_principal_cannot_commit_or_abort_another_s_atomic_write(
    node: RunningNode, files: Files, admin: Client
) -> None:
    """Both may write the topic; only the one who staged a write commits it:
    the other's commit is refused, and his final abort of the same id, made
    before the owner commits, is his own (ids are per principal), so the
    owner's commit still publishes each record once."""
    topic = f"owned-{uuid.uuid4().hex[:6]}"
    admin.create_topic(topic, 1)
    users = {"owner": "owner-password-1", "intruder": "intruder-password-1"}
    for name, password in users.items():
        admin.create_user(name, password)
        admin.add_acls(
            [
                Acl(
                    f"User:{name}",
                    ResourceType.TOPIC,
                    PatternType.LITERAL,
                    topic,
                    Operation.ALL,
                    Permission.ALLOW,
                )
            ]
        )
    with (
        logged_in(node, files, "owner", users["owner"]) as owner,
        logged_in(node, files, "intruder", users["intruder"]) as intruder,
    ):
        write_id = new_write_id()
        stager = owner.stager(write_id)
        stager.send(topic, 0, [b"w1", b"w2"])
        parts = stager.finish()
        with pytest.raises(NotAuthorizedError):
            intruder.commit_write(write_id, parts)
        assert admin.fetch(topic, 0, 0) == []  # nothing published by the refusal
        # The intruder's ids are his own: his abort of this one, made first,
        # binds him alone (his commit of it is refused), not the owner.
        assert intruder.abort_write(write_id, parts) == "aborted"
        with pytest.raises(WriteAbortedError):
            intruder.commit_write(write_id, parts)
        assert owner.commit_write(write_id, parts).first
        assert intruder.write_status(write_id) == "aborted"
        assert owner.write_status(write_id) == "done"
        assert [r.value for r in admin.fetch(topic, 0, 0)] == [b"w1", b"w2"]


def test_a_deleted_user_s_connection_serves_no_more_requests(
    node: RunningNode, files: Files, admin: Client
) -> None:
    """Its next request gets the reason and the connection closes; a new
    connection then fails to log in, as an unknown user does."""
    admin.create_user("dora", "dora-secret-1")
    with logged_in(node, files, "dora", "dora-secret-1") as dora:
        dora.list_topics()
        admin.delete_user("dora")
        deadline = time.monotonic() + LOGIN_DEADLINE_S
        while True:  # until the deletion reaches the shard serving dora's connection
            try:
                dora.list_topics()
            except AuthenticationFailedError as exc:
                assert "user dora was deleted" in exc.message
                break
            assert time.monotonic() < deadline, "dora's connection still served"
        with pytest.raises(AuthenticationFailedError, match="invalid user name or password"):
            dora.list_topics()

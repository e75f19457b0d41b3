"""The `laminar` command: output helpers, and round trips as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from laminar.cli.main import main
from laminar.cli.output import put_bytes, ranges, table
from laminar.cli.status import _kernel_lines, parse_prometheus, peer_auth, shard_loads
from laminar.client import Client, partition_for_key
from laminar.wire import ErrorCode, Op, producer_stamp

from .fakenode import FakeNode, Fault

LAMINAR = [str(Path(sys.executable).with_name("laminar"))]
if not Path(LAMINAR[0]).exists():
    LAMINAR = [sys.executable, "-m", "laminar.cli.main"]


def laminar(
    node: FakeNode | None, *args: str, stdin: str = "", timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    bootstrap = ["--bootstrap", node.bootstrap] if node is not None else []
    return subprocess.run(
        [*LAMINAR, *args, *bootstrap],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "LAMINAR_BOOTSTRAP": ""},
    )


@dataclass(frozen=True, slots=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


Cli = Callable[..., Ran]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """`laminar` run in this process (no interpreter start: for the many small
    cases); `laminar(...)` runs it as a subprocess."""
    monkeypatch.delenv("LAMINAR_BOOTSTRAP", raising=False)

    def run(node: FakeNode | None, *args: str) -> Ran:
        bootstrap = ["--bootstrap", node.bootstrap] if node is not None else []
        code = main([*args, *bootstrap])
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return run


# --- helpers ------------------------------------------------------------------------


def test_table_aligns_numbers_right_and_text_left() -> None:
    out = table(["NAME", "N"], [("a", 1), ("long-name", 100), ("b", None)])
    assert out.splitlines() == [
        "NAME         N",
        "a            1",
        "long-name  100",
        "b            -",
    ]


def test_ranges() -> None:
    assert ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert ranges([3]) == "3"
    assert ranges([]) == "-"


def test_prometheus_parsing_and_shard_loads() -> None:
    text = """# HELP laminar_requests_total requests
# TYPE laminar_requests_total counter
laminar_requests_total{shard="0",op="produce"} 10
laminar_requests_total{shard="0",op="fetch"} 5
laminar_requests_total{shard="1",op="produce",core="1"} 7
laminar_received_bytes_total{shard="1"} 1024
laminar_shard_up{shard="1"} 0
laminar_shard_restarts_total{shard="1"} 2
laminar_shard_core{shard="0"} 0
laminar_info{version="1 \\"x\\""} 1
garbage line
"""
    samples = parse_prometheus(text)
    assert ("laminar_info", {"version": '1 "x"'}, 1.0) in samples
    loads = shard_loads(samples)
    assert (loads[0].requests, loads[0].core) == (15, 0)
    assert (loads[1].requests, loads[1].bytes_in, loads[1].core) == (7, 1024, 1)
    assert (loads[1].up, loads[1].restarts) == (False, 2)


def test_status_warns_when_peers_are_not_authenticated() -> None:
    samples = parse_prometheus('laminar_node_info{node_id="n1",peer_auth="insecure"} 1\n')
    assert peer_auth(samples) == "insecure"
    assert any("not authenticated" in line for line in _kernel_lines({"peer_auth": "insecure"}))
    assert _kernel_lines({"peer_auth": "node-keys"}) == []


def test_put_bytes_keeps_every_byte() -> None:
    doc: dict[str, object] = {}
    put_bytes(doc, "value", b"text")
    put_bytes(doc, "key", b"\xff\x00")
    put_bytes(doc, "none", None)
    assert doc == {"value": "text", "key_base64": "/wA=", "none": None}


# --- round trips --------------------------------------------------------------------


def test_topic_commands(node: FakeNode) -> None:
    created = laminar(node, "topic", "create", "events", "--partitions", "4")
    assert created.returncode == 0, created.stderr
    assert "created topic events" in created.stdout
    again = laminar(node, "topic", "create", "events")
    assert again.returncode == 1
    assert "TOPIC_EXISTS" in again.stderr and "--if-not-exists" in again.stderr
    assert laminar(node, "topic", "create", "events", "--if-not-exists").returncode == 0
    listed = json.loads(laminar(node, "topic", "list", "--json").stdout)
    assert [(t["name"], t["partitions"]) for t in listed] == [("events", 4)]
    described = laminar(node, "topic", "describe", "events")
    assert described.returncode == 0
    assert described.stdout.splitlines()[1].split() == [
        "PARTITION", "SHARD", "ENDPOINT", "LOWEST", "HIGHEST", "RECORDS"
    ]  # fmt: skip
    assert laminar(node, "topic", "delete", "events").returncode == 0
    gone = laminar(node, "topic", "delete", "events")
    assert gone.returncode == 1 and "UNKNOWN_TOPIC" in gone.stderr
    assert laminar(node, "topic", "delete", "events", "--if-exists").returncode == 0


def test_produce_stdin_and_consume_back(node: FakeNode) -> None:
    assert laminar(node, "topic", "create", "t", "-p", "3").returncode == 0
    lines = [f"line {i} é" for i in range(1000)]
    produced = laminar(node, "produce", "t", "-p", "2", "--batch", "300", stdin="\n".join(lines))
    assert produced.returncode == 0, produced.stderr
    assert "produced 1000 records to t/2 at indexes 0..999" in produced.stderr
    consumed = laminar(node, "consume", "t", "-p", "2", "--from-beginning")
    assert consumed.returncode == 0
    assert consumed.stdout.splitlines() == lines
    keyed = laminar(node, "produce", "t", "-k", "user", "-v", "a", "-H", "h=1", "--json")
    summary = json.loads(keyed.stdout)
    [where] = summary["partitions"]
    as_json = laminar(node, "consume", "t", "-p", str(where["partition"]), "--json", "-n", "1")
    record = json.loads(as_json.stdout.splitlines()[-1])
    assert (record["key"], record["headers"]) == ("user", {"h": "1"})
    limited = laminar(node, "consume", "t", "--max", "5")
    assert len(limited.stdout.splitlines()) == 5


def test_consume_follow_sees_new_records(node: FakeNode) -> None:
    assert laminar(node, "topic", "create", "f", "-p", "2").returncode == 0
    follower = subprocess.Popen(
        [*LAMINAR, "consume", "f", "--follow", "--max", "2", "--bootstrap", node.bootstrap],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not any(r.op == 2 for r in node.partition_requests()):  # its first long poll
            assert time.monotonic() < deadline and follower.poll() is None
            time.sleep(0.05)
        assert laminar(node, "produce", "f", "-p", "0", "-v", "new").returncode == 0
        assert laminar(node, "produce", "f", "-p", "1", "-v", "newer").returncode == 0
        out, err = follower.communicate(timeout=20)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    assert sorted(out.splitlines()) == ["new", "newer"]


def test_status_json_names_the_routing_mode(node: FakeNode) -> None:
    assert laminar(node, "topic", "create", "s", "-p", "8").returncode == 0
    result = laminar(node, "status", "--json", "--admin", "127.0.0.1:1")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["routing_mode"] == "userspace"
    assert [s["port"] for s in doc["shards"]] == [node.port(0), node.port(1)]
    assert all(s["reachable"] for s in doc["shards"])
    assert sum(s["partitions"] for s in doc["shards"]) == 8
    assert doc["admin"]["reachable"] is False
    human = laminar(node, "status", "--admin", "127.0.0.1:1")
    assert "routing userspace" in human.stdout and "partition ownership" in human.stdout


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["consume", "missing"], 1, "laminar topic list"),
        (["produce", "t", "-p", "9", "-v", "x"], 1, "laminar topic describe t"),
        (["consume", "t", "-p", "0", "--index", "1", "--follow", "-n", "1"], 1, "OFFSET_OUT"),
        (["topic", "create"], 2, "usage"),
        (["produce", "t", "-H", "novalue", "-v", "x"], 2, "NAME=VALUE"),
        (["nonsense"], 2, "invalid choice"),
        (["consume", "t", "--index", "-1"], 2, "--index must be at least 0"),
        # The same bad partition is the same refusal for produce and consume.
        (["consume", "t", "-p", "9"], 1, "UNKNOWN_PARTITION"),
        (["consume", "t", "-p", "-1", "--follow"], 1, "UNKNOWN_PARTITION"),
        # Bad input to each command: a clear message and exit 2, never a traceback.
        (["produce", "t", "-H", "laminar.producer=x", "-v", "x"], 2, "is reserved"),
        (["produce", "t", "-v", "x", "--timeout", "0"], 2, "seconds above 0"),
        (["produce", "t", "-v", "x", "--timeout", "nan"], 2, "seconds above 0"),
        (["consume", "t", "--since-ms", "-5"], 2, "--since-ms must be at least 0"),
        (["consume", "t", "--since-ms", "1" + "0" * 30], 2, "--since-ms must be at most"),
        (["consume", "t", "--index", "9" * 30], 2, "--index must be at most"),
        (["status", "--bootstrap", "127.0.0.1:99999"], 2, "port must be in 1..65535"),
        (["-b", "127.0.0.1:0", "topic", "list"], 2, "port must be in 1..65535"),
        (["status", "--admin", "127.0.0.1:0"], 2, "port must be in 1..65535"),
        (["weight", "nan"], 2, "must be a number in (0, 1e+09]"),
        (["weight", "-1"], 2, "must be a number in (0, 1e+09]"),
    ],
)
def test_exit_codes(node: FakeNode, cli: Cli, args: list[str], code: int, says: str) -> None:
    with Client(node.bootstrap) as client:
        client.create_topic("t")
    result = cli(node, *args)  # in this process: an exception would fail the test
    assert result.returncode == code, result.stderr
    assert says in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "exit_code"),
    [
        (["topic", "create", "--json"], "USAGE", 2),  # argparse's own error
        (["--json", "topic", "create"], "USAGE", 2),
        (["produce", "t", "-H", "novalue", "-v", "x", "--json"], "USAGE", 2),
        (["consume", "missing", "--json"], "UNKNOWN_TOPIC", 1),
        (["--json", "produce", "t", "-p", "7", "-v", "x"], "UNKNOWN_PARTITION", 1),
        (["topic", "create", "t", "--json"], "TOPIC_EXISTS", 1),
        (["status", "--json", "--bootstrap", "UNREACHABLE"], "CANNOT_CONNECT", 3),
    ],
)
def test_json_errors_are_one_json_line_on_stderr(
    node: FakeNode, cli: Cli, args: list[str], code: str, exit_code: int
) -> None:
    with Client(node.bootstrap) as client:
        client.create_topic("t")
    with FakeNode() as gone:
        unreachable = gone.bootstrap
    args = [unreachable if a == "UNREACHABLE" else a for a in args]
    result = cli(None if "--bootstrap" in args else node, *args)
    assert result.returncode == exit_code, result.stderr
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    error = json.loads(line)["error"]
    assert (error["code"], error["exit_code"]) == (code, exit_code)
    assert error["message"] and set(error) == {"code", "exit_code", "message", "hint"}


def test_produce_without_partition_or_key_spreads_batches(node: FakeNode) -> None:
    """As Kafka's producer: each batch to one partition, the next to the next."""
    assert laminar(node, "topic", "create", "s", "-p", "3").returncode == 0
    lines = [f"line {i}" for i in range(60)]
    produced = laminar(node, "produce", "s", "--batch", "10", "--json", stdin="\n".join(lines))
    assert produced.returncode == 0, produced.stderr
    parts = json.loads(produced.stdout)["partitions"]
    assert [(p["partition"], p["records"]) for p in parts] == [(0, 20), (1, 20), (2, 20)]
    with Client(node.bootstrap) as client:
        stored = {p: [r.value.decode() for r in client.fetch("s", p, 0)] for p in range(3)}
    assert sorted(v for values in stored.values() for v in values) == sorted(lines)
    for values in stored.values():  # two whole batches of ten lines in order
        for batch in (values[:10], values[10:]):
            first = lines.index(batch[0])
            assert batch == lines[first : first + 10] and first % 10 == 0
    keyed = laminar(node, "produce", "s", "-k", "user-1", "--json", stdin="a\nb\nc")
    [part] = json.loads(keyed.stdout)["partitions"]
    assert part["partition"] == partition_for_key(b"user-1", 3) and part["records"] == 3


def test_produce_splits_batches_by_bytes_and_refuses_a_line_over_the_limit(
    node: FakeNode,
) -> None:
    assert laminar(node, "topic", "create", "big").returncode == 0
    lines = [f"{i:04d}".ljust(100_000, "x") for i in range(40)]
    produced = laminar(node, "produce", "big", stdin="\n".join(lines))
    assert produced.returncode == 0, produced.stderr
    produces = [r for r in node.received if r.op == Op.PRODUCE]
    assert len(produces) == 4  # 1 MiB per request, not one 4 MB request of 40 lines
    consumed = laminar(node, "consume", "big")
    assert consumed.stdout.splitlines() == lines
    before = len(node.received)
    too_long = "a\nb\n" + "c" * (9 << 20)
    refused = laminar(node, "produce", "big", stdin=too_long)
    assert refused.returncode == 1, refused.stderr
    assert "line 3 is longer than the node accepts" in refused.stderr
    assert "8388608 bytes" in refused.stderr and "--max-frame-bytes" in refused.stderr
    assert not any(r.op == Op.PRODUCE for r in node.received[before:])
    # With --json: what was appended before the error on stdout, the error on stderr.
    partly = laminar(node, "produce", "big", "-p", "0", "--batch", "1", "--json", stdin=too_long)
    assert partly.returncode == 1
    assert json.loads(partly.stdout)["partitions"] == [
        {"partition": 0, "records": 1, "first_index": 40, "last_index": 40}
    ]
    assert json.loads(partly.stderr)["error"]["code"] == "RECORD_TOO_LARGE"


@pytest.mark.parametrize(
    ("code", "exit_code", "says"),
    [
        (ErrorCode.OUTCOME_UNKNOWN, 4, "may or may not have been applied"),
        (ErrorCode.TIMEOUT, 1, "TIMEOUT"),  # the node refused: nothing was applied
    ],
)
def test_a_produce_whose_outcome_the_node_lost_exits_4(
    node: FakeNode, code: ErrorCode, exit_code: int, says: str
) -> None:
    """A plain produce the node handed to another shard and lost the answer of
    may be applied: exit 4 (outcome unknown), never 1 (refused)."""
    assert laminar(node, "topic", "create", "t").returncode == 0
    node.inject(Fault("error", op=Op.PRODUCE, code=code))
    result = laminar(node, "produce", "t", "-p", "0", "-v", "x", "--no-idempotence")
    assert result.returncode == exit_code, result.stderr
    assert says in result.stderr


def test_a_produce_is_idempotent_and_resent_when_its_outcome_was_lost(node: FakeNode) -> None:
    assert laminar(node, "topic", "create", "t").returncode == 0
    node.inject(Fault("error", op=Op.PRODUCE, code=ErrorCode.OUTCOME_UNKNOWN))
    result = laminar(node, "produce", "t", "-p", "0", "-v", "x")
    assert result.returncode == 0, result.stderr
    produces = [r for r in node.received if r.op == Op.PRODUCE]
    assert len(produces) == 2  # the one whose outcome was lost, and its resend
    [blob] = node.records(produces[0].partition_id)
    assert producer_stamp(blob) is not None  # stamped: the node can tell a resend


def test_cannot_connect_says_what_to_do() -> None:
    with FakeNode() as gone:
        address = gone.bootstrap
    result = laminar(None, "status", "--bootstrap", address)
    assert result.returncode == 3
    assert f"cannot reach {address}" in result.stderr
    assert "make run" in result.stderr


def test_help_documents_exit_codes() -> None:
    result = laminar(None, "--help")
    assert result.returncode == 0
    assert "exit codes:" in result.stdout and "130" in result.stdout
    assert '{"error": {"code": "UNKNOWN_TOPIC", "exit_code": 1' in result.stdout

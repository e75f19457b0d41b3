"""`laminar` (the CLI) as a subprocess against a real node."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .nodes import RunningNode

LAMINAR = [sys.executable, "-m", "laminar.cli.main"]


def laminar(node: RunningNode, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LAMINAR, *args, "--bootstrap", node.bootstrap],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "LAMINAR_BOOTSTRAP"},
    )


def test_create_produce_consume_status(node: RunningNode) -> None:
    created = laminar(node, "topic", "create", "events", "--partitions", "8")
    assert created.returncode == 0, created.stderr
    lines = [f"event {i}" for i in range(300)]
    produced = laminar(node, "produce", "events", "--partition", "5", stdin="\n".join(lines))
    assert produced.returncode == 0, produced.stderr
    assert "produced 300 records to events/5" in produced.stderr
    consumed = laminar(node, "consume", "events", "--partition", "5", "--from-beginning")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == lines
    everything = laminar(node, "consume", "events", "--json")
    records = [json.loads(line) for line in everything.stdout.splitlines()]
    assert {r["partition"] for r in records} == {5} and len(records) == 300

    described = json.loads(laminar(node, "topic", "describe", "events", "--json").stdout)
    assert sum(p["records"] for p in described["partition_details"]) == 300
    assert {p["port"] for p in described["partition_details"]} == set(node.shard_ports)

    admin = f"{node.admin_host}:{node.admin_port}"
    status = laminar(node, "status", "--json", "--admin", admin)
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["routing_mode"] == node.routing_mode
    assert [s["port"] for s in doc["shards"]] == node.shard_ports
    assert all(s["reachable"] and s["up"] for s in doc["shards"])
    assert all(s["core"] is not None for s in doc["shards"])  # from /metrics
    assert doc["admin"]["reachable"] is True
    assert sum(s["records"] for s in doc["shards"]) == 300
    assert sum(s["requests"] for s in doc["shards"]) > 0
    human = laminar(node, "status", "--admin", admin)
    assert f"routing {node.routing_mode}" in human.stdout
    # Without --admin, the metadata names the admin port (ephemeral here).
    found = json.loads(laminar(node, "status", "--json").stdout)
    assert found["admin"] == {"address": admin, "reachable": True}


def test_exit_codes_against_a_real_node(node: RunningNode) -> None:
    assert laminar(node, "topic", "create", "t").returncode == 0
    missing = laminar(node, "consume", "missing")
    assert missing.returncode == 1 and "UNKNOWN_TOPIC" in missing.stderr
    exists = laminar(node, "topic", "create", "t")
    assert exists.returncode == 1 and "--if-not-exists" in exists.stderr
    assert laminar(node, "produce", "t", "--header", "oops", "-v", "x").returncode == 2
    node.terminate()
    down = laminar(node, "topic", "list")
    assert down.returncode == 3
    assert "cannot reach" in down.stderr and "make run" in down.stderr


def test_consume_follow_prints_new_records(node: RunningNode) -> None:
    assert laminar(node, "topic", "create", "live", "--partitions", "4").returncode == 0
    follower = subprocess.Popen(
        [*LAMINAR, "consume", "live", "--follow", "--max", "3", "--json", "-b", node.bootstrap],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The follower starts at the end: keep producing until it has seen three.
        for i in range(200):
            if follower.poll() is not None:
                break
            laminar(node, "produce", "live", "--partition", str(i % 4), "--value", f"v{i}")
        out, err = follower.communicate(timeout=30)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == 3
    assert all(r["value"].startswith("v") for r in records)

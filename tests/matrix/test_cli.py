"""The `laminar` CLI on every topology: produce from a pipe, consume everything,
a leader killed between two produces; checked by identity."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.matrix.reading import check_once, topic_name
from tests.matrix.topologies import Topology

LAMINAR = [sys.executable, "-m", "laminar.cli.main"]


def laminar(topology: Topology, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [*LAMINAR, *args, "--bootstrap", topology.bootstrap],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "LAMINAR_BOOTSTRAP"},
    )
    assert result.returncode == 0, f"laminar {' '.join(args)}: rc {result.returncode}\n{result}"
    return result


def test_the_cli_produces_and_consumes_each_line_once(healed: Topology) -> None:
    topic = topic_name("cli")
    rf = str(healed.replication_factor)
    laminar(healed, "topic", "create", topic, "--partitions", "2", "--replication-factor", rf)
    healed.leader(topic, 0)  # every node applied the creation
    sent: dict[int, list[str]] = {0: [], 1: []}
    for part in ("a", "b"):
        for p in (0, 1):
            lines = [f"{part}-{p}-{i}" for i in range(40)]
            laminar(healed, "produce", topic, "-p", str(p), "--batch", "8", stdin="\n".join(lines))
            sent[p] += lines
        if part == "a":
            healed.kill_leader(topic, 0)
    consumed = laminar(healed, "consume", topic, "--json")
    records = [json.loads(line) for line in consumed.stdout.splitlines()]
    for p in (0, 1):
        read = [(r["index"], r["value"].encode()) for r in records if r["partition"] == p]
        check_once(read, dict.fromkeys((line.encode() for line in sent[p]), None))
        assert [v for _, v in read] == [line.encode() for line in sent[p]], "out of order"

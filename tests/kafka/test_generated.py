"""laminar/kafka/messages.py is what scripts/kafka_codegen.py writes from the
vendored JSON today: nobody edits it by hand, and the JSON and the module do
not drift apart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.kafka.oracle import REPO


def test_the_generated_module_is_current(tmp_path: Path) -> None:
    target = tmp_path / "messages.py"
    script = REPO / "scripts" / "kafka_codegen.py"
    subprocess.run([sys.executable, str(script), str(target)], check=True, cwd=REPO)
    checked_in = (REPO / "laminar" / "kafka" / "messages.py").read_text()
    assert target.read_text() == checked_in, (
        "laminar/kafka/messages.py is stale or hand-edited: run "
        ".venv/bin/python scripts/kafka_codegen.py"
    )


def test_every_vendored_definition_keeps_its_license_header() -> None:
    for path in sorted((REPO / "laminar" / "kafka" / "schema").glob("*.json")):
        assert "Licensed to the Apache Software Foundation" in path.read_text(), path.name

"""The JSON results file: every figure, every run, the exact configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from laminar.bench.compare import Comparison
from laminar.bench.config import RunConfig
from laminar.bench.kafka_goal import kafka_checks
from laminar.bench.replication_goal import replication_checks
from laminar.bench.results import run_from_dict

SCHEMA = "laminar-bench/1"


def results_document(
    comparison: Comparison, command: list[str], machine: dict[str, Any], options: dict[str, Any]
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "command": command,
        "machine": machine,
        "config": comparison.config.to_dict(),
        "config_description": comparison.config.describe(),
        "primary_metric": comparison.config.primary_metric,
        "targets": comparison.targets,
        "target_options": options,
        "rounds": comparison.rounds,
        "summary": [s.to_dict() for s in comparison.summaries()],
        "ratios_vs_first": comparison.ratios(),
        "goal": comparison.goal(),
        "replication_goal": [
            c.to_dict() for c in replication_checks(comparison.config, comparison.summaries())
        ],
        "kafka_goal": [
            c.to_dict() for c in kafka_checks(comparison.config, comparison.summaries())
        ],
        "runs": [r.to_dict() for r in comparison.runs],
    }


def write_json(document: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    return path


def read_json(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    if document.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a {SCHEMA} results file")
    return document


def comparison_from_document(document: dict[str, Any]) -> Comparison:
    """The comparison a results file was written from (to re-render it)."""
    comparison = Comparison(
        RunConfig(**document["config"]), list(document["targets"]), int(document["rounds"])
    )
    comparison.runs = [run_from_dict(run) for run in document["runs"]]
    return comparison

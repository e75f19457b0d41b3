"""The JSON results file: every figure, every run, the exact configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from laminar.bench.compare import Comparison

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
        "runs": [r.to_dict() for r in comparison.runs],
    }


def write_json(document: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    return path

"""Command-line entry points: laminar-node, laminar, laminar-bench, and demos."""

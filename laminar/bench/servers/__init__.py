"""Server processes the harness starts: lifecycle (`process`), ports, and one
module per system that knows its configuration file and readiness check."""

"""Reading a `--trace` file back (`loops.cli.progress.TraceFile`): its records, by kind."""

import json
from pathlib import Path

__all__ = ["trace_records", "trace_steps"]


def trace_records(path: Path, record: str | None = None) -> list[dict]:
    """The records of a `--trace` file, in order; only those of one kind (`step`, `summary`) when given."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [entry for entry in records if record is None or entry["record"] == record]


def trace_steps(path: Path) -> list[dict]:
    """The step records of a `--trace` file: one per role call."""
    return trace_records(path, "step")

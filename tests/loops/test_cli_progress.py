"""What a run shows as it goes (`loops.cli.progress`): the live table's outcome column and the `--trace` file,
for real runs of the commands against a loopback server (`FaultyOpenAI`, which never approves, answers FAIL
and stop, and serves code that fails its tests)."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from loops.cli import app
from tests.loops.fake_openai import faulty_openai


@pytest.fixture
def server():
    with faulty_openai() as running:
        yield running


def invoke(server, tmp_path, command: list[str]) -> tuple[str, list[dict]]:
    trace = tmp_path / "trace.jsonl"
    outcome = CliRunner().invoke(app, [*command, "--model", "openai/x", "--api-base", server.base_url(),
                                       "--adapter", "json", "--max-iterations", "1", "--trace", str(trace)],
                                 env={"COLUMNS": "200"})
    assert outcome.exit_code == 1, outcome.output  # the loop ran and ended without success
    return outcome.output, [json.loads(line) for line in trace.read_text().splitlines()]


def rows(output: str) -> dict[str, str]:
    """The live table's outcome column, by role (the last row of each)."""
    table = {}
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.split("│")]
        if len(cells) == 8 and cells[2].isdigit():
            table[cells[1]] = cells[6]
    return table


def test_refine_shows_the_critics_rejection_and_traces_every_steps_outputs(server, tmp_path):
    output, steps = invoke(server, tmp_path, ["refine", "A haiku about rain"])

    assert rows(output) == {"creator": "wrote 'a draft'", "critic": "needs revision (3/3 criteria)"}
    assert [step["role"] for step in steps] == ["creator", "critic"]
    assert steps[0]["outputs"]["draft"] == "a draft"
    assert steps[1]["outputs"]["approved"] is False


def test_fix_shows_failing_tests_and_traces_every_steps_outputs(server, tmp_path):
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / "test_add.py").write_text("from solution import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    command = f"{sys.executable} -m pytest -q -p no:cacheprovider test_add.py"

    output, steps = invoke(server, tmp_path, ["fix", "Write add(a, b)", "--test-command", command,
                                              "--workspace", str(workspace), "--no-analyst"])

    validation = steps[-1]["outputs"]["result"]
    assert validation["exit_code"] not in (0, None)
    assert rows(output)["validator"] == f"tests fail (exit {validation['exit_code']})"
    assert all(step["outputs"] is not None for step in steps), steps


def test_direct_shows_the_evaluators_fail_and_traces_every_steps_outputs(server, tmp_path):
    output, steps = invoke(server, tmp_path, ["direct", "Three names for a coffee shop"])

    assert rows(output) == {"director": "ok", "executor": "ok", "evaluator": "FAIL", "controller": "decides: stop"}
    assert [(step["role"], step["outputs"] is not None) for step in steps] == [
        ("director", True), ("executor", True), ("evaluator", True), ("controller", True)]

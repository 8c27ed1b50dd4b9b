"""The `loops` command on the real embedded model (short runs); exit codes: test_cli_exit_codes.py."""

import sys

import pytest
from typer.testing import CliRunner

from loops.cli import app
from tests.loops.trace_files import trace_steps

pytestmark = pytest.mark.embedded


def test_refine_prints_the_final_draft_and_writes_the_trace(tmp_path):
    trace = tmp_path / "trace.jsonl"

    outcome = CliRunner().invoke(app, ["refine", "Write one sentence about tea.", "--max-iterations", "1",
                                       "--trace", str(trace)])

    assert outcome.exit_code == (0 if "final draft (approved)" in outcome.output else 1), outcome.output
    assert "final draft" in outcome.output and "stop reason" in outcome.output
    steps = trace_steps(trace)
    assert [step["role"] for step in steps] == ["creator", "critic"]


def test_fix_works_in_the_given_workspace_and_exits_by_the_tests_verdict(tmp_path):
    (tmp_path / "test_add.py").write_text("from solution import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    command = f"{sys.executable} -m pytest -q -p no:cacheprovider test_add.py"

    outcome = CliRunner().invoke(app, ["fix", "Write a Python function add(a, b) that returns a + b.",
                                       "--test-command", command, "--workspace", str(tmp_path),
                                       "--max-iterations", "1", "--files", "test_add.py"])

    assert (tmp_path / "solution.py").exists()
    assert "stop reason" in outcome.output
    assert outcome.exit_code == (0 if "tests pass" in outcome.output else 1), outcome.output


def test_direct_runs_the_director_loop(tmp_path):
    trace = tmp_path / "trace.jsonl"

    outcome = CliRunner().invoke(app, ["direct", "Three names for a coffee shop", "--max-iterations", "1",
                                       "--trace", str(trace)])

    assert outcome.exit_code == (1 if "not passed" in outcome.output else 0), outcome.output
    roles = [step["role"] for step in trace_steps(trace)]
    assert roles[:3] == ["director", "executor", "evaluator"]


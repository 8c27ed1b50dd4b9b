"""The `loops` command on the real embedded model (short runs); exit codes: test_cli_exit_codes.py."""

import json
import sys

import pytest
from typer.testing import CliRunner

from loops.cli import app

pytestmark = pytest.mark.embedded


def test_refine_prints_the_final_draft_and_writes_the_trace(tmp_path):
    trace = tmp_path / "trace.jsonl"

    outcome = CliRunner().invoke(app, ["refine", "Write one sentence about tea.", "--max-iterations", "1",
                                       "--trace", str(trace)])

    assert outcome.exit_code == (0 if "final draft (approved)" in outcome.output else 1), outcome.output
    assert "final draft" in outcome.output and "stop reason" in outcome.output
    steps = [json.loads(line) for line in trace.read_text().splitlines()]
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
    roles = [json.loads(line)["role"] for line in trace.read_text().splitlines()]
    assert roles[:3] == ["director", "executor", "evaluator"]


def test_a_person_given_the_judging_role_is_the_judge_and_a_judge_chosen_beside_them_is_a_usage_error():
    from loops import ConfigurationError, human
    from loops.cli.options import Judge, judged_by

    person = human()
    assert judged_by("critic", None, {"critic": person}) == {"critic": person}
    assert judged_by("evaluator", Judge("checks"), {}) == {"evaluator": "checks"}
    with pytest.raises(ConfigurationError, match="--critic llm and --human critic both choose the critic: give one"):
        judged_by("critic", Judge("llm"), {"critic": person})

"""What a run shows as it goes (`loops.cli.progress`): the live table's outcome column and the `--trace` file,
for real runs of the commands against a loopback server (`FaultyOpenAI`, which never approves, answers FAIL
and stop, and serves code that fails its tests)."""

from __future__ import annotations

import datetime
import sys

import pytest
from typer.testing import CliRunner

import loops.lm
from loops.cli import app
from tests.loops.fake_openai import faulty_openai
from tests.loops.trace_files import trace_records, trace_steps
from tests.scripted import scripted_lm


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
    return outcome.output, trace_steps(trace)


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

    # The loopback server's critic ticks every criterion and does not approve: the verdict rule takes it as not
    # approved and says so (loops.vocabulary.contracts.judge).
    assert rows(output) == {"creator": "wrote 'a draft'", "critic": "needs revision (3/3 criteria); the critic not "
                            "approved, but every criterion passed: not approved"}
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


def test_the_trace_file_appends_each_run_with_its_run_id_the_time_and_a_summary(server, tmp_path):
    trace = tmp_path / "trace.jsonl"
    for _ in range(2):
        CliRunner().invoke(app, ["refine", "A haiku about rain", "--model", "openai/x", "--api-base",
                                 server.base_url(), "--max-iterations", "1", "--trace", str(trace)])

    records = trace_records(trace)
    assert [record["record"] for record in records] == ["step", "step", "summary"] * 2
    first, second = records[2]["run_id"], records[5]["run_id"]
    assert first != second and all(record["run_id"] == first for record in records[:3])
    assert all(datetime.datetime.fromisoformat(record["time"]).tzinfo is not None for record in records)
    assert records[2] | {"time": None, "seconds": None} == {
        "record": "summary", "run_id": first, "time": None, "stop_reason": "max_iterations", "success": False,
        "iterations": 1, "lm_calls": 2, "replayed": 0, "cached": 0, "tokens": 20, "cost_usd": None,
        "warnings": ["iteration 1: the critic's verdict contradicts itself (not approved, but every criterion "
                     "passed); treated as not approved", "stopped at max_iterations=1"], "seconds": None}


def test_a_checkpointed_run_is_traced_under_its_run_id(server, tmp_path):
    trace = tmp_path / "trace.jsonl"
    CliRunner().invoke(app, ["refine", "A haiku about rain", "--model", "openai/x", "--api-base", server.base_url(),
                             "--max-iterations", "1", "--trace", str(trace), "--checkpoint", str(tmp_path / "runs.db"),
                             "--run-id", "haiku-1"])

    assert {record["run_id"] for record in trace_records(trace)} == {"haiku-1"}


def test_what_the_loop_notes_on_a_step_shows_in_the_table_and_the_trace(monkeypatch, tmp_path):
    trace = tmp_path / "trace.jsonl"
    approval = {"accuracy_passed": True, "completeness_passed": True, "quality_passed": True, "feedback": "",
                "approved": True}
    monkeypatch.setattr(loops.lm, "resolve", lambda model: scripted_lm([{"reasoning": "r", "draft": "]["}, approval]))

    outcome = CliRunner().invoke(app, ["refine", "A haiku about rain", "--model", "scripted/test", "--max-iterations",
                                       "1", "--trace", str(trace)], env={"COLUMNS": "200"})

    assert outcome.exit_code == 1, outcome.output
    critic = trace_steps(trace)[1]
    assert critic["note"] == "junk (no letters): not approved"
    assert rows(outcome.output)["critic"] == "approved (3/3 criteria); junk (no letters): not approved"
    assert "warning: iteration 1: the draft is junk (no letters)" in outcome.output

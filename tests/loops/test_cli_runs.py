"""`loops refine|fix|direct --checkpoint FILE --run-id ID` and `loops runs list/show/answer/delete/prune`, on real
SQLite files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import dspy
import pytest
from typer.testing import CliRunner

import loops
import loops.lm
from loops import CreatorCriticIterator
from loops.cli import app
from loops.recording.checkpoint import SQLiteStore
from tests.loops.recording.test_checkpoint import recorded_runs
from tests.loops.test_long_loops import never_approving
from tests.scripted import calls, scripted_lm

ROOT = Path(__file__).resolve().parents[2]
CREATED = {"reasoning": "plan", "draft": "Drink more water."}
REJECTED = {"accuracy_passed": True, "completeness_passed": False, "quality_passed": True,
            "feedback": "name the bottle", "approved": False}
REVISED = {"improved_draft": "Drink more water from the Aqua bottle."}


@pytest.fixture
def lms(monkeypatch):
    handed_out = []

    def resolve(model):
        handed_out.append(scripted_lm([CREATED, REJECTED, REVISED, REJECTED]))
        return handed_out[-1]

    monkeypatch.setattr(loops.lm, "resolve", resolve)
    return handed_out


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_a_recorded_run_resumes_without_lm_calls_and_is_listed(lms, tmp_path):
    db = str(tmp_path / "runs.db")
    first = invoke("refine", "A slogan", "--model", "scripted", "--max-iterations", "2", "--checkpoint", db,
                   "--run-id", "slogan-1", "--token-budget", "1000")
    assert first.exit_code == 1, first.output
    assert "tokens: 60" in first.stdout
    again = invoke("refine", "A slogan", "--model", "scripted", "--max-iterations", "2", "--checkpoint", db,
                   "--run-id", "slogan-1", "--token-budget", "1000")
    assert again.exit_code == 1, again.output
    assert [calls(lm) for lm in lms] == [4, 0]

    def final_panel(stdout):
        return stdout.split("final draft")[1].split("stop reason")[0]

    assert final_panel(again.stdout) == final_panel(first.stdout)  # the same result, replayed
    assert "Drink more water." in final_panel(again.stdout)  # both judged alike: the earlier draft is kept

    listed = invoke("runs", "list", db)
    assert listed.exit_code == 0, listed.output
    assert "slogan-1" in listed.stdout and "max_iterations" in listed.stdout
    shown = invoke("runs", "show", db, "slogan-1")
    assert shown.exit_code == 0, shown.output
    assert [role for role in ("creator", "critic", "iterator") if role in shown.stdout] == ["creator", "critic",
                                                                                          "iterator"]


def test_the_token_budget_ends_the_run(lms):
    outcome = invoke("refine", "A slogan", "--model", "scripted", "--max-iterations", "3", "--token-budget", "20")
    assert outcome.exit_code == 1, outcome.output
    assert "stop reason: tokens" in outcome.stdout
    assert calls(lms[0]) == 2


def test_run_id_without_checkpoint_and_an_unknown_run_are_usage_errors(lms, tmp_path):
    outcome = invoke("refine", "A slogan", "--model", "scripted", "--run-id", "x")
    assert outcome.exit_code == 2 and "--run-id needs --checkpoint" in outcome.stderr
    invoke("refine", "A slogan", "--model", "scripted", "--max-iterations", "1", "--checkpoint",
           str(tmp_path / "runs.db"))
    missing = invoke("runs", "show", str(tmp_path / "runs.db"), "nope")
    assert missing.exit_code == 2 and "no run 'nope'" in missing.stderr
    assert invoke("runs", "list", str(tmp_path / "none.db")).exit_code == 2


def test_runs_show_html_writes_the_runs_timeline_as_a_page(lms, tmp_path):
    pytest.importorskip("matplotlib", reason="the notebooks extra is installed by the README's test command")
    db, page = str(tmp_path / "runs.db"), tmp_path / "run.html"
    invoke("refine", "A slogan", "--model", "scripted", "--max-iterations", "2", "--checkpoint", db, "--run-id", "r")

    shown = invoke("runs", "show", db, "r", "--html", str(page))

    assert shown.exit_code == 0, shown.output
    assert f"the run's timeline: {page}" in " ".join(shown.stdout.split())
    text = page.read_text()
    assert "<title>run r: max_iterations</title>" in text and "<svg" in text
    assert text.count("<tr><td>") == 4 and "needs revision (2/3 criteria)" in text
    unwritable = invoke("runs", "show", db, "r", "--html", str(tmp_path / "missing" / "run.html"))
    assert unwritable.exit_code == 2 and "--html" in unwritable.output and "cannot be written" in unwritable.output


def test_resuming_a_run_with_other_options_says_what_differs_in_one_line_before_any_lm_call(lms, tmp_path):
    db = str(tmp_path / "runs.db")
    options = ("refine", "A slogan", "--model", "scripted", "--max-iterations", "1", "--checkpoint", db, "--run-id",
               "r1")
    assert invoke(*options).exit_code == 1
    human = invoke(*options, "--human", "critic")
    fixing = invoke("fix", "A slogan", "--model", "scripted", "--test-command", "true", "--workspace",
                    str(tmp_path / "ws"), "--checkpoint", db, "--run-id", "r1")

    assert human.exit_code == 2
    assert human.stderr == (
        "error: run 'r1' was recorded by another program, a CreatorCriticIterator whose roles differ from this "
        "one's: the critic was the built-in LLM role then and is a person now; resume it with the options it was "
        "recorded with (the same roles, the same --human), or give this run a new run_id\n")
    assert fixing.exit_code == 2
    assert fixing.stderr == (
        "error: run 'r1' was recorded by another program (CreatorCriticIterator, not ExecuteValidateController): "
        "resume it with the command or program that recorded it, or give this run a new run_id\n")
    assert [calls(lm) for lm in lms] == [2, 0, 0]


# --- `loops runs answer`: each field once, an answer never replaced unawares, an unknown run named --------------


def paused_run(path, run_id: str) -> None:
    """A run `run_id` in the checkpoint file `path`, paused on its critic's question (a person nobody answers)."""
    loop = CreatorCriticIterator(max_iterations=2, critic=loops.human(interactive=False))
    with dspy.context(lm=scripted_lm(never_approving)):
        assert loop(requirements="a slogan", checkpoint=path, run_id=run_id).stop_reason == "awaiting_input"


def test_runs_answer_refuses_a_field_given_twice_and_a_second_answer_without_replace_and_names_an_unknown_run(
        tmp_path):
    db = str(tmp_path / "runs.db")
    paused_run(db, "haiku-1")

    twice = invoke("runs", "answer", db, "haiku-1", "--set", "approved=true", "--set", "approved=false")
    assert twice.exit_code == 2
    assert twice.stderr == "error: --set approved= is given twice ('true', then 'false'): give each name once\n"
    assert loops.pending_question(db, "haiku-1") is not None and _recorded_answer(db) is None  # nothing recorded

    first = invoke("runs", "answer", db, "haiku-1", "--set", "approved=false", "--set", "feedback=Name the bottle")
    assert first.exit_code == 0, first.output
    second = invoke("runs", "answer", db, "haiku-1", "--set", "approved=true")
    assert second.exit_code == 2
    assert second.stderr == (
        "error: run 'haiku-1' already has an answer to the critic's question (feedback='Name the bottle', "
        "approved=False), which resuming it will use: to record this one instead, answer with --replace (`loops runs "
        "answer`) or replace=True (`loops.answer`)\n")
    assert _recorded_answer(db) == {"feedback": "Name the bottle", "approved": False}
    replaced = invoke("runs", "answer", db, "haiku-1", "--set", "approved=true", "--replace")
    assert replaced.exit_code == 0, replaced.output
    assert replaced.stdout.startswith("recorded the critic's answer for run haiku-1: ")
    assert _recorded_answer(db)["approved"] is True

    unknown = invoke("runs", "answer", db, "haiku1", "--set", "approved=true")
    assert unknown.exit_code == 2
    assert unknown.stderr == (f"error: no run 'haiku1' in {db!r}: did you mean 'haiku-1'? `loops runs list {db}` "
                              "lists them\n")
    with dspy.context(lm=scripted_lm(never_approving)):  # the resumed run takes the answer that replaced the first
        done = CreatorCriticIterator(max_iterations=2, critic=loops.human(interactive=False))(
            requirements="a slogan", checkpoint=db, run_id="haiku-1")
    assert (done.stop_reason, done.replayed) == ("approved", 1)
    ended = invoke("runs", "answer", db, "haiku-1", "--set", "approved=true")
    assert ended.exit_code == 2
    assert ended.stderr == (f"error: run 'haiku-1' waits on no person's answer in {db!r}: it ended with stop reason "
                            "approved\n")


def _recorded_answer(path) -> dict | None:
    with SQLiteStore(path) as store:
        [question] = store.questions("haiku-1")
    return None if question.answer is None else json.loads(question.answer)


# --- `loops runs delete/prune`: the file left compact, its size said, the kept runs still replayed ----------------


def loops_process(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loops", *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})


def test_runs_prune_and_delete_say_the_bytes_before_and_after_and_the_kept_runs_still_replay(tmp_path):
    path = tmp_path / "runs.db"
    module = recorded_runs(path, 30)

    pruned = loops_process("runs", "prune", path, "--status", "max_iterations", "--keep-last", "5")
    assert pruned.returncode == 0, pruned.stderr
    lines = pruned.stdout.splitlines()
    assert lines[0] == "deleted 25 runs: r0, r1, r2, r3, r4, r5, r6, r7, r8, r9 and 15 more"
    before, after = (int(size.replace(",", "")) for size in re.fullmatch(
        rf"{re.escape(str(path))}: ([\d,]+) bytes before, ([\d,]+) after \(VACUUM\)", lines[1]).groups())
    assert after < before / 2 and after == path.stat().st_size
    deleted = loops_process("runs", "delete", path, "r25", "paused")
    assert deleted.returncode == 0 and deleted.stdout.startswith("deleted 2 runs: r25, paused\n"), deleted.stderr
    listed = loops_process("runs", "list", path)
    assert re.findall(r"│ (\S+) +│ CreatorCriticIterator", listed.stdout) == ["r26", "r27", "r28", "r29"]

    lm = scripted_lm(never_approving)
    with dspy.context(lm=lm):
        replayed = module(requirements="a slogan 27", run_id="r27")
    assert (replayed.stop_reason, replayed.replayed, replayed.lm_calls, calls(lm)) == ("max_iterations", 4, 0, 0)


@pytest.mark.parametrize(("args", "error"), [
    (("prune",), "say which runs to prune: --older-than AGE, --status STOP_REASON or --keep-last N"),
    (("prune", "--older-than", "3 months"), "--older-than takes an age such as 30d, 12h, 45m, 90s or 2w, got "
                                            "'3 months'"),
    (("prune", "--status", "approve"), "--status takes a stop reason (approved, stopped, completed, no_progress, "
                                       "max_iterations, timeout, context_limit, lm_calls, tokens, cost, error, "
                                       "awaiting_input, unfinished), got 'approve'"),
    (("delete", "r0", "r00"), "no run 'r00' in {db!r}: did you mean 'r0'? `loops runs list {db}` lists them"),
])
def test_runs_prune_and_delete_refuse_what_names_no_run_in_one_line_and_delete_nothing(tmp_path, args, error):
    db = str(tmp_path / "runs.db")
    recorded_runs(db, 1)
    outcome = invoke("runs", args[0], db, *args[1:])
    assert outcome.exit_code == 2
    assert outcome.stderr == f"error: {error.format(db=db)}\n"
    with SQLiteStore(db) as store:
        assert [run.run_id for run in store.runs()] == ["r0", "paused"]

"""`loops refine|fix|direct --checkpoint FILE --run-id ID` and `loops runs list/show`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import loops.lm
from loops.cli import app
from tests.scripted import calls, scripted_lm

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

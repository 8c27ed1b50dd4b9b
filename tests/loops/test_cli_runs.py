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
    assert "Drink more water from the Aqua bottle." in again.stdout

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

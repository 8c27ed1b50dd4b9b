"""`loops run FILE.sexp` and `loops repl`: a DSL program from the shell, with --set inputs, its atoms
on --model, the trace file, and exit codes (2 for an error in the program, shown with its caret)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import loops.lm
from loops.cli import app
from loops.cli.programs import dsl_value
from tests.scripted import scripted_lm


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def scripted(monkeypatch):
    lms = []

    def resolve(model):
        lms.append(scripted_lm([{"slogan": "Drink up"}]))
        return lms[-1]

    monkeypatch.setattr(loops.lm, "resolve", resolve)
    return lms


def test_a_program_runs_with_its_inputs_its_log_and_exit_code_0(scripted, tmp_path):
    program = tmp_path / "fact.sexp"
    program.write_text('(define (fact n) (if (< n 2) 1 (* n (fact (- n 1)))))\n(log-message "n is" n)\n(fact n)\n')
    outcome = invoke("run", str(program), "--set", "n=10")
    assert outcome.exit_code == 0, outcome.output
    assert "log: n is 10" in outcome.stdout
    assert "3628800" in outcome.stdout
    assert "fact.sexp: completed, success" in outcome.stdout


def test_atoms_run_on_the_model_and_every_call_reaches_the_trace_file(scripted, tmp_path):
    program = tmp_path / "slogan.sexp"
    program.write_text('(defatom user:slogan (params (product string)) (instructions "A slogan for {{product}}.")\n'
                       '  (returns (slogan string)))\n(get-field (user:slogan (product product)) "slogan")\n')
    trace = tmp_path / "trace.jsonl"
    outcome = invoke("run", str(program), "--set", "product=a bottle", "--model", "openai/scripted",
                     "--trace", str(trace))
    assert outcome.exit_code == 0, outcome.output
    assert '"Drink up"' in outcome.stdout and "LM calls: 1" in outcome.stdout
    steps = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [step["role"] for step in steps] == ["user:slogan", "program"]
    assert steps[0]["inputs"] == {"product": "a bottle"}


def test_override_atom_models_runs_a_seed_style_program_on_the_runs_model(scripted, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    program = tmp_path / "seed.sexp"
    program.write_text('(defatom user:slogan (params (product string)) (instructions "A slogan for {{product}}.")\n'
                       '  (returns (slogan string)) (model "gpt-4-turbo"))\n'
                       '(get-field (user:slogan (product "a bottle")) "slogan")\n')

    outcome = invoke("run", str(program), "--model", "openai/scripted", "--override-atom-models")

    assert outcome.exit_code == 0, outcome.output
    assert '"Drink up"' in outcome.stdout and len(scripted[-1].engine.requests) == 1


@pytest.mark.parametrize(("verdict", "exit_code", "title"), [
    ('(list #f "longer")', 1, "max_iterations, no success"), ("#t", 0, "approved, success")])
def test_a_program_succeeds_as_its_last_loop_form_did(scripted, tmp_path, verdict, exit_code, title):
    program = tmp_path / "refine.sexp"
    program.write_text(f"""(creator-critic-loop (max-iterations 2) (requirements "r")
  (creator (lambda (requirements context n) "draft"))
  (critic (lambda (requirements draft n) {verdict}))
  (iterator (lambda (requirements draft feedback n) (string-append draft " " feedback))))""")

    outcome = invoke("run", str(program))

    assert outcome.exit_code == exit_code, outcome.output
    assert f"refine.sexp: {title}" in outcome.stdout


@pytest.mark.parametrize("source, position", [
    ("(define x 1)\n(if)\n", ":2:1: malformed if"),
    ("(define x 1)\n(car x)\n", ":2:1: 'car' expects a list, got 1"),
])
def test_an_error_in_the_program_exits_2_with_its_position_and_caret(scripted, tmp_path, source, position):
    program = tmp_path / "broken.sexp"
    program.write_text(source)
    outcome = invoke("run", str(program))
    assert outcome.exit_code == 2
    assert f"{program}{position}" in outcome.stderr
    assert outcome.stderr.rstrip().endswith("^")
    assert "Traceback" not in outcome.output


def test_a_missing_program_or_a_malformed_set_is_a_one_line_usage_error(scripted, tmp_path):
    missing = invoke("run", str(tmp_path / "none.sexp"))
    assert missing.exit_code == 2 and missing.stderr.startswith("error: cannot read the DSL program")
    malformed = invoke("run", str(tmp_path / "none.sexp"), "--set", "novalue")
    assert malformed.exit_code == 2
    assert "--set takes name=value (e.g. --set target=100), got 'novalue'" in malformed.stderr


@pytest.mark.parametrize("text, value", [
    ("5", 5), ("-2.5", -2.5), ("#t", True), ("#f", False), ('"quoted"', "quoted"),
    ("plain words", "plain words"), ("symbol", "symbol"), ("(list 1)", "(list 1)"), ("", ""), ('"open', '"open'),
])
def test_set_values_are_dsl_literals_or_text(text, value):
    assert dsl_value(text) == value and type(dsl_value(text)) is type(value)


def test_loops_repl_is_a_command():
    outcome = invoke("repl", "--help")
    assert outcome.exit_code == 0 and "read-eval-print loop" in outcome.stdout


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_an_example_runs_from_the_shell_with_its_set_values_and_its_warning(scripted):
    outcome = invoke("run", str(EXAMPLES / "workrail_loops.sexp"), "--set", "target=100")
    assert outcome.exit_code == 0, outcome.output
    assert "((value 128) (countdown 0) (evens 20)" in outcome.stdout
    assert "while stopped at max-iterations 3" in " ".join(outcome.stdout.split())


def test_the_coding_loop_example_writes_into_the_workspace_and_passes_its_tests(monkeypatch, tmp_path):
    (tmp_path / "test_greet.py").write_text("from greet import greet\n\ndef test_greet():\n"
                                            "    assert greet('Ada') == 'Hello, Ada!'\n")
    lm = scripted_lm([{"steps": "Write greet(name)"}, {"code": "def greet(name):\n    return f'Hello, {name}!'\n"}])
    monkeypatch.setattr(loops.lm, "resolve", lambda model: lm)
    trace = tmp_path / "trace.jsonl"
    test_command = shlex.join([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
    outcome = invoke("run", str(EXAMPLES / "coding_loop.sexp"), "--workspace", str(tmp_path), "--trace", str(trace),
                     "--set", "goal=Define greet(name)", "--set", "file=greet.py",
                     "--set", f"test-command={test_command}")
    assert outcome.exit_code == 0, outcome.output
    assert '((status "PASSED") (file "greet.py") (iterations 1))' in outcome.stdout
    assert "log: attempt 1 : Write greet(name)" in outcome.stdout
    assert "return f'Hello, {name}!'" in (tmp_path / "greet.py").read_text()
    roles = [json.loads(line)["role"] for line in trace.read_text().splitlines()]
    assert roles == ["user:plan", "user:write-code", "executor", "validator", "controller", "program"]


def test_a_program_stopped_by_its_wall_clock_exits_1_with_the_position(scripted, tmp_path):
    program = tmp_path / "spin.sexp"
    program.write_text("(define (spin n) (spin (+ n 1)))\n(spin 0)\n")
    outcome = invoke("run", str(program), "--timeout", "0.3")
    assert outcome.exit_code == 1, outcome.output
    assert f"{program}:1:18: wall-clock limit exceeded: timeout_s=0.3" in outcome.stderr
    assert outcome.stderr.rstrip().endswith("^")


def test_a_program_run_is_recorded_and_a_second_run_with_its_id_replays_it(scripted, tmp_path):
    program = tmp_path / "slogan.sexp"
    program.write_text('(defatom user:slogan (params (product string)) (instructions "A slogan for {{product}}.")\n'
                       '  (returns (slogan string)))\n(get-field (user:slogan (product product)) "slogan")\n')
    store = tmp_path / "runs.db"
    args = ["run", str(program), "--set", "product=tea", "--model", "openai/scripted", "--checkpoint", str(store),
            "--run-id", "r1"]
    first, second = invoke(*args), invoke(*args)
    assert first.exit_code == second.exit_code == 0, first.output + second.output
    assert '"Drink up"' in second.stdout
    assert [len(lm.engine.requests) for lm in scripted] == [1, 0]  # the second run replayed the call
    listed = invoke("runs", "list", str(store))
    assert "r1" in listed.stdout


def test_set_may_not_name_a_call_option(scripted, tmp_path):
    program = tmp_path / "p.sexp"
    program.write_text("1")
    outcome = invoke("run", str(program), "--set", "run_id=x")
    assert outcome.exit_code == 2 and "--set run_id=... names a program call's own option" in outcome.stderr

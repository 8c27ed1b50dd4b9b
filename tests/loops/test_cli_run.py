"""`loops run FILE.sexp` and `loops repl`: a DSL program from the shell, with --set inputs, its atoms
on --model, the trace file, and exit codes (2 for an error in the program, shown with its caret)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import loops.lm
from loops.cli import app
from loops.cli.programs import dsl_value
from tests.loops.trace_files import trace_steps
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
    steps = trace_steps(trace)
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


LOOP_WITH = """(iterative-loop (max-iterations 2) (initial-input "x") (test-command {command})
  (executor (lambda (input n) input)) (validator (lambda (command n) 0))
  (controller (lambda (attempt validation input n) {decision})))
"""


@pytest.mark.parametrize("source, error", [
    (b'(defatom a (params (*x* string)) (instructions "hi"))\n',
     ":1:21: '*x*' cannot name a parameter: it becomes a signature's field"),
    (b"(define x 1)\n(< x)\n", ":2:1: '<' expects at least 2 arguments, got 1"),
    (LOOP_WITH.format(command="123", decision="(list 'stop attempt)").encode(),
     ":1:56: test-command must be a string, the command the validator runs"),
    (LOOP_WITH.format(command='"true"', decision='(list "stop" attempt)').encode(),
     ":3:3: the controller returned (\"stop\" \"x\"): a decision starts with a symbol, not a string; write "
     "(list 'stop ...)"),
])
def test_a_program_the_docs_refuse_exits_2_with_its_position_and_the_fix(scripted, tmp_path, source, error):
    program = tmp_path / "refused.sexp"
    program.write_bytes(source)
    outcome = invoke("run", str(program))
    assert outcome.exit_code == 2, outcome.output
    assert f"{program}{error}" in outcome.stderr
    assert outcome.stderr.rstrip().endswith("^") and "Traceback" not in outcome.output


def test_an_atom_on_an_unknown_model_exits_2_with_its_position(tmp_path):
    program = tmp_path / "model.sexp"
    program.write_text('(define x 1)\n(defatom a (params (x string)) (instructions "hi") (model "bogus/x"))\n')
    outcome = invoke("run", str(program))
    assert outcome.exit_code == 2, outcome.output
    assert f"{program}:2:59: unknown model 'bogus/x': LiteLLM knows no provider for it" in outcome.stderr
    assert outcome.stderr.rstrip().endswith("^") and "Traceback" not in outcome.output


def test_a_program_that_is_not_utf8_is_a_one_line_error_with_the_position_of_the_bad_byte(scripted, tmp_path):
    program = tmp_path / "latin1.sexp"
    program.write_bytes('(define greeting "hello")\n(log-message "café")\n'.encode("latin-1"))
    outcome = invoke("run", str(program))
    assert outcome.exit_code == 2
    assert outcome.stderr == (f"error: {program}:2:18: the DSL program is not UTF-8 text (byte 0xe9 cannot be read); "
                              "save it as UTF-8\n")


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
    outcome = CliRunner().invoke(app, ["run", str(EXAMPLES / "coding_loop.sexp"), "--workspace", str(tmp_path),
                                       "--trace", str(trace), "--set", "goal=Define greet(name)", "--set",
                                       "file=greet.py", "--set", f"test-command={test_command}",
                                       "--allow-executable", sys.executable], env={"COLUMNS": "200"})
    assert outcome.exit_code == 0, outcome.output
    assert '((status "PASSED") (file "greet.py") (iterations 1))' in outcome.stdout
    assert "log: attempt 1 : Write greet(name)" in outcome.stdout
    assert "return f'Hello, {name}!'" in (tmp_path / "greet.py").read_text()
    steps = trace_steps(trace)
    assert [(step["role"], step["depth"]) for step in steps] == [
        ("user:plan", 1), ("user:write-code", 2), ("executor", 1), ("validator", 1), ("controller", 1), ("program", 0)]
    # The program's step holds every request made within it, the loop form's included, as it counts their calls.
    assert (steps[-1]["lm_calls"], steps[-1]["tokens"]) == (2, {"input": 20, "output": 10})
    # The live table shows each request once: on the row of the atom that sent it, indented within its phase.
    table = [[cell.strip() for cell in line.split("│")[1:5]] for line in outcome.stdout.splitlines()
             if line.count("│") == 7]
    assert [(row[0], row[3]) for row in table] == [
        ("user:plan", "10/5"), ("user:write-code", "10/5"), ("executor", "-"), ("validator", "-"),
        ("controller", "-"), ("program", "-")]
    indents = [len(line.split("│")[1]) - len(line.split("│")[1].lstrip()) for line in outcome.stdout.splitlines()
               if line.count("│") == 7]
    assert indents == [3, 5, 3, 3, 3, 1]


def test_a_program_stopped_by_its_wall_clock_exits_1_with_the_position(scripted, tmp_path):
    program = tmp_path / "spin.sexp"
    program.write_text("(define (spin n) (spin (+ n 1)))\n(spin 0)\n")
    outcome = invoke("run", str(program), "--timeout", "0.3")
    assert outcome.exit_code == 1, outcome.output
    # The run's deadline, set first, is the earlier of the two clocks --timeout sets.
    assert f"{program}:1:18: wall-clock limit exceeded: the run's deadline passed" in outcome.stderr
    assert outcome.stderr.rstrip().endswith("^")


def loops_run(*args: str, cwd: Path, env: dict | None = None, timeout: float = 120):
    """`loops run ...` as a user types it: a real process of this interpreter, offline."""
    environment = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})}
    return subprocess.run([sys.executable, "-m", "loops", "run", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_a_shell_command_under_loops_run_timeout_is_stopped_at_the_deadline_and_exits_1(tmp_path):
    program = tmp_path / "sleep.sexp"
    program.write_text('(define started "now")\n(system:execute_shell_command (command "sleep 25"))\n')
    started = time.monotonic()
    outcome = loops_run(str(program), "--timeout", "3", "--allow-shell", cwd=tmp_path)
    seconds = time.monotonic() - started

    assert outcome.returncode == 1, outcome.stderr
    assert seconds < 15  # 3 s of run, the rest is the interpreter starting (imports) on a loaded machine
    assert (f"{program}:2:1: wall-clock limit exceeded while system:execute_shell_command ran 'sleep 25': "
            "the run's deadline passed") in outcome.stderr


@pytest.mark.slow
def test_the_shell_tool_is_granted_only_by_loops_run_allow_shell_and_never_sees_api_keys(tmp_path):
    program = tmp_path / "env.sexp"
    program.write_text('(define shown (system:execute_shell_command (command "env")))\n(get-field shown "stdout")\n')
    secret = {"OPENAI_API_KEY": "sk-test-never-shown"}

    refused = loops_run(str(program), cwd=tmp_path, env=secret)
    granted = loops_run(str(program), "--allow-shell", cwd=tmp_path, env=secret)
    listed = loops_run(str(program), "--allow-executable", "ls", cwd=tmp_path, env=secret)

    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f"{program}:1:16: the shell tool 'system:execute_shell_command' is not granted" in refused.stderr
    assert "loops run --allow-shell" in refused.stderr
    assert granted.returncode == 0, granted.stderr
    assert "PATH=" in granted.stdout and "sk-test-never-shown" not in granted.stdout + granted.stderr
    assert listed.returncode == 2 and "the shell tool may run only ls; 'env' is not among them" in listed.stderr


# `loops run FILE` in a process whose address space is capped a little above what it holds once started
# (`ulimit -v`, measured rather than guessed: the imports' size varies).
MEMORY_RUN = """
import resource, sys
from loops.cli import main
size = int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + 400 * 2**20, resource.RLIM_INFINITY))
sys.argv = ['loops', 'run', sys.argv[1]]
main()
"""


@pytest.mark.slow
def test_a_program_out_of_memory_under_a_ulimit_ends_with_a_positioned_limit_error_and_exit_1(tmp_path):
    # Every string is under the size cap (8 MB); keeping a thousand of them is not.
    program = tmp_path / "grow.sexp"
    program.write_text('(define big "12345678")\n(loop 20 (set! big (string-append big big)))\n'
                       "(define kept '())\n(loop 1000 (set! kept (cons (string-append big \"!\") kept)))\n")
    run = subprocess.run([sys.executable, "-c", MEMORY_RUN, str(program)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})

    assert run.returncode == 1, run.stderr
    assert f"{program}:4:29: out of memory" in run.stderr and "Traceback" not in run.stderr
    assert run.stderr.rstrip().endswith("^")

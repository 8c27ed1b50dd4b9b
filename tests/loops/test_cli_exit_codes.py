"""The `loops` command's exit codes: 0 success, 1 no success, 2 usage or configuration error (one line
on stderr), 3 the run failed. Scripted LMs, a loopback fake of the OpenAI API, real test commands."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import loops
import loops.lm
from loops.cli import app
from loops.errors import a_or_an
from tests.loops.fake_openai import fake_openai, faulty_openai
from tests.loops.trace_files import trace_steps
from tests.scripted import calls, scripted_lm

GOOD = "def add(a, b):\n    return a + b\n"
BAD = "def add(a, b):\n    return a - b\n"
CHECK_ADD = shlex.join([sys.executable, "-c", "from solution import add; assert add(2, 3) == 5"])


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def assert_one_line_error(outcome, *parts: str) -> None:
    assert outcome.exit_code == 2, outcome.output
    lines = outcome.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), outcome.stderr
    for part in parts:
        assert part in lines[0]
    assert "Traceback" not in outcome.output


@pytest.fixture
def scripted(monkeypatch):
    """Makes `--model` resolve to a scripted LM; `scripted.lms` holds the LMs handed out. (Give a
    `--model` other than `local`, whose adapter expects JSON, for answers in ChatAdapter's format.)"""

    class Scripted:
        script: list = []
        lms: list = []

    def resolve(model):
        lm = scripted_lm(list(Scripted.script))
        Scripted.lms.append(lm)
        return lm

    monkeypatch.setattr(loops.lm, "resolve", resolve)
    Scripted.lms = []
    return Scripted


# --- 2: usage and configuration errors, before any LM call --------------------------------------


@pytest.mark.parametrize(("args", "parts"), [
    (["refine", "x", "--timeout", "-5"], ["error: --timeout must be a positive number of seconds, got -5"]),
    (["direct", "x", "--timeout", "0"], ["--timeout must be a positive number of seconds, got 0"]),
    (["refine", "x", "--timeout", "nan"], ["--timeout must be a positive number of seconds, got nan"]),
    (["refine", "x", "--timeout", "soon"], ["'--timeout'"]),
    (["fix", "x", "-t", "true", "--policy", "bogus"], ["'bogus' is not one of 'repair', 'fresh', 'auto'"]),
    (["fix", "x"], ["Missing option '--test-command'"]),
    (["refine", "x", "--max-iterations", "5000"], ["'--max-iterations'"]),
    (["fix", "x", "-t", "no-such-test-tool -q"], ["executable 'no-such-test-tool' not found on PATH",
                                                  "'no-such-test-tool -q'", "give its full path"]),
    (["fix", "x", "-t", "./run_tests.sh"], ["executable './run_tests.sh' does not exist"]),
    (["refine", "x", "--trace", "{tmp}/missing/trace.jsonl"], ["--trace '{tmp}/missing/trace.jsonl' cannot be written",
                                                               "No such file or directory"]),
    (["direct", "x", "--trace", "{tmp}"], ["--trace '{tmp}' cannot be written"]),
    (["bogus"], ["No such command 'bogus'"]),
    # A byte that is not UTF-8 in an argument reaches Python as a lone surrogate (os.fsdecode, as argv is decoded).
    (["refine", os.fsdecode(b"A haiku \xff")], ["error: requirements is not UTF-8 text: it holds the byte 0xff "
                                                "(not UTF-8) at character 9"]),
    (["direct", "x", "--checkpoint", "{tmp}/runs.db", "--run-id", os.fsdecode(b"r\xff")], [
        "error: run_id must be a non-empty str of UTF-8 text, got 'r\\udcff' (it holds the byte 0xff (not UTF-8) at "
        "character 2)"]),
    (["fix", "x", "-t", "python -c 'pass", "--target-file", "a.py"], [
        "cannot split the test command \"python -c 'pass\""]),
])
def test_usage_errors_exit_2_with_one_line_before_any_lm_call(scripted, tmp_path, args, parts):
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]

    outcome = invoke(*args, "--workspace", str(tmp_path)) if args[0] == "fix" else invoke(*args)

    assert_one_line_error(outcome, *(part.replace("{tmp}", str(tmp_path)) for part in parts))
    assert sum(calls(lm) for lm in scripted.lms) == 0
    assert outcome.stdout == "", "nothing started"


def test_an_unknown_model_exits_2_before_any_lm_call():
    outcome = invoke("refine", "x", "--model", "nonexistent")

    assert_one_line_error(outcome, "unknown model 'nonexistent'",
                          "use 'local' (the embedded model) or a LiteLLM model string such as 'openai/gpt-4o-mini'")


PYTEST = shlex.join([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"])


@pytest.mark.parametrize(("test_command", "workspace", "parts"), [
    (f"{PYTEST} test_nope.py", "ws", ["would run no tests: it names 'test_nope.py', which is not in",
                                      "(pytest: file or directory not found)"]),
    (PYTEST, "nonexistent/dir", ["would run no tests: the workspace", "nonexistent/dir' holds no files",
                                 "(pytest: no tests ran)"]),
])
def test_a_test_command_that_finds_no_tests_exits_2_before_any_lm_call(scripted, tmp_path, test_command, workspace,
                                                                       parts):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "test_add.py").write_text("from solution import add\n\n\ndef test_add():\n"
                                                 "    assert add(1, 2) == 3\n")

    outcome = invoke("fix", "Write add", "-t", test_command, "--workspace", str(tmp_path / workspace))

    assert_one_line_error(outcome, *parts)
    assert sum(calls(lm) for lm in scripted.lms) == 0


def test_a_test_command_that_ran_no_tests_stops_the_run_with_exit_2(scripted, tmp_path):
    # A test file with no test in it: only running pytest tells.
    (tmp_path / "test_add.py").write_text("from solution import add\n")
    scripted.script = [GOOD]

    outcome = invoke("fix", "Write add", "-t", PYTEST, "--workspace", str(tmp_path), "--samples", "1")

    assert_one_line_error(outcome, "ran no tests in", "pytest collected no tests (no tests ran, exit code 5)",
                          "fix the test command's files or options, or the workspace")
    assert sum(calls(lm) for lm in scripted.lms) == 1
    assert "tests still fail" not in outcome.output


def test_a_configuration_error_found_when_the_run_starts_exits_2(scripted, tmp_path):
    outcome = invoke("fix", "x", "-t", CHECK_ADD, "--workspace", str(tmp_path), "--target-file", "../outside.py")

    assert_one_line_error(outcome, "'../outside.py'", "escapes the workspace root")
    assert sum(calls(lm) for lm in scripted.lms) == 0
    assert not (tmp_path.parent / "outside.py").exists()


@pytest.mark.parametrize(("saved", "command", "belongs_to"), [
    ("CreatorCriticIterator", ["fix", "x", "-t", CHECK_ADD], "refine"),
    ("DirectorExecutorEvaluatorController", ["fix", "x", "-t", CHECK_ADD, "--samples", "2"], "direct"),
    ("ExecuteValidateController", ["refine", "x"], "fix"),
    ("CreatorCriticIterator", ["direct", "x"], "refine"),
])
def test_a_saved_program_of_another_kind_exits_2_in_one_line(scripted, tmp_path, saved, command, belongs_to):
    path = tmp_path / "saved.json"
    getattr(loops, saved)().save(path)

    outcome = invoke(*command, "--program", str(path))

    assert_one_line_error(outcome, f"--program {str(path)!r} is {a_or_an(saved)}", f"give it to `loops {belongs_to}`")
    assert sum(calls(lm) for lm in scripted.lms) == 0


def short_enough(requirements, draft, iteration):
    return len(draft) < 80


def test_a_saved_program_with_a_python_phase_says_what_a_command_user_can_do(scripted, tmp_path):
    path = tmp_path / "saved.json"
    loops.CreatorCriticIterator(critic=short_enough).save(path)

    outcome = invoke("refine", "x", "--program", str(path))

    assert_one_line_error(outcome, f"--program {str(path)!r} was saved with critic=",
                          "short_enough, a Python object that neither the file nor the command line can hold: run it "
                          "from Python (loops.load(path, critic=...)), or give the role to a person (--human critic)")
    with_a_person = invoke("refine", "x", "--program", str(path), "--human", "critic")
    assert "was saved with" not in with_a_person.stderr and "nobody can answer here" in with_a_person.stderr


@pytest.mark.parametrize("args", [["refine", ""], ["run", "examples/workrail_loops.sexp"]])
def test_an_error_found_as_the_run_starts_is_printed_alone(scripted, args):
    # No empty table of role calls above it: nothing is drawn before the first role call.
    outcome = invoke(*args)

    assert outcome.exit_code == 2, outcome.output
    assert outcome.stdout == ""
    assert "requirements must be a non-empty str" in outcome.stderr or "unbound name 'target'" in outcome.stderr


# --- 0, 1 and 3: how the run ended --------------------------------------------------------------


def test_fix_exits_0_when_the_tests_pass(scripted, tmp_path):
    scripted.script = [GOOD]

    outcome = invoke("fix", "Write add(a, b).", "-t", CHECK_ADD, "--workspace", str(tmp_path))

    assert outcome.exit_code == 0, outcome.output
    assert "tests pass" in outcome.stdout and (tmp_path / "solution.py").read_text() == GOOD


def test_fix_writes_the_module_the_tests_import_and_says_so_first(scripted, tmp_path):
    (tmp_path / "test_mul.py").write_text("from mul import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n")
    scripted.script = ["def mul(a, b):\n    return a * b\n"]

    outcome = invoke("fix", "Write mul(a, b) that returns the product.", "--workspace", str(tmp_path),
                     "-t", shlex.join([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mul.py"]))

    assert outcome.exit_code == 0, outcome.output
    assert outcome.stdout.startswith("the tests import mul: writing mul.py (--target-file chooses another)")
    assert (tmp_path / "mul.py").read_text() == "def mul(a, b):\n    return a * b\n"
    assert not (tmp_path / "solution.py").exists()


@pytest.mark.parametrize(("code", "exit_code", "title", "reason"), [
    ("def add(a, b):\n    return a + b\n", 0, "tests pass: 2 passed, 0 failed", "stopped (the tests pass)"),
    ("def add(a, b):\n    return a * b\n", 1, "tests still fail: 1 passed, 1 failed", "max_iterations"),
])
def test_fix_says_how_many_tests_passed_and_why_it_stopped(scripted, tmp_path, code, exit_code, title, reason):
    (tmp_path / "test_add.py").write_text("from add import add\n\n\ndef test_one():\n    assert add(2, 2) == 4\n\n\n"
                                          "def test_two():\n    assert add(2, 3) == 5\n")
    scripted.script = [code]

    outcome = invoke("fix", "Write add(a, b).", "-t", PYTEST, "--workspace", str(tmp_path), "--samples", "1",
                     "--max-iterations", "1")

    assert outcome.exit_code == exit_code, outcome.output
    assert title in outcome.stdout and f"stop reason: {reason}" in outcome.stdout


def test_a_candidate_that_repeats_earlier_code_says_so_in_its_row(scripted, tmp_path):
    # No validator row follows a repeated candidate: its own row says why.
    scripted.script = [BAD, BAD]

    outcome = CliRunner().invoke(app, ["fix", "Write add(a, b).", "-t", CHECK_ADD, "--workspace", str(tmp_path),
                                       "--samples", "2", "--max-iterations", "1"], env={"COLUMNS": "200"})

    assert outcome.exit_code == 1, outcome.output
    row = next(line for line in outcome.stdout.splitlines() if "executor.2" in line)
    assert "ok; this code was tried before: not validated again" in row


def test_fix_exits_1_when_the_tests_still_fail(scripted, tmp_path):
    scripted.script = [BAD]

    outcome = invoke("fix", "Write add(a, b).", "-t", CHECK_ADD, "--workspace", str(tmp_path),
                     "--max-iterations", "1")

    assert outcome.exit_code == 1, outcome.output
    assert "tests still fail" in outcome.stdout and "stop reason: max_iterations" in outcome.stdout
    assert outcome.stderr == ""


def test_fix_exits_3_when_the_run_fails(scripted, tmp_path):
    scripted.script = [RuntimeError("the model server crashed")]

    outcome = invoke("fix", "Write add(a, b).", "-t", CHECK_ADD, "--workspace", str(tmp_path))

    assert outcome.exit_code == 3, outcome.output
    assert "stop reason: error" in outcome.stdout and "the model server crashed" in outcome.stdout


def critic_answer(approved: bool) -> dict:
    verdict = {"accuracy_passed": approved, "completeness_passed": approved, "quality_passed": approved}
    return {"reasoning": "Short.", "draft": "A draft.", **verdict, "feedback": "" if approved else "Longer.",
            "approved": approved}


@pytest.mark.parametrize(("approved", "exit_code", "title"), [(True, 0, "(approved)"), (False, 1, "(not approved)")])
def test_refine_exits_by_the_critics_verdict(scripted, approved, exit_code, title):
    scripted.script = [critic_answer(approved)] * 2  # the creator's answer and the critic's

    outcome = invoke("refine", "Write one sentence.", "--max-iterations", "1", "--model", "scripted/test")

    assert outcome.exit_code == exit_code, outcome.output
    assert f"final draft {title}" in outcome.stdout


@pytest.mark.parametrize(("spec", "part"), [
    ("max-wordz=40", "error: check 'max-wordz=40': unknown check 'max-wordz'; did you mean max-words?"),
    ("max-words=forty", "error: check 'max-words=forty': 'forty' is not N (write it as max-words=N)"),
    ("json=yes", "error: check 'json=yes': write it as json"),
    ("words=9..3", "Count min 9 is above max 3"),
])
@pytest.mark.parametrize("command", ["refine", "direct"])
def test_a_bad_check_spec_exits_2_in_one_line_before_any_lm_call(scripted, command, spec, part):
    outcome = invoke(command, "Write one sentence.", "--check", "include=tea", "--check", spec,
                     "--model", "scripted/test")

    assert_one_line_error(outcome, part)
    assert scripted.lms == [] or calls(scripted.lms[0]) == 0


def test_critic_checks_without_a_check_exits_2_before_any_lm_call(scripted):
    outcome = invoke("refine", "Write one sentence.", "--critic", "checks", "--model", "scripted/test")

    assert_one_line_error(outcome, "critic='checks' approves a draft when every check holds, and no checks were given")
    assert all(calls(lm) == 0 for lm in scripted.lms)


def test_refine_with_checks_shows_which_held_and_exits_by_them(scripted, tmp_path):
    scripted.script = [critic_answer(True)] * 4  # the creator's drafts ("A draft."), the critic approving each
    trace = tmp_path / "trace.jsonl"

    outcome = invoke("refine", "Write one sentence.", "--check", "include=draft", "--check", "max-words=1",
                     "--max-iterations", "1", "--model", "scripted/test", "--trace", str(trace))

    assert outcome.exit_code == 1, outcome.output  # the critic approved; a check did not hold
    assert "final draft (not approved)" in outcome.stdout
    assert "│ checks  │         1 │" in outcome.stdout and "1/2 checks: has 2" in outcome.stdout  # the live table
    steps = trace_steps(trace)
    assert [step["role"] for step in steps] == ["creator", "checks", "critic"]
    assert steps[1]["outputs"]["held_rules"] == ["Include the word 'draft'."]


def test_direct_exits_0_when_the_evaluator_passes_it(scripted):
    scripted.script = [{"plan": "Do it.", "result": "Done.", "status": "PASS", "feedback": "", "action": "stop",
                        "next_input": ""}] * 4

    outcome = invoke("direct", "Three names for a cat", "--max-iterations", "1", "--model", "scripted/test")

    assert outcome.exit_code == 0, outcome.output
    assert "passed" in outcome.stdout and "not passed" not in outcome.stdout
    assert "stop reason: stopped (the evaluator passed)" in outcome.stdout


# --- a hosted model behind a loopback fake of the OpenAI API -------------------------------------



def test_a_hosted_model_that_never_answers_in_shape_exits_3(monkeypatch):
    with fake_openai(monkeypatch) as server:
        server.content = "I will not answer in your format."
        # A prompt no other test sends: DSPy caches a hosted model's answers on disk.
        outcome = invoke("refine", "Exit code 3 please.", "--model", "openai/whatever", "--max-iterations", "1")

    assert outcome.exit_code == 3, outcome.output
    assert "stop reason: error" in outcome.stdout and "could not be parsed" in outcome.stdout
    # ChatAdapter, its JSON fallback, then both once more at a little temperature: one request each, as
    # DSPy's own retries are off (num_retries=0) under the loop's.
    assert server.requests == 4


def test_a_rejected_api_key_exits_2_with_one_line(monkeypatch):
    with fake_openai(monkeypatch) as server:
        server.status = 401
        outcome = invoke("refine", "Exit code 2 please.", "--model", "openai/whatever")

    assert_one_line_error(outcome, "the LM refused the request", "Incorrect API key provided")
    assert server.requests == 1, "a rejected key is not retried"


# --- 130: interrupted (Ctrl-C), in a process of its own ---------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def started(arguments: list[str], cwd: Path) -> subprocess.Popen:
    """`loops ...` as a user runs it: its own process, and Ctrl-C reaching it as at a terminal (a suite started in
    the background ignores SIGINT, which its children would inherit; a handled signal is reset in a child)."""
    ours = signal.getsignal(signal.SIGINT)
    if ours is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen([sys.executable, "-m", "loops", *arguments], cwd=cwd, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    finally:
        signal.signal(signal.SIGINT, ours)


def interrupted_at(server, tenant: str, request: int, process: subprocess.Popen) -> tuple[str, str]:
    """Ctrl-C to `process` once the server has received its `request`-th request (which hangs), and its output."""
    waited = time.monotonic() + 120
    while server.received[tenant] < request:
        assert process.poll() is None and time.monotonic() < waited, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    return process.communicate(timeout=60)


DSL_PROGRAM = """(defatom user:draft (params (topic string)) (instructions "A line about {{topic}}.")
  (returns (line string)))
(defatom user:polish (params (line string)) (instructions "Polish {{line}}.") (returns (polished string)))
(user:polish (line (get-field (user:draft (topic "rain")) "line")))
"""


@pytest.mark.slow
@pytest.mark.parametrize("command", [["refine", "A haiku about tea", "--max-iterations", "1"],
                                     ["run", "two_atoms.sexp"]])
def test_ctrl_c_says_what_is_kept_and_the_command_that_resumes_and_the_command_resumes(tmp_path, command):
    (tmp_path / "two_atoms.sexp").write_text(DSL_PROGRAM)
    with faulty_openai() as server:
        server.faults[("t", 2)] = "hang"  # the second role call's request: the first one finished and is recorded
        model = ["--model", "openai/smollm2", "--api-base", server.base_url("t")]
        process = started([*command, *model, "--checkpoint", "runs.db", "--trace", "trace.jsonl"], tmp_path)
        _, stderr = interrupted_at(server, "t", 2, process)

        assert process.returncode == 130, stderr
        said = re.fullmatch(r"interrupted: the role calls that finished are kept in runs\.db, run '(run-[0-9-]+)'; "
                            r"`(loops .+)` resumes it without repeating them; trace\.jsonl holds the role calls that "
                            r"finished", stderr.splitlines()[-1])
        assert said, stderr
        run_id, resume = said.groups()
        assert shlex.split(resume) == ["loops", *command, *model, "--checkpoint", "runs.db", "--trace",
                                       "trace.jsonl", "--run-id", run_id]
        assert len((tmp_path / "trace.jsonl").read_text().splitlines()) == 1, "the role call that finished"

        resumed = subprocess.run([sys.executable, "-m", *shlex.split(resume)], cwd=tmp_path, capture_output=True,
                                 text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
        assert resumed.returncode in (0, 1), resumed.stderr
        sent = server.received["t"] - 2
    calls = re.search(r"LM calls: (\d+) \(\+1 replayed\)", resumed.stdout)
    assert calls and int(calls.group(1)) == sent >= 1, resumed.stdout  # the call that had finished: from its record


@pytest.mark.slow
def test_ctrl_c_without_a_checkpoint_says_nothing_is_kept_to_resume_from(tmp_path):
    with faulty_openai() as server:
        server.faults[("t", 1)] = "hang"
        process = started(["fix", "Write add(a, b)", "-t", CHECK_ADD, "--workspace", "ws", "--model", "openai/smollm2",
                           "--api-base", server.base_url("t")], tmp_path)
        _, stderr = interrupted_at(server, "t", 1, process)

    assert process.returncode == 130, stderr
    assert stderr.splitlines()[-1] == ("interrupted: nothing is kept to resume from (no --checkpoint FILE, which an "
                                       "interrupted run resumes from)")
    assert "Traceback" not in stderr


# --- help -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("columns", "width"), [(None, 100), ("72", 72)])
def test_help_into_a_pipe_is_plain_text_at_a_width_it_can_hold(columns, width):
    # Not a terminal: no boxes squeezed to rich's fallback of 80 columns; 100 columns, or COLUMNS.
    environment = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "TERMINAL_WIDTH")}
    if columns:
        environment["COLUMNS"] = columns

    script = Path(sys.executable).with_name("loops")  # the command as installed, as a user types it
    command = [str(script)] if script.exists() else [sys.executable, "-m", "loops"]
    shown = subprocess.run([*command, "fix", "--help"], capture_output=True, text=True, env=environment, timeout=120)

    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].endswith("loops fix [OPTIONS] TASK") and "╭" not in shown.stdout
    assert max(map(len, lines)) <= width
    assert any(line.strip().startswith("--target-file <str>") for line in lines)


@pytest.mark.parametrize(("command", "usage"), [
    (["refine"], "refine [OPTIONS] REQUIREMENTS\n"),
    (["fix"], "fix [OPTIONS] TASK\n"),
    (["runs", "show"], "runs show [OPTIONS] FILE RUN_ID\n"),
])
def test_a_usage_line_names_the_arguments_as_the_help_does(command, usage):
    # Not typer's {requirements}, which reads as a placeholder to type as it is.
    assert invoke(*command, "--help").output.startswith(f"Usage: root {usage}")

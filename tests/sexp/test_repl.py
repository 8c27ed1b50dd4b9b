"""The REPL's core: state kept between inputs, multi-line input until the forms balance, errors with
their position and caret, then the session goes on."""

from __future__ import annotations

import subprocess
import sys

from loops.sexp.repl import Session, _history, main
from tests.scripted import scripted_lm


def outputs(*lines: str) -> list[str]:
    written: list[str] = []
    Session().run(lines, written.append)
    return written


def test_definitions_persist_between_inputs_and_multi_line_input_waits_for_balance():
    assert outputs("(define (square x)", "  (* x x))", "(square 12)") == ["square", "144"]


def test_a_syntax_error_shows_its_position_and_caret_and_the_session_goes_on():
    assert outputs("(define x 1)", "(if)", "(+ x 1)") == [
        "x", "<input 2>:1:1: malformed if: expected (if test then [else])\n    (if)\n    ^", "2"]


def test_an_unbound_name_points_into_the_input_that_used_it():
    assert outputs("(+ 1", "   missing)") == ["<input 1>:2:4: unbound name 'missing'\n       missing)\n       ^"]


def test_logs_and_warnings_come_before_the_value():
    assert outputs('(log-message "hello")', "(while #t :max-iterations 2 1)") == [
        'log: hello\n"hello"',
        "warning: <input 2>:1:1: while stopped at max-iterations 2 with more to do; its value is the last body's\n1"]


def test_exit_ends_the_session_and_blank_lines_print_nothing():
    assert outputs("", "(define y 2)", "(exit)", "y") == ["y"]


def test_a_library_error_is_reported_and_the_session_goes_on():
    session = Session(tools={"boom": lambda: (_ for _ in ()).throw(ValueError("bad"))})
    written: list[str] = []
    session.run(["(boom)", "(+ 1 1)"], written.append)
    assert written[0].startswith("<input 1>:1:1: tool 'boom' raised ValueError: bad") or "ValueError: bad" in written[0]
    assert written[1] == "2"


def run_terminal(text: str, history_file, capsys, model=None) -> list[str]:
    """`loops repl`'s prompt_toolkit loop on a pipe instead of a terminal: what it printed, by line."""
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    with create_pipe_input() as pipe:
        pipe.send_text(text)
        main(model=model, history_file=history_file, terminal_input=pipe, terminal_output=DummyOutput())
    return capsys.readouterr().out.splitlines()


def test_the_terminal_loop_reads_multi_line_input_keeps_state_and_records_history(tmp_path, capsys):
    history = tmp_path / "history"
    printed = run_terminal('(define (square x)\n  (* x x))\n(if)\n(square 12)\n(exit)\n(square 2)\n', history, capsys)
    assert printed[1:] == ["square", "<input 2>:1:1: malformed if: expected (if test then [else])", "    (if)",
                           "    ^", "144"]
    assert "(square 12)" in history.read_text() and "  (* x x))" in history.read_text()


def test_the_terminal_loop_ends_at_end_of_input_and_runs_atoms_on_the_model(tmp_path, capsys):
    lm = scripted_lm([{"slogan": "Drink up"}])
    source = ('(defatom user:slogan (params (product string)) (instructions "A slogan for {{product}}.")\n'
              '  (returns (slogan string)))\n(get-field (user:slogan (product "a bottle")) "slogan")\n')
    assert run_terminal(source + "\x04", tmp_path / "history", capsys, model=lm)[1:] == ["user:slogan", '"Drink up"']
    assert len(lm.engine.requests) == 1


def test_history_stays_in_memory_when_its_file_cannot_be_written(tmp_path):
    from prompt_toolkit.history import FileHistory, InMemoryHistory

    assert isinstance(_history(tmp_path / "missing-directory" / "history"), InMemoryHistory)
    assert isinstance(_history(tmp_path / "history"), FileHistory)


def test_loops_repl_on_piped_input_reads_plain_lines_and_prints_only_the_outputs():
    # No line editor on a pipe: no prompts echoed among the outputs, no "Input is not a terminal" warning.
    shown = subprocess.run([sys.executable, "-m", "loops", "repl"], input="(define x 2)\n(* x\n 21)\n(exit)\n(+ 1 1)\n",
                           capture_output=True, text=True, timeout=120, check=False)

    assert (shown.returncode, shown.stdout, shown.stderr) == (0, "x\n42\n", "")

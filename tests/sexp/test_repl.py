"""The REPL's core: state kept between inputs, multi-line input until the forms balance, errors with
their position and caret, then the session goes on."""

from __future__ import annotations

from loops.sexp.repl import Session


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

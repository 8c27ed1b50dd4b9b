"""The `%%sexp` cell magic, in IPython's own InteractiveShell with scripted LMs."""

import dspy
import pytest

from loops.errors import ConfigurationError
from loops.running.runtime import LoopResult
from loops.sexp import DslError, UnboundName
from tests.scripted import calls, scripted_lm

interactiveshell = pytest.importorskip("IPython.core.interactiveshell")

POEM = '''
(defatom user:poem (params (topic string)) (instructions "One line about {{topic}}.") (returns (line string)))
(get-field (user:poem (topic topic)) "line")'''


@pytest.fixture
def shell():
    """A fresh shell with the extension loaded: each test gets its own kernel session."""
    interactiveshell.InteractiveShell.clear_instance()
    shell = interactiveshell.InteractiveShell.instance()
    shell.run_line_magic("load_ext", "loops.sexp")
    yield shell
    interactiveshell.InteractiveShell.clear_instance()


def cell(shell, source, options=""):
    return shell.run_cell_magic("sexp", options, source)


def test_a_cell_returns_the_value_of_its_last_form(shell):
    assert cell(shell, "(define (sq x) (* x x)) (sq 4)") == 16


def test_definitions_persist_between_cells(shell):
    cell(shell, "(define (sq x) (* x x))")

    assert cell(shell, "(map sq (list 1 2 3))") == (1, 4, 9)


def test_reset_forgets_earlier_definitions(shell):
    cell(shell, "(define seen 1)")

    result = shell.run_cell("%%sexp --reset\nseen")

    assert isinstance(result.error_in_exec, UnboundName)


def test_in_reads_python_variables_and_out_writes_one(shell):
    shell.user_ns.update(words=["a", "b"], count=2)

    shown = cell(shell, "(list (length words) (+ count 1))", "--in words count --out answer")

    assert shown is None
    assert shell.user_ns["answer"] == (2, 3)


def test_an_unknown_input_variable_is_named_with_the_fix(shell):
    result = shell.run_cell("%%sexp --in nowhere\n1")

    assert isinstance(result.error_in_exec, ConfigurationError)
    assert str(result.error_in_exec) == ("--in nowhere: no such variable in the notebook; assign it in a Python cell "
                                         "first, or drop it from --in")


def test_model_names_a_variable_holding_an_lm_and_run_keeps_the_cells_run(shell):
    lm = scripted_lm([{"line": "rain taps the roof"}])
    shell.user_ns.update(lm=lm, topic="rain")

    cell(shell, POEM, "--model lm --in topic --out line --run poem_run")

    run = shell.user_ns["poem_run"]
    assert shell.user_ns["line"] == "rain taps the roof" == run.final
    assert isinstance(run, LoopResult) and run.success and run.stop_reason == "completed"
    assert [step.role for step in run.trace] == ["user:poem", "program"]
    assert run.lm_calls == 1 == calls(lm)
    assert run.histories["user:poem"].messages == [{"topic": "rain", "line": "rain taps the roof"}]


def test_without_model_a_cell_uses_the_kernels_configured_lm(shell):
    lm = scripted_lm([{"line": "snow"}])
    shell.user_ns["topic"] = "winter"

    with dspy.context(lm=lm):
        assert cell(shell, POEM, "--in topic") == "snow"


def test_an_unknown_model_string_is_a_configuration_error(shell):
    result = shell.run_cell("%%sexp --model nonexistent-provider/x\n(+ 1 2)")

    assert isinstance(result.error_in_exec, ConfigurationError)
    assert "unknown model 'nonexistent-provider/x'" in str(result.error_in_exec)


def test_warnings_and_log_messages_are_printed(shell, capsys):
    cell(shell, '(log-message "hello") (while #t :max-iterations 1 1)')

    printed = capsys.readouterr().out
    assert "log: hello" in printed
    assert "warning: <cell 1>:1:23: while stopped at max-iterations 1" in printed


def test_a_dsl_error_fails_the_cell_showing_the_line_and_a_caret(shell, capsys):
    shell.run_cell("%%sexp\n(+ 1 2)")

    result = shell.run_cell('%%sexp\n(define greeting "hello")\n(+ 1 greeting)')

    error = result.error_in_exec
    assert isinstance(error, DslError)
    shown = capsys.readouterr().out
    assert "<cell 2>:2:1: '+' expects numbers, got \"hello\"\n    (+ 1 greeting)\n    ^" in shown
    # The traceback is the error's one line, not the interpreter's Python frames.
    assert error._render_traceback_() == ["DslTypeError: <cell 2>:2:1: '+' expects numbers, got \"hello\""]


def test_the_error_view_renders_html_with_the_caret(shell):
    from loops.sexp.magic import DslErrorView

    result = shell.run_cell("%%sexp\n(car 5)")

    page = DslErrorView(result.error_in_exec)._repr_html_()
    assert "&lt;cell 1&gt;:1:1" in page and "<pre>    (car 5)\n    ^</pre>" in page


def test_python_code_can_define_tools_for_the_cells(shell):
    from loops.sexp import Tool
    from loops.sexp.magic import interpreter

    interpreter().define("math:add", Tool("math:add", lambda x, y: x + y))

    assert cell(shell, "(math:add (x 2) (y 3))") == 5

import shlex
import sys

import pytest

from loops.errors import CommandNotFoundError, ConfigurationError
from loops.sexp import DslSyntaxError, DslTypeError, DslValueError, Interpreter, Tool, ToolError, WorkspaceContext


def test_a_tool_takes_named_arguments_written_as_name_value_pairs():
    calls = []

    def add(x, y, scale=1):
        calls.append((x, y, scale))
        return (x + y) * scale

    interpreter = Interpreter(tools={"math:add": add})
    assert interpreter.eval_source("(math:add (x 10) (y 5))") == 15
    assert interpreter.eval_source("(call math:add (x 1) (y 2) (scale (+ 1 2)))") == 9
    assert interpreter.eval_source("(math:add 1 (y 2))") == 3
    assert calls[:3] == [(10, 5, 1), (1, 2, 3), (1, 2, 1)]


def test_quoted_data_and_special_forms_are_positional_arguments_of_a_tool():
    interpreter = Interpreter(tools={"echo": lambda *args, **kwargs: [list(args), kwargs]})
    assert interpreter.eval_source("(echo '(1 2) (if #t 1 2) (list 3) (text \"hi\"))") == (
        ((1, 2), 1), {"list": 3, "text": "hi"},
    )


def test_tool_results_become_dsl_values():
    interpreter = Interpreter(tools={"nothing": lambda: None, "items": lambda: [1, [2, None]]})
    assert interpreter.eval_source("(list (null? (nothing)) (items))") == (True, (1, (2, ())))


def test_an_exception_in_a_tool_becomes_a_dsl_error_naming_the_form_with_the_cause_chained():
    def fail(path):
        raise OSError(f"cannot read {path}")

    interpreter = Interpreter(tools={"read-file": fail})
    with pytest.raises(ToolError) as caught:
        interpreter.eval_source('(define x 1)\n(bind text (read-file (path "a.txt")))', "tools.sexp")
    assert str(caught.value) == (
        "tools.sexp:2:12: tool 'read-file' raised OSError: cannot read a.txt\n"
        '    (bind text (read-file (path "a.txt")))\n'
        "               ^"
    )
    assert isinstance(caught.value.__cause__, OSError)


def test_a_python_callable_bound_as_a_value_is_called_positionally_and_its_errors_are_dsl_errors():
    def divide(a, b):
        return a / b

    with pytest.raises(ToolError, match="python function .*divide' raised ZeroDivisionError"):
        Interpreter().eval_source("(divide 1 0)", bindings={"divide": divide})


def test_a_loops_configuration_error_from_a_tool_propagates_as_itself_with_a_note_naming_the_form():
    def misconfigured():
        raise ConfigurationError("no LM is configured")

    with pytest.raises(ConfigurationError) as caught:
        Interpreter(tools={"ask": misconfigured}).eval_source("(ask)", "p.sexp")
    assert caught.value.__notes__ == ["raised by tool 'ask' called at p.sexp:1:1\n    (ask)\n    ^"]


def test_tools_must_be_callables():
    with pytest.raises(ConfigurationError, match="tool 'x' must be a callable"):
        Interpreter(tools={"x": 5})
    with pytest.raises(ConfigurationError, match="the context provider must be a callable"):
        Interpreter(context="files")
    assert repr(Tool("echo", print)) == "Tool('echo', <built-in function print>)"


def _command(code):
    return shlex.join([sys.executable, "-c", code])


def test_the_shell_command_tool_runs_a_real_subprocess_and_returns_a_record(tmp_path):
    (tmp_path / "marker.txt").write_text("here")
    interpreter = Interpreter(workspace=tmp_path)
    code = "import os, sys; print(sorted(os.listdir('.'))); print('oops', file=sys.stderr); sys.exit(3)"
    result = interpreter.eval_source(f"(system:execute_shell_command (command {_quoted(_command(code))}))")
    assert result == {"stdout": "['marker.txt']\n", "stderr": "oops\n", "exit_code": 3, "error": None,
                      "timed_out": False}
    assert interpreter.eval_source(
        f"(get-field (call system:execute_shell_command (command {_quoted(_command('print(1)'))})) 'stdout)"
    ) == "1\n"


def test_the_shell_command_tool_stops_a_command_at_its_timeout():
    sleep = _quoted(_command("import time; time.sleep(30)"))
    program = f"(system:execute_shell_command (command {sleep}) (timeout 0.5))"
    result = Interpreter().eval_source(program)
    assert result["timed_out"] is True and result["exit_code"] == -9 and result["error"] == "timed out after 0.5s"


def test_the_shell_command_tool_uses_no_shell_and_checks_its_arguments():
    command = _quoted(_command("print(1)") + "; echo no")
    result = Interpreter().eval_source(f"(system:execute_shell_command (command {command}))")
    assert result["exit_code"] == 0 and result["stdout"] == "1\n"
    with pytest.raises(CommandNotFoundError) as caught:
        Interpreter().eval_source('(system:execute_shell_command (command "no-such-executable-xyz"))')
    assert "called at <string>:1:1" in caught.value.__notes__[0]
    with pytest.raises(DslValueError, match="timeout must be a positive number of seconds, got 0"):
        Interpreter().eval_source('(system:execute_shell_command (command "true") (timeout 0))')
    with pytest.raises(DslTypeError, match="the command must be a string, got 5"):
        Interpreter().eval_source("(system:execute_shell_command (command 5))")


def test_the_write_file_tool_writes_inside_the_workspace_and_returns_a_record(tmp_path):
    interpreter = Interpreter(workspace=tmp_path)
    result = interpreter.eval_source('(system:write_file (path "pkg/greet.py") (content "def greet(): pass\\n"))')
    assert result == {"path": "pkg/greet.py", "chars": 18}
    assert (tmp_path / "pkg" / "greet.py").read_text() == "def greet(): pass\n"
    interpreter.eval_source('(system:write_file (path "pkg/greet.py") (content "x = 1"))')
    assert (tmp_path / "pkg" / "greet.py").read_text() == "x = 1"


@pytest.mark.parametrize("path, error, message", [
    ('"../outside.py"', DslValueError, "the path '../outside.py' leads out of the workspace"),
    ('"pkg/../../outside.py"', DslValueError, "leads out of the workspace"),
    ('"/tmp/absolute.py"', DslValueError, "the path must be relative to the workspace, got '/tmp/absolute.py'"),
    ('"."', DslValueError, "the path '.' leads out of the workspace"),
    ('""', DslTypeError, "the path must be a non-empty string"),
    ("5", DslTypeError, "the path must be a non-empty string, got 5"),
])
def test_the_write_file_tool_refuses_paths_that_leave_the_workspace(tmp_path, path, error, message):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with pytest.raises(error, match=message) as caught:
        Interpreter(workspace=workspace).eval_source(f'(system:write_file (path {path}) (content "x"))', "w.sexp")
    assert str(caught.value).startswith("w.sexp:1:1: ")
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["workspace"]


def test_the_write_file_tool_follows_no_symlink_out_of_the_workspace_and_takes_only_text(tmp_path):
    workspace, outside = tmp_path / "workspace", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (workspace / "link").symlink_to(outside)
    interpreter = Interpreter(workspace=workspace)
    with pytest.raises(DslValueError, match="leads out of the workspace"):
        interpreter.eval_source('(system:write_file (path "link/escape.py") (content "x"))')
    assert list(outside.iterdir()) == []
    with pytest.raises(DslTypeError, match="the content must be a string, got 5"):
        interpreter.eval_source('(system:write_file (path "a.py") (content 5))')


def _quoted(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def test_get_context_asks_the_provider_with_keyword_options_and_returns_a_list():
    asked = []

    def provider(**options):
        asked.append(options)
        return ["a.py", "b.py"]

    interpreter = Interpreter(context=provider)
    value = interpreter.eval_source(
        '(bind q "parser") (get_context (query (string-append q " tests")) (inputs (list (list \'task q))) '
        '(matching_strategy "metadata"))'
    )
    assert value == ("a.py", "b.py")
    assert asked == [{"query": "parser tests", "inputs": (("task", "parser"),), "matching_strategy": "metadata"}]


def test_an_exception_in_the_context_provider_becomes_a_dsl_error_naming_the_form():
    def provider(query):
        raise RuntimeError("index unavailable")

    with pytest.raises(ToolError) as caught:
        Interpreter(context=provider).eval_source('\n  (get_context (query "x"))', "ctx.sexp")
    assert str(caught.value).startswith("ctx.sexp:2:3: python function ")
    assert "raised RuntimeError: index unavailable" in str(caught.value)
    assert isinstance(caught.value.__cause__, RuntimeError)


@pytest.mark.parametrize(("program", "message"), [
    ("(get_context)", "malformed get_context: expected (get_context (query"),
    ('(get_context (history "h"))',
     "get_context has no option 'history' (its options: query inputs matching_strategy)"),
    ('(get_context (query "a") (query "b"))', "get_context option 'query' is given twice"),
    ('(get_context "query")', 'a get_context option is (name expr), e.g. (query "..."); got "query"'),
])
def test_malformed_get_context_forms_are_syntax_errors(program, message):
    with pytest.raises(DslSyntaxError) as caught:
        Interpreter(context=lambda **options: []).eval_source(program)
    assert caught.value.message.startswith(message)


def test_the_default_context_provider_finds_workspace_files_by_name_and_content(tmp_path):
    (tmp_path / "parser.py").write_text("def parse(): ...")
    (tmp_path / "notes.md").write_text("The parser handles tokens and the reader.")
    (tmp_path / "other.txt").write_text("unrelated")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "reader.py").write_text("tokens")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "parser").write_text("hidden")
    (tmp_path / "blob.bin").write_bytes(b"\0parser tokens")
    interpreter = Interpreter(workspace=tmp_path)
    found = interpreter.eval_source('(get_context (query "parser tokens"))')
    assert found == ("notes.md", "parser.py", "pkg/reader.py")
    assert interpreter.eval_source('(get_context (query "parser") (matching_strategy "metadata"))') == ("parser.py",)
    assert interpreter.eval_source('(get_context (query "reader") (inputs (list (list \'x "unrelated"))))') == (
        "notes.md", "other.txt", "pkg/reader.py",
    )
    assert interpreter.eval_source('(get_context (query "a b"))') == ()
    with pytest.raises(DslValueError, match="matching_strategy must be one of 'content', 'metadata', got 'fuzzy'"):
        interpreter.eval_source('(get_context (query "x") (matching_strategy "fuzzy"))')


def test_the_default_context_provider_caps_what_it_reads(tmp_path):
    for index in range(5):
        (tmp_path / f"match{index}.txt").write_text("word")
    (tmp_path / "big.txt").write_text("needle" * 100)
    assert WorkspaceContext(tmp_path, max_files=2)(query="match") == ["match0.txt"]
    assert WorkspaceContext(tmp_path, max_file_bytes=10)(query="needle") == []

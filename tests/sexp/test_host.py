import re
import shlex
import sys
import time

import pytest

from loops.errors import CommandNotFoundError, ConfigurationError
from loops.sexp import (
    DslSyntaxError,
    DslTypeError,
    DslValueError,
    Interpreter,
    LimitExceeded,
    Limits,
    Tool,
    ToolError,
    UnboundName,
    WorkspaceContext,
    shell_command_tool,
)
from loops.tools.validators import SAFE_ENVIRONMENT
from tests.processes import killed, unique_marker


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


def shell(**options):
    """An interpreter granted the shell tool."""
    return Interpreter(tools={SHELL: shell_command_tool()}, **options)


SHELL = "system:execute_shell_command"


def test_the_shell_command_tool_runs_a_real_subprocess_and_returns_a_record(tmp_path):
    (tmp_path / "marker.txt").write_text("here")
    interpreter = shell(workspace=tmp_path)
    code = "import os, sys; print(sorted(os.listdir('.'))); print('oops', file=sys.stderr); sys.exit(3)"
    result = interpreter.eval_source(f"(system:execute_shell_command (command {_quoted(_command(code))}))")
    assert result == {"stdout": "['marker.txt']\n", "stderr": "oops\n", "exit_code": 3, "error": None,
                      "timed_out": False, "escaped": ()}
    assert interpreter.eval_source(
        f"(get-field (call system:execute_shell_command (command {_quoted(_command('print(1)'))})) 'stdout)"
    ) == "1\n"


def test_the_shell_command_tool_stops_a_command_at_its_timeout():
    sleep = _quoted(_command("import time; time.sleep(30)"))
    program = f"(system:execute_shell_command (command {sleep}) (timeout 0.5))"
    result = shell().eval_source(program)
    assert result["timed_out"] is True and result["exit_code"] == -9 and result["error"] == "timed out after 0.5s"


def test_the_shell_command_tool_uses_no_shell_and_checks_its_arguments():
    command = _quoted(_command("print(1)") + "; echo no")
    result = shell().eval_source(f"(system:execute_shell_command (command {command}))")
    assert result["exit_code"] == 0 and result["stdout"] == "1\n"
    with pytest.raises(DslValueError, match="no-such-executable-xyz' not found") as caught:
        shell().eval_source('(system:execute_shell_command (command "no-such-executable-xyz"))')
    assert isinstance(caught.value.__cause__, CommandNotFoundError)
    with pytest.raises(DslValueError, match="timeout must be a positive number of seconds, got 0"):
        shell().eval_source('(system:execute_shell_command (command "true") (timeout 0))')
    with pytest.raises(DslTypeError, match="the command must be a string, got 5"):
        shell().eval_source("(system:execute_shell_command (command 5))")


@pytest.mark.parametrize(("command", "message"), [
    ('"echo \'x"', "cannot split the command \"echo 'x\": No closing quotation"),
    ('"no-such-executable-xyz -q"', "executable 'no-such-executable-xyz' not found"),
    ('""', "the command is empty; give the command to run"),
])
def test_a_command_the_shell_tool_cannot_run_is_an_error_at_its_position_that_speaks_of_a_command(command, message):
    program = f'(define x 1)\n  (system:execute_shell_command (command {command}))'
    with pytest.raises(DslValueError) as caught:
        shell().eval_source(program)
    shown = str(caught.value)
    assert shown.startswith(f"<string>:2:3: system:execute_shell_command: {message}"), shown
    assert shown.endswith("\n      ^") and "test command" not in shown


@pytest.mark.parametrize("program", [
    '(system:execute_shell_command (command "env"))',
    '(define (later) (call system:execute_shell_command (command "env")))',
    "(define run system:execute_shell_command)",
])
def test_a_program_that_names_the_shell_tool_without_a_grant_is_refused_before_it_runs(tmp_path, program):
    with pytest.raises(UnboundName) as caught:
        Interpreter(workspace=tmp_path).analyze(f'(system:write_file (path "ran.txt") (content "x"))\n{program}',
                                                "p.sexp")
    message = str(caught.value)
    assert message.startswith("p.sexp:2:")
    assert "the shell tool 'system:execute_shell_command' is not granted to this program" in message
    assert "loops run --allow-shell" in message and "tools={'system:execute_shell_command'" in message
    assert not (tmp_path / "ran.txt").exists()


def test_the_shell_tool_runs_with_a_minimal_environment_without_keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-programs")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-for-programs-either")
    printed = shell().eval_source('(get-field (system:execute_shell_command (command "env")) "stdout")')
    names = {line.partition("=")[0] for line in printed.splitlines()}
    assert "PATH" in names and names <= set(SAFE_ENVIRONMENT)
    assert "not-for-programs" not in printed


def test_the_shell_tool_with_an_allowlist_runs_only_those_executables(tmp_path):
    interpreter = Interpreter(workspace=tmp_path,
                              tools={SHELL: shell_command_tool(executables=[sys.executable, "true"])})
    assert interpreter.eval_source('(get-field (system:execute_shell_command (command "true")) "exit_code")') == 0
    printing = _quoted(_command("print(2)"))
    assert interpreter.eval_source(f'(get-field (system:execute_shell_command (command {printing})) "stdout")') == "2\n"
    with pytest.raises(DslValueError, match=r"the shell tool may run only .*true; 'sh' is not among them"):
        interpreter.eval_source('(system:execute_shell_command (command "sh -c \\"touch made\\""))')
    assert not (tmp_path / "made").exists()
    with pytest.raises(ConfigurationError, match="executables must be names of executables"):
        shell_command_tool(executables=[])


def test_the_shell_tool_reports_and_kills_a_process_that_escapes_its_group(tmp_path):
    marker = unique_marker()
    interpreter = shell(workspace=tmp_path)
    command = _quoted(shlex.join(["sh", "-c", f"setsid sleep {marker} >/dev/null 2>&1 & sleep 0.2"]))
    try:
        result = interpreter.eval_source(f"(system:execute_shell_command (command {command}))")
    finally:
        survivors = killed(marker)
    assert len(result["escaped"]) == 1 and marker in result["escaped"][0]
    assert any("left its process group; they were killed when it ended" in warning
               for warning in interpreter.warnings)
    assert survivors == []


def test_the_shell_tools_timeout_is_capped_to_the_time_the_program_has_left():
    started = time.monotonic()
    with pytest.raises(LimitExceeded) as caught:
        shell(limits=Limits(timeout_s=1)).eval_source(
            '(define x 1)\n(system:execute_shell_command (command "sleep 25") (timeout 60))', "s.sexp")
    assert time.monotonic() - started < 5
    assert caught.value.limit == "timeout_s"
    assert str(caught.value).startswith("s.sexp:2:1: wall-clock limit exceeded while system:execute_shell_command ran "
                                        "'sleep 25': timeout_s=1")


def test_the_write_file_tool_writes_inside_the_workspace_and_returns_a_record(tmp_path):
    interpreter = Interpreter(workspace=tmp_path)
    result = interpreter.eval_source('(system:write_file (path "pkg/greet.py") (content "def greet(): pass\\n"))')
    assert result == {"path": "pkg/greet.py", "chars": 18}
    assert (tmp_path / "pkg" / "greet.py").read_text() == "def greet(): pass\n"
    interpreter.eval_source('(system:write_file (path "pkg/greet.py") (content "x = 1"))')
    assert (tmp_path / "pkg" / "greet.py").read_text() == "x = 1"
    interpreter.eval_source('(system:write_file (path "..sol.py") (content "y = 2"))')
    assert (tmp_path / "..sol.py").read_text() == "y = 2"


@pytest.mark.parametrize("path, error, message", [
    ('"../outside.py"', DslValueError, "workspace file path '../outside.py' escapes the workspace root through '..'"),
    ('"pkg/../../outside.py"', DslValueError, "escapes the workspace root"),
    ('"/tmp/absolute.py"', DslValueError, "workspace file path '/tmp/absolute.py' is absolute"),
    ('"."', DslValueError, "workspace file path '.' is the workspace root itself; give a file's path inside it"),
    ('"pkg/"', DslValueError, "workspace file path 'pkg/' ends with a separator, so it names a directory"),
    ('""', DslTypeError, "the path must be a non-empty string"),
    ("5", DslTypeError, "the path must be a non-empty string, got 5"),
])
def test_the_write_file_tool_refuses_paths_that_leave_the_workspace(tmp_path, path, error, message):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with pytest.raises(error, match=re.escape(message)) as caught:
        Interpreter(workspace=workspace).eval_source(f'(system:write_file (path {path}) (content "x"))', "w.sexp")
    assert str(caught.value).startswith("w.sexp:1:1: ")
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["workspace"]


def test_the_write_file_tool_follows_no_symlink_out_of_the_workspace_and_takes_only_text(tmp_path):
    workspace, outside = tmp_path / "workspace", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (workspace / "link").symlink_to(outside)
    interpreter = Interpreter(workspace=workspace)
    with pytest.raises(DslValueError, match=r"escapes the workspace root .* \(through a symlink\)"):
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


def test_the_default_context_provider_stays_inside_the_workspace(tmp_path):
    workspace, outside = tmp_path / "workspace", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("password hunter2")
    (outside / "notes.txt").write_text("password list")
    (workspace / "mine.txt").write_text("password policy")
    (workspace / "inner.txt").write_text("password inside")
    (workspace / "secret-link.txt").symlink_to(outside / "secret.txt")
    (workspace / "inside-link.txt").symlink_to(workspace / "inner.txt")
    (workspace / "outside-dir").symlink_to(outside, target_is_directory=True)
    found = Interpreter(workspace=workspace).eval_source('(get_context (query "password"))')
    assert found == ("inner.txt", "inside-link.txt", "mine.txt")


def test_the_default_context_provider_caps_what_it_reads(tmp_path):
    for index in range(5):
        (tmp_path / f"match{index}.txt").write_text("word")
    (tmp_path / "big.txt").write_text("needle" * 100)
    assert WorkspaceContext(tmp_path, max_files=2)(query="match") == ["match0.txt"]
    assert WorkspaceContext(tmp_path, max_file_bytes=10)(query="needle") == []

"""Validators run real commands: no mocks of our own code."""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from loops.errors import CommandNotFoundError, ConfigurationError
from loops.validators import (
    CallableValidator,
    PytestValidator,
    ShellValidator,
    Workspace,
    parse_pytest_counts,
)
from signatures.results import ValidationResult

PY = shlex.quote(sys.executable)


def py(code: str, *args: str) -> str:
    """A portable command line running `code` with this interpreter."""
    return shlex.join([sys.executable, "-c", code, *args])


def process_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (killed, not yet reaped by init) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# --- Workspace -----------------------------------------------------------------------------------


def test_temporary_workspace_is_removed_on_close():
    workspace = Workspace()
    written = workspace.write({"pkg/mod.py": "x = 1\n", "README": "hi"})
    assert written == [workspace.path / "pkg/mod.py", workspace.path / "README"]
    assert workspace.read(["pkg/mod.py", "README"]) == {"pkg/mod.py": "x = 1\n", "README": "hi"}
    workspace.close()
    assert not workspace.path.exists()
    workspace.close()  # idempotent
    with pytest.raises(ConfigurationError, match="closed"):
        workspace.write({"a": "b"})


def test_temporary_workspace_context_manager():
    with Workspace() as workspace:
        root = workspace.path
        assert root.is_dir()
    assert not root.exists()


def test_user_directory_is_kept(tmp_path):
    target = tmp_path / "project"
    with Workspace(target) as workspace:
        workspace.write({"a.txt": "A"})
    assert (target / "a.txt").read_text() == "A"
    Workspace(str(target)).close()
    assert (target / "a.txt").exists()


def test_read_skips_missing_files(tmp_path):
    workspace = Workspace(tmp_path)
    workspace.write({"here.txt": "yes"})
    (tmp_path / "adir").mkdir()
    assert workspace.read(["here.txt", "missing.txt", "adir"]) == {"here.txt": "yes"}
    assert workspace.read("here.txt") == {"here.txt": "yes"}


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/etc/passwd", "is absolute"),
        ("../outside.txt", "escapes the workspace root"),
        ("a/../../outside.txt", "escapes the workspace root"),
        (".", "escapes the workspace root"),
        ("", "empty"),
        ("link/inside.txt", "escapes the workspace root"),
    ],
)
def test_workspace_rejects_escaping_paths(tmp_path, path, message):
    root = tmp_path / "root"
    workspace = Workspace(root)
    (root / "link").symlink_to(tmp_path)
    with pytest.raises(ConfigurationError, match=message):
        workspace.write({"fine.txt": "1", path: "2"})
    assert not (root / "fine.txt").exists(), "a bad path must write nothing"
    with pytest.raises(ConfigurationError, match=message):
        workspace.read([path])


def test_workspace_path_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigurationError, match="not a directory"):
        Workspace(tmp_path / "f")


# --- ShellValidator ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "exit_code", "stdout", "stderr"),
    [
        ("print('hello')", 0, "hello\n", ""),
        ("import sys; print('bad', file=sys.stderr); sys.exit(3)", 3, "", "bad\n"),
        ("raise SystemExit(1)", 1, "", ""),
    ],
)
def test_exit_code_and_output(code, exit_code, stdout, stderr):
    result = ShellValidator()(py(code), 1)
    assert (result.exit_code, result.stdout, result.stderr) == (exit_code, stdout, stderr)
    assert result.ok is (exit_code == 0)
    assert result.error is None and result.timed_out is False
    assert result.seconds is not None and 0 <= result.seconds < 10


def test_runs_in_the_workspace(tmp_path):
    for workspace in (Workspace(tmp_path), tmp_path, str(tmp_path)):
        result = ShellValidator(workspace=workspace)(py("import os; print(os.getcwd())"), 0)
        assert result.stdout.strip() == str(tmp_path.resolve())


def test_hanging_command_and_its_children_are_killed_at_the_timeout():
    with Workspace() as workspace:
        workspace.write(
            {
                "hang.py": (
                    "import subprocess, sys, time\n"
                    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                    "open('child.pid', 'w').write(str(child.pid))\n"
                    "print('started', flush=True)\n"
                    "time.sleep(60)\n"
                )
            }
        )
        started = time.monotonic()
        result = ShellValidator(workspace=workspace, timeout_s=1)(f"{PY} hang.py", 1)
        assert time.monotonic() - started < 5
        assert result.timed_out is True
        assert result.exit_code == -9
        assert result.error == "timed out after 1s"
        assert result.ok is False
        assert result.stdout == "started\n", "output printed before the timeout is kept"
        child_pid = int(workspace.read("child.pid")["child.pid"])
    deadline = time.monotonic() + 3
    while process_alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(child_pid), "the child of the timed-out command must be killed too"


def test_background_process_left_behind_does_not_block():
    started = time.monotonic()
    result = ShellValidator(shell=True, timeout_s=30)("sleep 30 & echo done", 0)
    assert time.monotonic() - started < 5
    assert (result.exit_code, result.stdout, result.error) == (0, "done\n", None)


def test_megabytes_of_output_are_capped_without_hanging():
    code = (
        "import sys\n"
        "sys.stderr.write('E' * 3_000_000 + '\\nERR-END\\n')\n"
        "sys.stdout.write('HEAD\\n' + 'x' * 5_000_000 + '\\nTAIL-END\\n')\n"
    )
    started = time.monotonic()
    result = ShellValidator(max_output_chars=1000, timeout_s=30)(py(code), 0)
    assert time.monotonic() - started < 10
    assert result.exit_code == 0 and result.error is None
    total_stdout = 5 + 5_000_000 + 10
    cut = total_stdout - 1000
    assert result.stdout.startswith("HEAD\nxxx")
    assert result.stdout.endswith("xxx\nTAIL-END\n")
    assert f"\n[... {cut} chars cut by loops (max_output_chars) ...]\n" in result.stdout
    head, tail = result.stdout.split(f"\n[... {cut} chars cut by loops (max_output_chars) ...]\n")
    assert (len(head), len(tail)) == (250, 750), "the tail, where failures are, gets the larger share"
    assert result.stderr.endswith("\nERR-END\n") and "chars cut" in result.stderr
    assert len(result.stderr) < 1100


def test_output_under_the_cap_is_untouched():
    result = ShellValidator(max_output_chars=100)(py("print('é' * 99, end='')"), 0)
    assert result.stdout == "é" * 99


def test_missing_executable_raises_a_clear_error():
    command = "definitely-not-a-command-xyz --flag"
    with pytest.raises(CommandNotFoundError) as caught:
        ShellValidator()(command, 0)
    message = str(caught.value)
    assert "'definitely-not-a-command-xyz'" in message and repr(command) in message
    assert isinstance(caught.value, FileNotFoundError) and isinstance(caught.value, ConfigurationError)


def test_missing_command_through_the_shell_is_exit_127():
    result = ShellValidator(shell=True)("definitely-not-a-command-xyz", 0)
    assert result.exit_code == 127
    assert "command not found" in (result.error or "")
    assert "definitely-not-a-command-xyz" in result.stderr


@pytest.mark.parametrize("command", ["", "   ", None])
def test_empty_command_is_misuse(command):
    with pytest.raises(ConfigurationError, match="empty"):
        ShellValidator()(command, 0)  # type: ignore[arg-type]


def test_shell_false_does_not_interpret_metacharacters(monkeypatch):
    monkeypatch.setenv("LOOPS_TEST_VAR", "expanded")
    command = f"{PY} -c 'import sys; print(sys.argv[1:])' a;b '$LOOPS_TEST_VAR' $LOOPS_TEST_VAR"
    result = ShellValidator()(command, 0)
    assert result.stdout == "['a;b', '$LOOPS_TEST_VAR', '$LOOPS_TEST_VAR']\n"


def test_shell_true_interprets_metacharacters():
    validator = ShellValidator(shell=True, env={"LOOPS_TEST_VAR": "expanded"})
    result = validator("echo $LOOPS_TEST_VAR; echo second | tr a-z A-Z", 0)
    assert result.stdout == "expanded\nSECOND\n"


@pytest.mark.parametrize(
    ("clean_env", "env", "expected"),
    [
        (False, None, "secret None"),
        (True, None, "None None"),
        (True, {"EXTRA": "1"}, "None 1"),
        (False, {"EXTRA": "2"}, "secret 2"),
    ],
)
def test_clean_env(monkeypatch, clean_env, env, expected):
    monkeypatch.setenv("LOOPS_SECRET", "secret")
    monkeypatch.delenv("EXTRA", raising=False)
    code = "import os; print(os.environ.get('LOOPS_SECRET'), os.environ.get('EXTRA'))"
    result = ShellValidator(clean_env=clean_env, env=env)(py(code), 0)
    assert result.stdout.strip() == expected


def test_clean_env_keeps_only_the_basics():
    # LC_CTYPE may be set by Python's own locale coercion (PEP 538) inside the child.
    code = "import os; print(sorted(k for k in os.environ if k != 'LC_CTYPE'))"
    result = ShellValidator(clean_env=True, env={"EXTRA": "1"})(py(code), 0)
    assert set(eval(result.stdout)) <= {"PATH", "HOME", "LANG", "EXTRA"}


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"timeout_s": 0}, "timeout_s"), ({"max_output_chars": -1}, "max")]
)
def test_bad_settings(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        ShellValidator(**kwargs)


# --- PytestValidator -----------------------------------------------------------------------------

SAMPLE_TESTS = """
def test_one():
    assert 1 + 1 == 2

def test_two():
    assert "a".upper() == "A"

def test_three():
    assert 2 * 2 == 5
"""


def test_pytest_counts_in_a_workspace():
    with Workspace() as workspace:
        workspace.write({"test_sample.py": SAMPLE_TESTS})
        result = PytestValidator(workspace=workspace, timeout_s=60)(None, 1)  # type: ignore[arg-type]
    assert (result.passed, result.failed, result.exit_code) == (2, 1, 1), result.stdout
    assert "test_three" in result.stdout


@pytest.mark.parametrize(
    ("output", "counts"),
    [
        ("..F\n2 passed, 1 failed in 0.05s\n", (2, 1)),
        ("=========== 1 failed, 2 passed, 1 warning in 0.12s ===========", (2, 1)),
        ("\x1b[31m1 failed\x1b[0m, \x1b[32m3 passed\x1b[0m in 0.3s", (3, 1)),
        ("5 passed in 0.01s", (5, 0)),
        ("ERROR collecting x.py\n1 error in 0.10s\n", (0, 1)),
        ("1 failed, 1 passed, 2 errors in 0.3s", (1, 3)),
        ("no tests ran in 0.01s", (0, 0)),
        ("3 passed, 1 skipped, 1 deselected in 1.00s\nsome trailing noise", (3, 0)),
        ("Traceback: ImportError: No module named pytest", (None, None)),
        ("", (None, None)),
    ],
)
def test_parse_pytest_counts(output, counts):
    assert parse_pytest_counts(output) == counts


def test_pytest_validator_runs_a_given_command_and_keeps_counts_none_without_summary():
    result = PytestValidator()(py("print('not pytest')"), 0)
    assert (result.exit_code, result.passed, result.failed) == (0, None, None)


# --- CallableValidator ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("returned", "exit_code"),
    [(True, 0), (False, 1), (0, 0), (3, 3), (ValidationResult(exit_code=2, stdout="x"), 2)],
)
def test_callable_validator_outcomes(returned, exit_code):
    calls = []

    def check(test_command, iteration):
        calls.append((test_command, iteration))
        return returned

    result = CallableValidator(check)("make test", 4)
    assert calls == [("make test", 4)]
    assert result.exit_code == exit_code and result.seconds is not None
    if isinstance(returned, ValidationResult):
        assert result.stdout == "x"


def test_callable_validator_lets_exceptions_propagate():
    def broken(test_command, iteration):
        raise RuntimeError("validator bug")

    with pytest.raises(RuntimeError, match="validator bug"):
        CallableValidator(broken)("cmd", 1)


def test_callable_validator_rejects_other_return_values():
    with pytest.raises(ConfigurationError, match="returned 'yes'"):
        CallableValidator(lambda c, i: "yes")("cmd", 1)
    with pytest.raises(ConfigurationError, match="callable"):
        CallableValidator("not callable")  # type: ignore[arg-type]


def test_rewriting_a_module_within_a_second_never_runs_its_old_bytecode(tmp_path):
    workspace = Workspace(tmp_path)
    check = ShellValidator(workspace=workspace, timeout_s=30, clean_env=True)  # bytecode writing on
    command = f"{sys.executable} -c 'import answer; raise SystemExit(answer.VALUE)'"

    (path,) = workspace.write({"answer.py": "VALUE = 3\n"})
    first = check(command)
    written = path.stat().st_mtime_ns
    workspace.write({"answer.py": "VALUE = 0\n"})  # same size...
    os.utime(path, ns=(written, written))  # ...and, as happens within a second, the same mtime
    second = check(command)

    assert (first.exit_code, second.exit_code) == (3, 0)

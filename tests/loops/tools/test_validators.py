"""Validators run real commands: no mocks of our own code."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest

from loops.errors import CommandNotFoundError, ConfigurationError
from loops.signatures.results import ValidationResult
from loops.tools.validators import (
    SAFE_ENVIRONMENT,
    CallableValidator,
    PytestValidator,
    ShellValidator,
    Workspace,
    missing_tests,
    parse_pytest_counts,
    ran_no_tests,
)
from tests.processes import alive, killed, processes_with, unique_marker

PY = shlex.quote(sys.executable)


def py(code: str, *args: str) -> str:
    """A portable command line running `code` with this interpreter."""
    return shlex.join([sys.executable, "-c", code, *args])


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
        (".", "is the workspace root itself"),
        ("", "empty"),
        ("link/inside.txt", "escapes the workspace root"),
        ("a/", "ends with a separator, so it names a directory"),
        ("fine.txt/", "ends with a separator"),
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


def tree(root: Path) -> dict[str, str | None]:
    """Every path under `root` (hidden ones too) -> its text, None for a directory."""
    return {str(path.relative_to(root)): None if path.is_dir() else path.read_text()
            for path in sorted(root.rglob("*"))}


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"first.py": "new", "notes.txt/second.py": "2"}, "'notes.txt' is a file, not a directory"),
        ({"first.py": "new", "pkg": "2"}, "'pkg' is an existing directory"),
        ({"first.py": "new", "sub/a": "1", "sub/a/b": "2"}, "'sub/a' and 'sub/a/b' conflict"),
    ],
)
def test_a_bad_later_name_writes_nothing(tmp_path, files, message):
    (tmp_path / "first.py").write_text("old")
    (tmp_path / "notes.txt").write_text("notes")
    (tmp_path / "pkg").mkdir()
    before = tree(tmp_path)

    with pytest.raises(ConfigurationError, match=message):
        Workspace(tmp_path).write(files)

    assert tree(tmp_path) == before


def test_a_failure_while_staging_removes_the_staged_files_and_new_directories(tmp_path):
    (tmp_path / "first.py").write_text("old")
    before = tree(tmp_path)

    with pytest.raises(TypeError):  # the second text is not a str: fails after the first is staged
        Workspace(tmp_path).write({"first.py": "new", "new/deep/a.py": "a", "b.py": None})  # type: ignore[dict-item]

    assert tree(tmp_path) == before


def test_write_keeps_an_existing_files_mode_and_gives_new_files_the_umask_mode(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\nexit 1\n")
    script.chmod(0o755)
    umask = os.umask(0)
    os.umask(umask)

    Workspace(tmp_path).write({"run.sh": "#!/bin/sh\nexit 0\n", "new.txt": "n"})

    assert script.stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o666 & ~umask
    assert ShellValidator(workspace=tmp_path)("./run.sh").exit_code == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["new.txt", "run.sh"], "no staged file left"


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
    while alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child_pid), "the child of the timed-out command must be killed too"


def test_background_process_left_behind_does_not_block():
    started = time.monotonic()
    result = ShellValidator(shell=True, timeout_s=30)("sleep 30 & echo done", 0)
    assert time.monotonic() - started < 5
    assert (result.exit_code, result.stdout, result.error) == (0, "done\n", None)


# Ways a test command's descendant leaves its process group and survives the command: each writes the
# escaped process's pid to PID, and the command waits for that file, so the process has left the group
# before the command ends. {sleep} is a `sleep` of a duration no other process uses, to find it by.
ESCAPES = {
    "setsid, holding the pipes": "setsid sh -c 'echo $$ > PID.tmp; mv PID.tmp PID; exec {sleep}' &",
    "setsid, pipes closed": "setsid sh -c 'echo $$ > PID.tmp; mv PID.tmp PID; exec {sleep}' >/dev/null 2>&1 &",
    "nohup setsid": "nohup setsid sh -c 'echo $$ > PID.tmp; mv PID.tmp PID; exec {sleep}' >/dev/null 2>&1 &",
    "a daemon's double fork": py("import os, sys\n"
                                 "if os.fork() == 0:\n"
                                 "    os.setsid()\n"
                                 "    if os.fork() == 0:\n"
                                 "        open('PID.tmp', 'w').write(str(os.getpid())); os.rename('PID.tmp', 'PID')\n"
                                 "        os.execvp('sh', ['sh', '-c', 'exec {sleep}'])\n"
                                 "    os._exit(0)\n") + " &",
}


@pytest.fixture
def escape(request, tmp_path):
    """A shell command fragment whose descendant escapes the command's process group (one of `ESCAPES`),
    then waits until it has; the fixture's value is (fragment, marker). Afterwards it kills any survivor
    and fails the test if there was one."""
    if shutil.which("setsid") is None or not sys.platform.startswith("linux"):
        pytest.skip("needs Linux and setsid(1)")
    marker = unique_marker()
    pid_file = str(tmp_path / "escaped.pid")
    fragment = ESCAPES[request.param].replace("{sleep}", f"sleep {marker}").replace("PID", pid_file)
    # Wait until the escaped process has become `sleep MARKER` (it writes its pid just before it execs).
    pid = shlex.quote(pid_file)
    ready = f"[ -e {pid} ] && tr '\\0' ' ' < /proc/$(cat {pid})/cmdline | grep -q '^sleep '"
    yield f"{fragment} until {ready}; do sleep 0.01; done;", marker
    assert killed(marker) == [], "an escaped process was left running"


@pytest.mark.parametrize("escape", ESCAPES, indirect=True)
def test_a_process_that_escapes_its_group_is_killed_when_the_command_ends_and_reported(escape):
    fragment, marker = escape
    started = time.monotonic()
    result = ShellValidator(shell=True, timeout_s=30)(f"{fragment} echo hi", 0)

    assert time.monotonic() - started < 5
    assert (result.exit_code, result.stdout, result.timed_out, result.error) == (0, "hi\n", False, None)
    assert len(result.escaped) == 1 and result.escaped[0].startswith("pid ") and marker in result.escaped[0]
    assert processes_with(marker) == []


@pytest.mark.parametrize("escape", ["setsid, holding the pipes", "a daemon's double fork"], indirect=True)
def test_a_process_that_escapes_a_command_that_times_out_is_killed_too(escape):
    fragment, marker = escape
    started = time.monotonic()
    result = ShellValidator(shell=True, timeout_s=1)(f"{fragment} echo hi; sleep 30", 0)

    assert time.monotonic() - started < 1 + 1.5
    assert (result.timed_out, result.exit_code, result.stdout, result.error) == (True, -9, "hi\n",
                                                                                 "timed out after 1s")
    assert len(result.escaped) == 1 and marker in result.escaped[0]
    assert processes_with(marker) == []


def test_a_command_that_leaves_nothing_behind_reports_no_escaped_process():
    result = ShellValidator(shell=True, timeout_s=30)("sleep 30 & echo done", 0)
    assert (result.exit_code, result.stdout, result.escaped) == (0, "done\n", [])


def test_output_written_just_before_exit_is_kept():
    code = "import sys; sys.stdout.write('x' * 300_000 + 'end'); sys.stderr.write('done')"
    result = ShellValidator(timeout_s=30, max_output_chars=400_000)(py(code), 0)
    assert (result.stdout, result.stderr, result.error) == ("x" * 300_000 + "end", "done", None)


@pytest.mark.parametrize(("configured", "per_call", "effective"), [(30, 0.5, "0.5"), (0.5, 30, "0.5")])
def test_a_per_call_timeout_can_only_shorten_the_configured_one(configured, per_call, effective):
    started = time.monotonic()
    result = ShellValidator(timeout_s=configured).run(py("import time; time.sleep(30)"), timeout_s=per_call)
    assert time.monotonic() - started < 3
    assert result.timed_out is True and result.error == f"timed out after {effective}s"


def test_pytest_validator_takes_the_per_call_timeout_too():
    result = PytestValidator(timeout_s=30).run(py("import time; time.sleep(30)"), timeout_s=0.3)
    assert result.timed_out is True and result.error == "timed out after 0.3s"


@pytest.mark.parametrize("timeout_s", [0, -1, float("nan"), "5", True])
def test_a_bad_per_call_timeout_is_refused(timeout_s):
    with pytest.raises(ConfigurationError, match=r"timeout_s must be a positive number of seconds or None, got"):
        ShellValidator().run(py("pass"), timeout_s=timeout_s)


def test_check_passes_for_commands_that_can_run(tmp_path):
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "run.sh").chmod(0o755)
    validator = ShellValidator(workspace=tmp_path)
    for command in (f"{PY} -m pytest", "sh -c 'exit 0'", "./run.sh --flag"):
        validator.check(command)
    ShellValidator(shell=True).check("no-such-tool | also-missing")  # the shell reports these: exit 127
    PytestValidator().check(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("no-such-test-tool -q", "executable 'no-such-test-tool' not found on PATH"),
        ("./missing.sh", "executable './missing.sh' does not exist"),
        ("bin/missing", "executable 'bin/missing' does not exist"),
        ("./plain.txt", "executable './plain.txt' is not executable"),
    ],
)
def test_check_names_a_missing_executable_and_the_fix(tmp_path, command, message):
    (tmp_path / "plain.txt").write_text("")
    with pytest.raises(CommandNotFoundError, match=message) as raised:
        ShellValidator(workspace=tmp_path).check(command)
    assert repr(command) in str(raised.value)
    assert any(fix in str(raised.value) for fix in ("give its full path", "fix the path", "chmod +x"))
    assert not any(path.name.startswith("missing") for path in tmp_path.iterdir())


def test_check_looks_up_the_path_the_command_will_run_with(tmp_path):
    (tmp_path / "mytool").write_text("#!/bin/sh\n")
    (tmp_path / "mytool").chmod(0o755)
    ShellValidator(clean_env=True, env={"PATH": str(tmp_path)}).check("mytool")
    with pytest.raises(CommandNotFoundError, match="'mytool'"):
        ShellValidator(clean_env=True, env={"PATH": str(tmp_path / "elsewhere")}).check("mytool")
    with pytest.raises(CommandNotFoundError, match="'python3'"):
        ShellValidator(clean_env=True, env={"PATH": str(tmp_path)}).check("python3 -V")


def test_check_refuses_an_empty_command():
    with pytest.raises(ConfigurationError, match="empty"):
        ShellValidator().check("  ")


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


def test_clean_env_keeps_only_the_basics(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    # LC_CTYPE may be set by Python's own locale coercion (PEP 538) inside the child.
    code = "import os; print(sorted(k for k in os.environ if k != 'LC_CTYPE'))"
    result = ShellValidator(clean_env=True, env={"EXTRA": "1"})(py(code), 0)
    assert "PATH" in eval(result.stdout) and set(eval(result.stdout)) <= {*SAFE_ENVIRONMENT, "EXTRA"}
    assert "sk-secret" not in ShellValidator(clean_env=True)("env", 0).stdout


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"timeout_s": 0}, "timeout_s"), ({"timeout_s": float("nan")}, "timeout_s"),
                            ({"max_output_chars": -1}, "max")]
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


WHAT_TO_RETURN = "return a ValidationResult, a bool (passed) or an int exit code"


def test_callable_validator_rejects_other_return_values():
    with pytest.raises(ConfigurationError, match="returned 'yes'") as raised:
        CallableValidator(lambda c, i: "yes")("cmd", 1)
    assert WHAT_TO_RETURN in str(raised.value)
    with pytest.raises(ConfigurationError, match="callable"):
        CallableValidator("not callable")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("returned", "exit_code"),
    [(True, 0), (False, 1), (0, 0), (3, 3), (ValidationResult(exit_code=2, stdout="x"), 2)],
)
async def test_async_callable_validator_outcomes(returned, exit_code):
    calls = []

    async def check(test_command, iteration):
        await asyncio.sleep(0.01)
        calls.append((test_command, iteration))
        return returned

    pending = CallableValidator(check)("make test", 4)
    assert inspect.iscoroutine(pending) and calls == [], "nothing runs until the runtime awaits it"
    result = await pending
    assert calls == [("make test", 4)]
    assert result.exit_code == exit_code and result.seconds >= 0.01


def test_async_callable_object_validator_under_asyncio_run():
    class Remote:
        async def __call__(self, test_command, iteration):
            return test_command == "ok"

    assert asyncio.run(CallableValidator(Remote())("ok", 1)).exit_code == 0
    assert asyncio.run(CallableValidator(Remote())("no", 1)).exit_code == 1


async def test_async_callable_validator_rejects_other_return_values():
    async def check(test_command, iteration):
        return "passed"

    with pytest.raises(ConfigurationError, match="returned 'passed'") as raised:
        await CallableValidator(check)("cmd", 1)
    assert WHAT_TO_RETURN in str(raised.value)


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


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), 0, -1, "5", True])
def test_a_validator_timeout_that_is_not_a_positive_finite_number_is_refused(timeout):
    from loops import ExecuteValidateController

    message = f"timeout_s must be a positive, finite number of seconds, got {timeout!r}"
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        ShellValidator(timeout_s=timeout)
    with pytest.raises(ConfigurationError, match=re.escape(message)):  # a NaN would never cap the run's time left
        ExecuteValidateController(validator_timeout_s=timeout)


# --- a test command that finds no tests ----------------------------------------------------------


@pytest.mark.parametrize(("command", "found"), [
    ("pytest -q test_x.py", None),
    ("pytest -q test_nope.py", "it names 'test_nope.py'"),
    ("python -m pytest -q -p no:cacheprovider test_x.py::test_one", None),
    ("python3 -m pytest -x tests/test_nope.py::test_one", "it names 'tests/test_nope.py::test_one'"),
    ("pytest -k test_nope.py test_x.py", None),  # -k's value is no path
    ("pytest --pyargs mypackage", None),
    ("pytest -q", None),  # test_x.py is there
    ("python -c 'import sys'", None),  # not pytest: only its run tells
    ("make test", None),
])
def test_missing_tests_reads_the_files_a_pytest_command_names(tmp_path, command, found):
    (tmp_path / "test_x.py").write_text("def test_one():\n    pass\n")

    problem = missing_tests(command, tmp_path)

    assert problem is None if found is None else found in problem


def test_missing_tests_in_a_workspace_without_test_files_unless_the_loop_writes_one(tmp_path):
    assert "holds no files (pytest: no tests ran)" in missing_tests("pytest -q", tmp_path)
    (tmp_path / "solution.py").write_text("")
    assert "holds no test file (test_*.py or *_test.py)" in missing_tests("pytest -q", tmp_path)
    assert missing_tests("pytest -q", tmp_path, written=["test_solution.py"]) is None
    (tmp_path / "pytest.ini").write_text("[pytest]\npython_files = check_*.py\n")
    assert missing_tests("pytest -q", tmp_path) is None  # pytest's configuration decides: only its run tells


def test_ran_no_tests_reads_pytests_exit_codes_4_and_5(tmp_path):
    (tmp_path / "test_empty.py").write_text("")
    pytest_command = shlex.join([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
    shell = ShellValidator(workspace=tmp_path)

    assert ran_no_tests(shell.run(pytest_command)) == "pytest collected no tests (no tests ran, exit code 5)"
    assert ran_no_tests(shell.run(f"{pytest_command} test_nope.py")) == (
        "pytest said 'ERROR: file or directory not found: test_nope.py' (exit code 4)")
    assert ran_no_tests(ValidationResult(exit_code=5, stdout="5 failed")) is None  # another command's exit code 5
    assert ran_no_tests(ValidationResult(exit_code=1, stdout="1 failed in 0.1s")) is None
